"""calibrate() and the user folder's precedence; the shipped model in an installed package."""

import json
import math
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import ilargi
from ilargi import choose, set_config
from ilargi.chooser.cost_model import _CostModel, _family, load, shipped_folder, train
from tests.sweeps import epyc_sweep, probed

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_FILES = ("chooser_cpu.txt", "chooser_cpu_join.txt", "chooser_cpu.json")
# The shipped model was trained on sweeps with enough fits for regressors of their own.
SHIPPED_FILES = MODEL_FILES + ("chooser_cpu_model.txt", "chooser_cpu_model_join.txt")


def test_calibrate_writes_a_model_that_takes_precedence(tmp_path, monkeypatch):
    folder = tmp_path / "user"
    set_config(chooser_dir=str(folder))
    # 20 s of sweep: time for the kernels its first scenario needs to compile where the Numba
    # cache is cold (~10 s on one core), as on a clean clone where no test compiled them first.
    assert ilargi.calibrate(budget_seconds=40) == folder
    for name in MODEL_FILES + ("chooser_cpu_sweep.csv",):
        assert (folder / name).is_file(), name
    assert load("cpu").folder == folder
    with pytest.raises(ValueError, match="budget_seconds"):
        ilargi.calibrate(budget_seconds=0)


def test_a_model_trained_where_materializing_wins_flips_decisions(
    tmp_path, monkeypatch, chooser_star, trained_host
):
    # the host pinned inside the training range: a probe of a machine busy with the other tests
    # can stray outside it, and the analytic rule would decide this borderline case instead
    nm, _ = chooser_star
    set_config(chooser_dir=str(tmp_path / "empty"))
    assert choose(nm, "crossprod").factorize  # the shipped model: a clear win for factorizing

    # The shipped measurements, but on a machine where the materialized plan is always 10x faster.
    rows = probed(epyc_sweep())
    rows["t_mat"] = rows["t_fact"] / 10
    rows["t_join"] = rows["t_fact"] / 10
    fabricated = tmp_path / "fabricated.csv"
    rows.to_csv(fabricated, index=False)
    folder = tmp_path / "user"
    train([fabricated], folder, folds=2)
    set_config(chooser_dir=str(folder))
    plan = choose(nm, "crossprod")
    assert not plan.factorize and plan.speedup < 1 and str(folder) in plan.reason
    assert not choose(nm, "crossprod", repeats=1).factorize


def test_a_fits_only_sweep_trains_the_fits_alone(tmp_path):
    """train(..., fits_only=[csv]): that sweep's fits join the fits' regressors, its operator calls
    are left out, so the operators' regressors are those of the other sweeps."""
    first = probed(epyc_sweep("chooser_cpu_sweep_seed1"))  # 614 fits: their
    second = probed(epyc_sweep())  # own regressors
    second["t_mat"] = second["t_fact"] / 10  # what the fits-only sweep says: materialize
    paths = tmp_path / "first.csv", tmp_path / "second.csv"
    first.to_csv(paths[0], index=False)
    second.to_csv(paths[1], index=False)
    alone, mixed = tmp_path / "alone", tmp_path / "mixed"
    train([paths[0]], alone, folds=2)
    meta = train([paths[0]], mixed, folds=2, fits_only=[paths[1]])
    fits = second["workload"].map(_family) == "model"
    assert 0 < fits.sum() < len(second) and meta["rows"] == len(first) + int(fits.sum())
    assert meta["fits_only_sweeps"] == ["second.csv"]
    for name in ("chooser_cpu.txt", "chooser_cpu_join.txt"):
        assert (alone / name).read_text() == (mixed / name).read_text()
    assert (alone / "chooser_cpu_model.txt").read_text() != (
        mixed / "chooser_cpu_model.txt"
    ).read_text()


def _run(args, **kwargs):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel of the checkout (built from a copy, so that the build leaves nothing behind)."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    source = tmp_path / "source"
    shutil.copytree(
        REPO_ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".hypothesis", ".pytest_cache", "build", "*.egg-info", "__pycache__"
        ),
    )
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(wheels)])
    return next(wheels.glob("ilargi-*.whl"))


def test_shipped_model_loads_from_an_installed_package(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    for name in SHIPPED_FILES:
        assert f"ilargi/shipped/{name}" in names, f"{name} is not in the wheel"
    site = tmp_path / "site"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ]
    )
    env = dict(os.environ, PYTHONPATH=str(site), ILARGI_CHOOSER_DIR=str(tmp_path / "empty"))
    script = (
        "import ilargi.chooser.cost_model as m; model = m.load('cpu'); "
        "print(m.__file__); print(model.folder)"
    )
    module, folder = _run([sys.executable, "-c", script], env=env, cwd=tmp_path).stdout.split()
    assert Path(module).is_relative_to(site) and Path(folder).is_relative_to(site)


def test_the_wheel_is_lean(wheel):
    """Under 3.5 MB (eight CPU sweeps and two GPU sweeps): the shipped sweeps are xz-compressed CSVs (the EPYC sweeps the tests train on
    stay in tests/data); the package says it is typed."""
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.stat().st_size < 3_500_000, f"{wheel.stat().st_size:,} bytes"
    assert "ilargi/py.typed" in names
    shipped = {name for name in names if name.startswith("ilargi/shipped/")}
    assert not [name for name in shipped if name.endswith(".csv")]
    for device in ("cpu", "gpu"):  # every sweep a shipped model names, compressed
        meta = json.loads((shipped_folder() / f"chooser_{device}.json").read_text())
        for name in meta["sweeps"] + meta.get("fits_only_sweeps", []):
            assert f"ilargi/shipped/{name}.xz" in shipped, name


def test_the_gpu_models_host_range_comes_from_its_compressed_sweeps():
    """The shipped GPU model predates the host probe: its core and thread counts are read from
    the sweeps its JSON names (``.csv``), stored as ``.csv.xz``: one 16-core host."""
    ranges = _CostModel(shipped_folder(), "gpu").device_ranges
    assert ranges == {name: pytest.approx([math.log10(16)] * 2) for name in ("cores", "threads")}


def test_wheel_holds_every_subpackage(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {
        str(init.parent.relative_to(REPO_ROOT)).replace("/", ".")
        for init in (REPO_ROOT / "ilargi").rglob("__init__.py")
    }
    missing = sorted(p for p in packages if f"{p.replace('.', '/')}/__init__.py" not in names)
    assert not missing, f"subpackages missing from the wheel: {missing}"


def test_fits_get_regressors_of_their_own_when_the_sweep_has_enough_of_them(
    tmp_path, monkeypatch, chooser_star
):
    import numpy as np

    from ilargi.chooser import cost_model
    from ilargi.chooser.features import extract, vector
    from ilargi.chooser.workload import Workload

    monkeypatch.setattr(cost_model, "FAMILY_ROWS", 100)
    rows = probed(epyc_sweep())
    sweep = tmp_path / "sweep.csv"
    rows[rows["scenario"] < 60].to_csv(sweep, index=False)
    folder = tmp_path / "model"
    meta = train([sweep], folder, folds=2)
    assert meta["families"] == ["operator", "model"]
    model = cost_model._CostModel(folder, "cpu")
    nm, _ = chooser_star
    for workload in (Workload("lmm", 4), Workload("logreg_lbfgs", 1, 100)):
        features = extract(nm, workload)
        row = np.array([vector(features, model.columns)])
        family = "model" if workload.kind == "logreg_lbfgs" else "operator"
        op, join = model.regressors[family]
        assert model.hybrid  # the regressors correct the analytic rule's log-ratios
        assert model.predict(features) == pytest.approx(
            (
                op.predict(row)[0] + features["analytic_log_speedup"],
                join.predict(row)[0] + features["analytic_log_join"],
            ),
            rel=1e-12,
        )

    # Too few fits for their own regressors: one pair for both, and no stale files of the fits.
    monkeypatch.setattr(cost_model, "FAMILY_ROWS", 10**6)
    assert train([sweep], folder, folds=2)["families"] == ["operator"]
    assert sorted(p.name for p in folder.glob("*.txt")) == [
        "chooser_cpu.txt",
        "chooser_cpu_join.txt",
    ]
    assert list(cost_model._CostModel(folder, "cpu").regressors) == ["operator"]
