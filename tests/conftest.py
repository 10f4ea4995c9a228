"""Shared fixtures: the real-datasets folder, the backend parameter and its GPU skip, small stars.

``tests`` is a package: test modules import helpers as ``from tests.strategies import ...`` (pytest's
default import mode puts the repository root, the folder above the package, on ``sys.path``).
"""

import os
from contextlib import contextmanager
from pathlib import Path

# Idle OpenMP threads (Numba's threading layer, LightGBM, scikit-learn) sleep instead of spinning.
# Set before any of them loads its OpenMP runtime, which reads the setting once. With ``-n 2``
# each worker runs its kernels on every core, so a worker's threads spinning between parallel
# regions take the cores the other worker's threads are waiting for; the results are the same
# either way, only the wait differs. A setting of the caller's own is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import pytest

from ilargi import config_context, get_config
from ilargi.backend import cpu_kernels
from tests.backends import BACKENDS

REPO_ROOT = Path(__file__).resolve().parents[1]


def _gpu_unavailable_reason():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"cupy not importable ({type(exc).__name__})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({type(exc).__name__})"
    return None


@pytest.fixture(autouse=True)
def _private_folders(tmp_path_factory):
    """Every test runs inside ``config_context`` with private folders, and whatever it sets with
    ``set_config`` is undone afterwards.

    The cost-model folder is an empty private one unless the test sets its own: a test that
    calibrates by mistake must never write into the user's ~/.cache, which every later run would
    then read instead of the shipped cost model. The host probe's cache is one of this test
    session: a sweep or a calibration under test measures the host afresh, on a machine busy with
    the other tests, and must not leave that measurement in the user's ~/.cache for every later
    decision to read."""
    with config_context(
        chooser_dir=tmp_path_factory.mktemp("chooser"),
        host_dir=tmp_path_factory.getbasetemp() / "host",
    ):
        yield


def pytest_collection_modifyitems(config, items):
    """Skip every test marked ``gpu`` (also the ``backend="gpu"`` cases) with one reason."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = _gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(
    scope="session",
    params=[
        pytest.param(name, marks=pytest.mark.gpu) if name == "gpu" else name for name in BACKENDS
    ],
)
def backend(request):
    """Where the operator under test runs: "cpu" (the compiled kernels), "numpy" (the NumPy/SciPy
    kernels, see :func:`pytest_runtest_call`) or "gpu" (CuPy; skipped without one).

    Session-scoped (a plain string), so hypothesis tests may take it.
    """
    return request.param


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """A test run with ``backend="numpy"`` runs inside ``cpu_kernels("numpy")``, one with "cpu"
    with the compiled dense products for every size: every example of a hypothesis test
    included, which a function-scoped fixture would not cover."""
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    if backend == "numpy":
        with cpu_kernels("numpy"):
            yield
    elif backend == "cpu":
        with _compiled_dense_products():
            yield
    else:
        yield


@contextmanager
def _compiled_dense_products():
    """The compiled dense products (S·X, Sᵀ·Y, Grams, crossprod's fact pass) for sources of any
    size: the property tests' small sources would otherwise go to BLAS."""
    from ilargi.backend import compiled

    previous, compiled.SMALL = compiled.SMALL, 0
    try:
        yield
    finally:
        compiled.SMALL = previous


@pytest.fixture(scope="session")
def datasets_dir():
    """The real normalized datasets (``../shared/datasets`` next to the checkout, or the
    ``datasets_dir`` setting: $ILARGI_DATASETS)."""
    folder = get_config()["datasets_dir"] or REPO_ROOT.parent / "shared" / "datasets"
    if not folder.is_dir():
        pytest.skip(f"datasets folder {folder} not present")
    return folder


@pytest.fixture
def small_star():
    """(nm, table): a 6-row star (fact 2 columns + a 3-row dimension with one left-join miss, its
    columns swapped in T) with affine state, and the same table written out by hand."""
    from ilargi import NormalizedMatrix

    fact = np.arange(12, dtype=float).reshape(6, 2)
    dim = np.array([[1.0, -1.0], [2.0, 0.0], [0.0, 5.0]])
    nm = NormalizedMatrix.from_parts(
        [fact, dim], [None, np.array([2, 0, -1, 1, 2, 0])], [[0, 1], [3, 2]], (6, 4)
    )
    table = np.array(
        [
            [0.0, 1.0, 5.0, 0.0],
            [2.0, 3.0, -1.0, 1.0],
            [4.0, 5.0, 0.0, 0.0],
            [6.0, 7.0, 0.0, 2.0],
            [8.0, 9.0, 5.0, 0.0],
            [10.0, 11.0, -1.0, 1.0],
        ]
    )
    a, b = np.array([1.0, 2.0, -1.0, 0.5]), np.array([0.0, 1.0, 0.0, -2.0])
    return nm * a + b, table * a + b


@pytest.fixture
def trained_host(monkeypatch):
    """The host inside the shipped cost model's training range (see tests/hosts.py)."""
    from tests.hosts import pin_trained_host

    pin_trained_host(monkeypatch)


@pytest.fixture(scope="session")
def chooser_star():
    """(nm, y): a 20,000-row star, TR = 20, FR = 4, inside the shipped chooser model's training
    range (a clear factorized win), shared by the chooser and calibration tests."""
    from ilargi.datasets import make_star

    return make_star(
        n_fact=20_000,
        tuple_ratio=20,
        feature_ratio=4,
        n_dims=2,
        d_fact=10,
        target="logistic",
        random_state=0,
    )
