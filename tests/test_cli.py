"""The ``ilargi`` command: the main job's comparison table, its options, and the calibrate slot."""
import subprocess
import sys

import pytest

import ilargi.calibration.__main__ as calibration_cli
from ilargi.cli import main

SMALL = ["--rows", "3000", "--tuple-ratio", "10"]


def test_python_dash_m_prints_the_comparison_table():
    done = subprocess.run([sys.executable, "-m", "ilargi", *SMALL], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "LogisticRegression on synthetic star" in out
    for plan in ("factorized", "materialized"):
        assert plan in out
    assert "test accuracy" in out and "peak memory" in out and 'plan="auto" picks' in out


@pytest.mark.parametrize("model, metric", [("logistic-gd", "test accuracy"), ("linear", "test R^2"),
                                           ("ridge", "test R^2"), ("kmeans", "test inertia/row"),
                                           ("gnmf", "test rel. error")])
def test_every_model(model, metric, capsys):
    assert main([*SMALL, "--model", model, "--max-iter", "5"]) == 0
    out = capsys.readouterr().out
    assert metric in out and "factorized is" in out


def test_a_single_plan(capsys):
    assert main([*SMALL, "--plan", "auto"]) == 0
    out = capsys.readouterr().out
    assert "factorized is" not in out  # one plan: no ratio line


def test_datasets(datasets_dir, capsys):
    assert main(["--santoku", str(datasets_dir / "santoku" / "Walmart"), "--max-iter", "5"]) == 0
    assert "Santoku" in capsys.readouterr().out
    assert main(["--hamlet", str(datasets_dir / "hamlet" / "Flights"), "--model", "kmeans", "--max-iter", "2"]) == 0
    assert "Hamlet" in capsys.readouterr().out


def test_tpch_defaults_to_ridge_regression(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert main(["--tpch", "0.01"]) == 0
    out = capsys.readouterr().out
    assert "Ridge on TPC-H sf=0.01" in out and "test R^2" in out


def test_calibrate_is_handed_to_the_calibration_command(monkeypatch):
    seen = []
    monkeypatch.setattr(calibration_cli, "main", lambda argv: seen.append(argv) or 0)
    assert main(["calibrate", "--budget-seconds", "5"]) == 0
    assert seen == [["calibrate", "--budget-seconds", "5"]]


def test_bad_options_exit_with_a_message(capsys):
    with pytest.raises(SystemExit):
        main(["--model", "svm"])
    assert "invalid choice" in capsys.readouterr().err
