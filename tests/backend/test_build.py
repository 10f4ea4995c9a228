"""The kernel tiers: the NumPy kernels until the compiled ones are built, one background build, the
switch at the ready marker (not inside a fit), failures recorded; and the warm-up covering every
kernel specialization the operators and estimators call, so that a built environment never
compiles inside a user's call."""

import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import ilargi
from ilargi import backend
from ilargi.backend import compiled, cpu_kernels, kernels_held
from ilargi.backend.compiled import build
from ilargi.rewriter import training

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """ "auto" kernels against a private, empty marker folder; background builds recorded, not run."""
    monkeypatch.setattr(build, "cache_folder", lambda: tmp_path)
    build._paths.cache_clear()
    monkeypatch.setattr(
        build,
        "_state",
        {"ready": False, "started": False, "process": None, "checked": -float("inf")},
    )
    monkeypatch.setattr(build, "RECHECK_SECONDS", 0.0)
    started = []
    monkeypatch.setattr(build, "start_background_build", lambda: started.append(1))
    with cpu_kernels("auto"):
        yield build._paths(), started
    build._paths.cache_clear()


def running():
    return backend.backend_of(np.zeros(1)).__name__.rsplit(".", 1)[-1]


def test_numpy_kernels_run_until_the_marker_then_compiled(fresh):
    paths, started = fresh
    assert running() == "cpu" and started == [1]
    assert running() == "cpu" and started == [1]  # one background build a process
    paths.ready.write_text("built")
    assert running() == "compiled"
    paths.ready.unlink()  # once ready, a process stays on the compiled kernels
    assert running() == "compiled"


def test_a_held_block_keeps_its_kernels(fresh):
    paths, _ = fresh
    with kernels_held():
        assert running() == "cpu"
        paths.ready.write_text("built")
        assert running() == "cpu"
    assert running() == "compiled"


def test_a_fit_keeps_the_kernels_it_started_with(fresh, monkeypatch):
    """The marker appears after the first iteration: every iteration still runs NumPy's."""
    paths, _ = fresh
    X, y = ilargi.datasets.make_star(
        500, tuple_ratio=10, n_dims=2, target="logistic", random_state=0
    )
    seen = []
    loss_gradient = training.loss_gradient

    def spy(T, *args):
        seen.append(running())
        paths.ready.write_text("built")
        return loss_gradient(T, *args)

    monkeypatch.setattr(training, "loss_gradient", spy)
    ilargi.LogisticRegression(max_iter=3, plan="factorized").fit(X, y)
    assert len(seen) > 1 and set(seen) == {"cpu"}
    assert running() == "compiled"


def test_a_failed_build_is_not_retried_and_says_why(fresh):
    paths, started = fresh
    paths.failed.write_text("Traceback ...\nLoweringError: no\n")
    assert running() == "cpu" and started == []
    status = ilargi.kernel_status()
    assert status.running == "numpy" and not status.ready and "LoweringError" in status.failed


def test_the_build_writes_the_marker_or_the_failure(fresh, monkeypatch):
    paths, _ = fresh
    monkeypatch.setattr(build, "warm_up", lambda: 1 / 0)
    assert build._build_locked(paths) == 1
    assert "ZeroDivisionError" in paths.failed.read_text() and not paths.ready.exists()
    monkeypatch.setattr(build, "warm_up", lambda: None)
    assert build._build_locked(paths) == 0
    assert paths.ready.exists() and not paths.failed.exists()


def test_a_second_background_build_leaves_while_one_holds_the_lock(fresh, monkeypatch):
    paths, _ = fresh
    monkeypatch.setattr(build, "warm_up", lambda: pytest.fail("built twice"))
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
                "print('locked', flush=True); time.sleep(30)"
            ),
            str(paths.lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert build.status().building
        monkeypatch.setattr(build.os, "nice", lambda k: 0)
        assert build._background() == 0 and not paths.ready.exists()
    finally:
        holder.kill()
        holder.wait()
    assert not build.status().building


def test_an_unwritable_cache_falls_back_to_compiling_on_first_use(fresh, monkeypatch):
    def unwritable():
        raise PermissionError("read-only")

    build._paths.cache_clear()
    monkeypatch.setattr(build, "cache_folder", unwritable)
    with pytest.warns(RuntimeWarning, match="compile on first use"):
        assert running() == "compiled"


def test_the_numpy_and_compiled_settings_ignore_the_tiers(fresh):
    _, started = fresh
    with cpu_kernels("compiled"):
        assert running() == "compiled"
    with cpu_kernels("numpy"):
        assert running() == "cpu"
    assert started == []


def test_the_background_build_is_a_low_priority_process_of_its_own(monkeypatch):
    calls = []
    monkeypatch.setattr(build.subprocess, "Popen", lambda *a, **k: calls.append((a, k)))
    build.start_background_build()
    (args,), kwargs = calls[0]
    assert args[1:] == ["-m", "ilargi.backend.compiled.build"]
    assert kwargs["start_new_session"] and kwargs["env"]["ILARGI_KERNELS"] == "compiled"


def test_the_marker_names_what_numbas_cache_depends_on(monkeypatch):
    first = build._fingerprint()
    assert first == build._fingerprint()
    monkeypatch.setattr(build.sys, "version", sys.version + " (another build)")
    assert build._fingerprint() != first


# ---------------------------------------------------------------------------------------------
# The warm-up covers what the operators and estimators compile.


def _workloads():
    """Matrices of every kind a user builds (dense and CSR sources, left joins with absent rows,
    a snowflake, a fact table of keys only), at sizes past the kernels' small-input cut-offs."""
    make = ilargi.datasets.make_star
    yield make(
        40_000, tuple_ratio=20, feature_ratio=2, n_dims=2, d_fact=10, target=None, random_state=0
    )[0]
    yield make(
        40_000,
        tuple_ratio=10,
        feature_ratio=4,
        n_dims=2,
        d_fact=6,
        density=0.2,
        join="left",
        dangling=0.1,
        target=None,
        random_state=1,
    )[0]
    yield make(
        40_000,
        tuple_ratio=5,
        feature_ratio=1,
        n_dims=2,
        d_fact=4,
        snowflake=True,
        target=None,
        random_state=2,
    )[0]


def _fit_everything(X):
    z = X @ np.random.default_rng(0).standard_normal(X.shape[1])
    binary, labels = z > np.median(z), np.digitize(z, np.quantile(z, [0.3, 0.6]))  # 3 classes
    for plan in ("factorized", "materialized"):
        for estimator, target in [
            (ilargi.LogisticRegression(max_iter=3, plan=plan), binary),
            (ilargi.LogisticRegression(max_iter=3, plan=plan), labels),
            (ilargi.LogisticRegression(solver="newton-cg", max_iter=2, plan=plan), labels),
            (ilargi.LogisticRegression(solver="gd", max_iter=3, plan=plan), binary),
            (ilargi.LinearRegression(plan=plan), z),
            (ilargi.Ridge(solver="lsqr", max_iter=3, plan=plan), z),
            (ilargi.Ridge(solver="cg", max_iter=3, plan=plan), z),
            (ilargi.KMeans(4, max_iter=3, n_init=1, random_state=0, plan=plan), None),
        ]:
            estimator.fit(X, target)
            estimator.predict(X[:100])
        ilargi.GNMF(3, max_iter=3, random_state=0, plan=plan).fit(abs(X))
        for estimator, target in [
            (ilargi.GradientBoostingRegressor(n_estimators=2, plan=plan), z),
            (ilargi.GradientBoostingClassifier(n_estimators=2, plan=plan), binary),
            (ilargi.GradientBoostingClassifier(n_estimators=2, plan=plan), labels),
        ]:
            estimator.fit(X, target)
            estimator.predict(X[:100])
    ilargi.StandardScaler().fit(X).transform(X) @ np.ones(X.shape[1])


def _operate(X):
    n, d = X.shape
    rng = np.random.default_rng(0)
    x, W, y, Y = rng.random(d), rng.random((d, 8)), rng.random(n), rng.random((n, 8))
    (
        X @ x,
        X @ W,
        y @ X,
        X.T @ y,
        X.T @ Y,
        X.sum(axis=0),
        X.sum(axis=1),
        X.crossprod(),
    )
    X.crossprod(rng.random(n)), X.gramvec(x, rng.random(n)), X.mean(axis=0), X.std(axis=0)
    X.materialize()


def _signatures():
    from numba.core.registry import CPUDispatcher

    return {
        name: set(kernel.signatures)
        for name, kernel in vars(compiled.kernels).items()
        if isinstance(kernel, CPUDispatcher)
    }


@pytest.mark.slow
def test_the_warm_up_compiles_every_specialization_the_library_calls():
    with cpu_kernels("compiled"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build.warm_up()
        before = _signatures()
        for X in _workloads():
            _operate(X)
            _fit_everything(X)
    after = _signatures()
    missed = {
        name: sorted(map(str, after[name] - before[name]))
        for name in after
        if after[name] - before[name]
    }
    assert not missed, f"compiled outside the warm-up: {missed}"


def test_compile_kernels_builds_in_the_foreground_and_is_then_ready(fresh, monkeypatch):
    calls = []
    monkeypatch.setattr(build, "warm_up", lambda: calls.append(time.monotonic()))
    seconds = ilargi.compile_kernels()
    assert calls and seconds >= 0 and fresh[0].ready.exists() and running() == "compiled"


@pytest.mark.parametrize(
    "running, building, fewer", [("numpy", True, 1), ("numpy", False, 0), ("compiled", False, 0)]
)
def test_a_fit_beside_a_build_leaves_the_build_its_core(monkeypatch, running, building, fewer):
    """A BLAS call at every thread waits for the core the background build holds (a first fit
    8-32 s instead of 1 s): while the build runs, a fit on the NumPy kernels takes one core less."""
    from ilargi.backend import KernelStatus
    from ilargi.models import _base

    monkeypatch.setattr(
        _base, "kernel_status", lambda: KernelStatus("auto", running, False, building, None, "")
    )
    seen = []
    with ilargi.threads(2):
        with ilargi.LinearRegression()._iterations(1, "test"):
            seen.append(ilargi.get_num_threads())
    assert seen == [2 - fewer]


# Two processes save two signatures of one cached function in the interleaving that breaks
# Numba's own cache (numba#4807): both read the empty index, A writes its index, B writes its
# index and data, then A writes its data over B's file. Each side waits at most WAIT seconds for
# the other, so under the lock (B's save waits for A's) both go on after a timeout.
RACE_MODULE = """
from numba import njit
from ilargi.backend.compiled.build import lock_caches

@njit(cache=True)
def add_one(x):
    return x + 1

lock_caches(globals())
"""
RACE_SAVER = """
import itertools, pathlib, sys, time
import numpy as np
from numba.core import caching
import race

role, here = sys.argv[1], pathlib.Path(".")
WAIT = 3.0

def meet(done, wait_for):
    if done:
        (here / done).touch()
    deadline = time.monotonic() + WAIT
    while wait_for and not (here / wait_for).exists() and time.monotonic() < deadline:
        time.sleep(0.01)

def save(self, key, data):  # Numba's IndexDataCacheFile.save, with the meeting points
    overloads = self._load_index()
    meet(f"{role}-loaded", "b-loaded" if role == "a" else "a-loaded")
    existing = set(overloads.values())
    data_name = next(name for name in map(self._data_name, itertools.count(1))
                     if name not in existing)
    overloads[key] = data_name
    if role == "b":
        meet(None, "a-indexed")
    self._save_index(overloads)
    if role == "a":
        meet("a-indexed", "b-done")
    self._save_data(data_name, data)

caching.IndexDataCacheFile.save = save
if role == "b":
    meet(None, "a-loaded")
race.add_one(1.5 if role == "a" else np.int64(2))
(here / f"{role}-done").touch()
"""
RACE_LOADER = """
import numpy as np
import race
x, y = race.add_one(1.5), race.add_one(np.int64(2))
assert x == 2.5 and y == 3 and isinstance(y, int), (x, y)
"""


def test_processes_compiling_one_kernel_at_once_leave_a_cache_that_loads_right(tmp_path):
    """Each signature loads its own machine code afterwards (unlocked, the int64 call would run
    the float64 code)."""
    for name, text in (
        ("race.py", RACE_MODULE),
        ("saver.py", RACE_SAVER),
        ("loader.py", RACE_LOADER),
    ):
        (tmp_path / name).write_text(text)
    package_root = str(Path(ilargi.__file__).parents[1])  # this ilargi, not an installed one
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([package_root, os.environ.get("PYTHONPATH", "")])
    )

    def run(*args):
        return subprocess.Popen(
            [sys.executable, *args], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
        )

    savers = [run("saver.py", "a"), run("saver.py", "b")]
    for saver in savers:
        assert saver.wait(timeout=120) == 0, saver.stderr.read()
    loader = run("loader.py")
    assert loader.wait(timeout=120) == 0, loader.stderr.read()
