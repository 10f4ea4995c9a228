"""The ``ilargi`` command: the main job's comparison table, its options, and the calibrate slot."""

import subprocess
import sys

import numpy as np
import pytest

import ilargi.calibration.__main__ as calibration_cli
from ilargi.chooser import choose
from ilargi.cli import PLANS, _warm_up, compare_plans, format_comparison, main
from ilargi.datasets import make_star
from ilargi.models import GradientBoostingClassifier, LogisticRegression
from tests.tools import needs_tpchgen

SMALL = ["--rows", "3000", "--tuple-ratio", "10"]


def test_python_dash_m_prints_the_comparison_table():
    done = subprocess.run(
        [sys.executable, "-m", "ilargi", *SMALL], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "LogisticRegression on synthetic star" in out
    for plan in ("factorized", "materialized"):
        assert plan in out
    assert "test accuracy" in out and "peak memory" in out and 'plan="auto" picks' in out


@pytest.mark.parametrize(
    "model, metric",
    [
        ("logistic-gd", "test accuracy"),
        ("linear", "test R^2"),
        ("ridge", "test R^2"),
        ("kmeans", "test inertia/row"),
        ("gnmf", "test rel. error"),
        ("gbdt", "test accuracy"),
    ],
)
def test_every_model(model, metric, capsys):
    assert main([*SMALL, "--model", model, "--max-iter", "5"]) == 0
    out = capsys.readouterr().out
    assert metric in out and "factorized is" in out


def test_gbdt_trains_the_same_trees_with_both_plans_and_says_what_auto_picks(capsys):
    """--model gbdt: --max-iter is the number of trees; both plans grow the same trees (ilargi's
    factorized, LightGBM's on the table), so the held-out accuracies are equal; plan="auto" is
    LightGBM on the table where it fits in memory (the trees' own rule)."""
    assert main([*SMALL, "--model", "gbdt", "--max-iter", "3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ilargi: GradientBoostingClassifier on synthetic star")
    table = [line.split() for line in out if line.startswith(PLANS)]
    rows = {fields[0]: fields for fields in table if len(fields) == 4}  # plan, time, memory, score
    assert rows["factorized"][-1] == rows["materialized"][-1]
    assert any(
        line.startswith('plan="auto" picks materialized: LightGBM on the table') for line in out
    )


def test_gbdt_warm_up_grows_two_trees():
    X, y = make_star(400, tuple_ratio=10, target="logistic", random_state=0)
    model = GradientBoostingClassifier(plan="factorized")
    _warm_up(model, X, y)
    assert model.n_iter_ == 2


def test_a_single_plan(capsys):
    assert main([*SMALL, "--plan", "auto"]) == 0
    out = capsys.readouterr().out
    assert "factorized is" not in out  # one plan: no ratio line


def test_the_reported_choice_is_the_one_a_multinomial_fit_makes(trained_host):
    """A fit with plan="auto" knows its labels' classes when it chooses (a softmax pass k columns
    wide); the table reports that choice, not that of an unfitted estimator's one column."""
    X, _ = make_star(2000, tuple_ratio=10, random_state=0)
    y = np.arange(X.shape[0]) % 4
    model = LogisticRegression(max_iter=3)
    results = compare_plans(model, X, y)
    reported = format_comparison(model, X, results).splitlines()[-1]
    fitted = LogisticRegression(max_iter=3, plan="auto").fit(X, y)
    # The memory half of the reason ("... of the 1.82 GiB available") moves between two calls.
    decision = choose(X, fitted, repeats=1).reason.split(";")[0]
    assert decision in reported and "m=4" in reported


def test_the_warm_up_fits_two_iterations_and_passes_over_a_sample_that_does_not_suit():
    """compare_plans loads the kernels with an untimed fit on a sample; one class in the sample
    (LogisticRegression raises) must not stop the comparison."""
    X, y = make_star(400, tuple_ratio=10, target="logistic", random_state=0)
    model = LogisticRegression(plan="factorized")
    _warm_up(model, X[np.arange(50)], np.zeros(50))
    assert not hasattr(model, "coef_")
    _warm_up(model, X, y)
    assert model.n_iter_ <= 2


def test_datasets(datasets_dir, capsys):
    assert main(["--santoku", str(datasets_dir / "santoku" / "Walmart"), "--max-iter", "5"]) == 0
    assert "Santoku" in capsys.readouterr().out
    assert (
        main(
            [
                "--hamlet",
                str(datasets_dir / "hamlet" / "Flights"),
                "--model",
                "kmeans",
                "--max-iter",
                "2",
            ]
        )
        == 0
    )
    assert "Hamlet" in capsys.readouterr().out


@needs_tpchgen
def test_tpch_defaults_to_ridge_regression(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["--tpch", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "Ridge on TPC-H sf=0.01" in out and "test R^2" in out


@needs_tpchgen
def test_gbdt_on_tpch_is_a_regressor(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["--tpch", "0.01", "--model", "gbdt", "--max-iter", "3"]) == 0
    out = capsys.readouterr().out
    assert "GradientBoostingRegressor on TPC-H sf=0.01" in out and "test R^2" in out


def test_calibrate_is_handed_to_the_calibration_command(monkeypatch):
    seen = []
    monkeypatch.setattr(calibration_cli, "main", lambda argv: seen.append(argv) or 0)
    assert main(["calibrate", "--budget-seconds", "5"]) == 0
    assert seen == [["calibrate", "--budget-seconds", "5"]]


def test_bad_options_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "svm"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rows", "0"], "argument --rows: must be a positive integer, got '0'"),
        (["--rows", "5"], "argument --rows: must be at least 10, got '5'"),
        (["--rows", "1e5"], "argument --rows: must be an integer, got '1e5'"),
        (["--max-iter", "-3"], "argument --max-iter: must be a positive integer, got '-3'"),
        (["--max-iter", "0"], "argument --max-iter: must be a positive integer, got '0'"),
        (["--threads", "-2"], "argument --threads: must be a non-negative integer, got '-2'"),
        (["--tuple-ratio", "0"], "argument --tuple-ratio: must be a finite number > 0, got '0'"),
        (
            ["--tuple-ratio", "inf"],
            "argument --tuple-ratio: must be a finite number > 0, got 'inf'",
        ),
        (
            ["--feature-ratio", "-1"],
            "argument --feature-ratio: must be a finite number > 0, got '-1'",
        ),
        (
            ["--feature-ratio", "nan"],
            "argument --feature-ratio: must be a finite number > 0, got 'nan'",
        ),
        (["--tpch", "0"], "argument --tpch: must be a finite number > 0, got '0'"),
        (["--seed", "-1"], "argument --seed: must be a non-negative integer, got '-1'"),
        (["--hamlet", "/no/such/folder"], "argument --hamlet: no such folder: '/no/such/folder'"),
        (["--santoku", "/no/such/folder"], "argument --santoku: no such folder: '/no/such/folder'"),
        (["--plan", "fast"], "argument --plan: invalid choice: 'fast'"),
    ],
)
def test_bad_values_exit_2_with_one_line(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ilargi: error: {message}"), err


@pytest.mark.parametrize("kind", ["--hamlet", "--santoku"])
def test_a_folder_that_is_not_a_dataset_exits_2(kind, tmp_path, capsys):
    (tmp_path / "MLY.csv").write_text("not,a\nhamlet,file\n") if kind == "--hamlet" else None
    assert main([kind, str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ilargi: error: ") and str(tmp_path) in err, err


def test_tpch_without_its_generator_exits_2_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing generated yet
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "empty" / "python"))  # nor beside Python
    assert main(["--tpch", "0.01"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ilargi: error: "), err
    assert "tpchgen-cli tool, which is not on PATH: pip install 'ilargi[datasets]'" in err


def test_no_traceback_from_the_command_line(tmp_path):
    for args in (["--rows", "0"], ["--hamlet", str(tmp_path)]):
        done = subprocess.run(
            [sys.executable, "-m", "ilargi", *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("ilargi: error: ")


def test_the_kernels_line_says_which_ran_and_keeps_loading_apart(capsys):
    """The comparison ends with the CPU kernels the fits ran; loading the compiled ones is
    reported apart from the fit times (the untimed warm-up fits)."""
    assert main(SMALL) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("kernels: compiled (Numba); loading them took factorized ")
    assert out[-1].endswith("in the untimed warm-up fits, not in the fit times")


def test_while_the_build_runs_the_line_says_numpy_and_how_to_build(capsys):
    from ilargi.backend import KernelStatus
    from ilargi.cli import describe_kernels

    line = describe_kernels(KernelStatus("auto", "numpy", False, True, None, "/cache"))
    assert line.startswith("kernels: NumPy/SciPy, while the compiled kernels are built")
    assert "python -m ilargi compile" in line
    failed = describe_kernels(
        KernelStatus("auto", "numpy", False, False, "Traceback\nOSError: x\n", "/cache")
    )
    assert failed.endswith("OSError: x")


def test_compile_builds_the_kernels_in_the_foreground(monkeypatch, capsys):
    import ilargi.cli

    calls = []
    monkeypatch.setattr(ilargi.cli, "compile_kernels", lambda quiet: calls.append(quiet))
    assert main(["compile"]) == 0 and calls == [False]
    with pytest.raises(SystemExit):
        main(["compile", "--bogus"])
