"""``python -m ilargi.calibration``: bad arguments and malformed sweep CSVs exit with status 2 and one line
naming the file and what is wrong, never a traceback; ``read_sweeps`` raises the same clear errors."""

import subprocess
import sys

import pandas as pd
import pytest

import ilargi.calibration.__main__ as command
from ilargi.chooser.cost_model import REQUIRED, read_sweeps
from tests.sweeps import epyc_sweep


def _sweep(tmp_path, edit=None, name="sweep.csv"):
    rows = epyc_sweep().head(40)
    rows = edit(rows) if edit else rows
    path = tmp_path / name
    rows.to_csv(path, index=False)
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda rows: rows.drop(columns=["scenario"]),
            r"is not a sweep CSV: missing columns \['scenario'\]",
        ),
        (
            lambda rows: rows.drop(columns=["t_fact", "workload"]),
            r"is not a sweep CSV: missing columns \['workload', 't_fact'\]",
        ),
        (lambda rows: rows.assign(t_mat="fast"), r"columns \['t_mat'\] must hold numbers"),
        (lambda rows: rows.assign(n="many"), r"columns \['n'\] must hold numbers"),
        (lambda rows: rows.assign(device="tpu"), r"no cpu rows with positive times"),
        (lambda rows: rows.assign(t_fact=0.0), r"no cpu rows with positive times"),
    ],
)
def test_malformed_sweep_csvs(tmp_path, edit, message):
    path = _sweep(tmp_path, edit)
    with pytest.raises(ValueError, match=message):
        read_sweeps([path])


def test_unreadable_and_mismatched_csvs(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(ValueError, match=r"empty\.csv is not a sweep CSV"):
        read_sweeps([tmp_path / "empty.csv"])
    (tmp_path / "binary.csv").write_bytes(b"\xff\xfe\x00\x01" * 50)
    with pytest.raises(ValueError, match=r"binary\.csv"):
        read_sweeps([tmp_path / "binary.csv"])
    with pytest.raises(FileNotFoundError, match=r"sweep CSV .*missing\.csv does not exist"):
        read_sweeps([tmp_path / "missing.csv"])
    (tmp_path / "broken.csv.xz").write_bytes(b"\xfd7zXZ\x00" + b"\x00" * 40)
    with pytest.raises(ValueError, match=r"broken\.csv\.xz is not a sweep CSV"):
        read_sweeps([tmp_path / "broken.csv.xz"])
    first = _sweep(tmp_path, name="first.csv")
    second = _sweep(tmp_path, lambda rows: rows.assign(extra=1.0), name="second.csv")
    with pytest.raises(
        ValueError, match=r"second\.csv: its columns differ from .*first\.csv's \(\['extra'\]\)"
    ):
        read_sweeps([first, second])
    assert len(read_sweeps([first])) == 40 and set(REQUIRED) <= set(read_sweeps([first]).columns)


def test_an_xz_compressed_sweep_reads_as_the_plain_one(tmp_path):
    plain, packed = _sweep(tmp_path), _sweep(tmp_path, name="sweep.csv.xz")
    assert packed.read_bytes()[:6] == b"\xfd7zXZ\x00"  # pandas wrote it compressed
    pd.testing.assert_frame_equal(read_sweeps([packed]), read_sweeps([plain]))


def test_train_on_a_malformed_csv_exits_2(tmp_path, capsys):
    path = _sweep(tmp_path, lambda rows: rows.drop(columns=["scenario"]))
    assert command.main(["train", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("python -m ilargi.calibration train: error: ") and str(path) in err
    assert "missing columns ['scenario']" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["train", "nothere.csv", "--out", "x"], "argument csv: no such file: 'nothere.csv'"),
        (
            ["sweep", "--out", "x.csv", "--budget-seconds", "0"],
            "argument --budget-seconds: must be a finite number > 0",
        ),
        (
            ["sweep", "--out", "x.csv", "--threads", "1,-2"],
            "argument --threads: must be a positive integer",
        ),
        (
            ["sweep", "--out", "x.csv", "--max-scenarios", "0"],
            "argument --max-scenarios: must be a positive integer",
        ),
        (
            ["sweep", "--out", "x.csv", "--seed", "-1"],
            "argument --seed: must be a non-negative integer",
        ),
        (
            ["calibrate", "--budget-seconds", "-5"],
            "argument --budget-seconds: must be a finite number > 0",
        ),
        (
            ["calibrate", "--budget-seconds", "nan"],
            "argument --budget-seconds: must be a finite number > 0",
        ),
        (["fit"], "argument command: invalid choice: 'fit'"),
    ],
)
def test_bad_arguments_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        command.main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_no_traceback_from_the_command_line(tmp_path):
    path = _sweep(tmp_path, lambda rows: rows.drop(columns=["scenario", "device"]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ilargi.calibration",
            "train",
            str(path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "missing columns ['scenario', 'device']" in done.stderr and str(path) in done.stderr


def test_a_scenario_timed_on_two_hosts_is_one_cross_validation_group(tmp_path):
    first = _sweep(tmp_path, name="epyc.csv")
    second = _sweep(
        tmp_path,
        lambda rows: rows.assign(t_fact=rows["t_fact"] * 2, llc_mib=480.0),
        name="xeon.csv",
    )
    frame = read_sweeps([first, second])
    assert frame["source"].tolist() == [0] * 40 + [1] * 40
    assert frame["group"].iloc[:40].tolist() == frame["group"].iloc[40:].tolist()
    other = _sweep(
        tmp_path, lambda rows: rows.assign(dangling=rows["dangling"] + 0.5), name="other.csv"
    )
    assert set(read_sweeps([first])["group"]).isdisjoint(read_sweeps([other])["group"])
