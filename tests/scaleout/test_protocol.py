"""The arguments and protocols of a Dask-backed matrix: partitions of whole rows (random chunkings
give the in-memory matrix back, snowflakes and NULL rows included), ``persist=`` checked, NumPy's
reduction functions, and every pass of a fit computed by the workers, never on the client."""

import dask
import dask.array as da
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ilargi.models import KMeans, LogisticRegression, Ridge, StandardScaler
from ilargi.scaleout import graph, tasks
from tests.scaleout.conftest import SCENARIOS, assert_close, scenario
from tests.strategies import property_settings


@pytest.fixture(scope="module")
def matrices():
    return {name: scenario(name, n=97) for name in SCENARIOS}


@st.composite
def chunkings(draw, n=97):
    """Rows per partition, or explicit sizes (zeros allowed) summing to n."""
    if draw(st.booleans()):
        return draw(st.integers(3, n + 5))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return [b - a for a, b in zip([0] + cuts, cuts + [n])]


@property_settings(max_examples=10)
@given(name=st.sampled_from(SCENARIOS), chunks=chunkings(), persist=st.booleans())
def test_random_chunkings_give_the_matrix_back(matrices, name, chunks, persist):
    X, y = matrices[name]
    with dask.config.set(scheduler="sync"):
        D = X.to_dask(chunks, persist=persist)
        assert sum(D.chunks[0]) == X.shape[0]
        assert_close(D.compute().toarray(), X.toarray(), what="compute()")
        assert_close(D.T @ y, X.T @ y, what="Tᵀ·y")
        assert_close(D.sum(axis=1).compute(), X.sum(axis=1), what="row sums")
        rows = np.arange(X.shape[0])[::7]
        assert_close(D[rows].compute().toarray(), X.toarray()[rows], what="rows")


@pytest.mark.parametrize(
    "chunks, error, reason",
    [
        (1000.0, TypeError, r"chunks=1000.0 is a float, not a whole number of rows"),
        (1.5, TypeError, r"chunks=1.5 is a float"),
        (np.float64(64), TypeError, r"is a float64"),
        (True, TypeError, r"chunks=True is a bool"),
        ("64", TypeError, r"chunks='64'"),
        ([50.0, 47.0], TypeError, r"partition sizes must be whole numbers of rows, got 50.0"),
        (0, ValueError, r"chunks=0 must be a positive number of rows"),
        ([50, 40], ValueError, r"must be non-negative and sum to the 97 rows"),
    ],
)
def test_chunks_are_whole_rows(matrices, chunks, error, reason):
    X, _ = matrices["dense"]
    with pytest.raises(error, match=reason):
        X.to_dask(chunks)


@pytest.mark.parametrize("persist", ["yes", None, 1, 0, "disk", 1.0])
def test_persist_is_a_bool(matrices, persist):
    X, _ = matrices["dense"]
    with pytest.raises(ValueError, match=r"persist=.*expected True .* or False"):
        X.to_dask(10, persist=persist)
    assert X.to_dask(10, persist=np.False_).persisted is False


@pytest.mark.parametrize("transposed", [False, True], ids=["T", "T.T"])
def test_numpy_reductions(matrices, transposed):
    """np.sum/mean/var/std/min/max reach the matrix's reductions with NumPy's keywords."""
    X, _ = matrices["snowflake"]
    with dask.config.set(scheduler="sync"):
        D = X.to_dask(20, persist=False)
        if transposed:
            X, D = X.T, D.T
        dense = X.toarray()
        for function, extra in [
            (np.sum, {}),
            (np.mean, {}),
            (np.var, {"ddof": 1}),
            (np.std, {}),
            (np.min, {}),
            (np.max, {}),
        ]:
            for axis in (None, 0, 1, -1):
                for keepdims in (False, True):
                    got = function(D, axis=axis, keepdims=keepdims, **extra)
                    got = got.compute() if isinstance(got, da.Array) else got
                    expected = function(dense, axis=axis, keepdims=keepdims, **extra)
                    assert np.shape(got) == np.shape(expected), (function, axis, keepdims)
                    assert_close(got, expected, what=f"{function.__name__} axis={axis}")
        for axis in (None, 0, 1):  # ufunc.reduce of add/maximum/minimum: np.ptp and friends
            got = np.ptp(D, axis=axis)
            got = got.compute() if isinstance(got, da.Array) else got
            assert_close(got, np.ptp(dense, axis=axis), what=f"np.ptp axis={axis}")
        assert_close(
            np.add.reduce(D),
            dense.sum(axis=0) if not transposed else np.add.reduce(dense),
            what="np.add.reduce",
        )
        with pytest.raises(TypeError, match=r"np.multiply.reduce .* use its methods sum"):
            np.multiply.reduce(D)
        down, along = (1, 0) if transposed else (0, 1)  # computed, lazy
        out = np.empty(D.shape[1 - down])
        assert np.sum(D, axis=down, out=out) is out
        assert_close(out, dense.sum(axis=down), what="out=")
        assert np.mean(D, axis=down, dtype=np.float32).dtype == np.float32
        with pytest.raises(TypeError, match="lazy, row-chunked Dask array .* out="):
            np.sum(D, axis=along, out=np.empty(D.shape[1 - along]))
        with pytest.raises(ValueError, match=r"out= must be a NumPy array of shape"):
            np.max(D, axis=down, out=np.empty(3))
        with pytest.raises(TypeError, match="where"):
            np.sum(D, axis=down, where=True)


# ------------------------------------------------------------------------------------------------
# Every pass on the workers


@pytest.fixture
def workers_only(client, monkeypatch):
    """Fail as soon as a partition's matrix is built or its kernels run outside a worker's task
    (on the client).

    The guard replaces, in the client's process only, the two entries every pass goes through:
    the building of a partition's matrix and the kernel-thread setting around its operators.
    Workers unpickle the task functions from their own modules, so they never see it; a task
    that a worker runs (even a worker living in the client's process) has a current worker."""
    ran_on_client = []

    def guarded(original, what):
        def run(*args, **kwargs):
            if graph._worker() is None:
                ran_on_client.append(what)
                raise AssertionError(f"{what} ran on the client, not on a worker")
            return original(*args, **kwargs)

        return run

    monkeypatch.setattr(tasks, "build", guarded(tasks.build, "a partition's build"))
    monkeypatch.setattr(
        tasks, "kernel_threads", guarded(tasks.kernel_threads, "a partition's kernels")
    )
    yield client
    assert not ran_on_client, ran_on_client


def _ran(stream, prefix):
    return sum(1 for task in stream.data if str(task["key"]).startswith(f"ilargi-{prefix}-"))


@pytest.mark.parametrize("persist", [True, False], ids=["persisted", "rebuilt"])
def test_every_pass_of_a_fit_runs_on_the_workers(matrices, workers_only, persist):
    from distributed import get_task_stream

    X, y = matrices["snowflake"]
    D = X.to_dask(25, persist=persist)
    labels = (y > np.median(y)).astype(float)
    with get_task_stream(workers_only) as stream:  # the tasks the workers ran
        model = LogisticRegression(solver="gd", max_iter=3, tol=0.0).fit(D, labels)
        Ridge(alpha=1.0).fit(D, y)
        KMeans(n_clusters=2, max_iter=2, n_init=1, random_state=0).fit(D)
        StandardScaler().fit(D)
    # at least one task per partition and pass, each run by a worker
    assert _ran(stream, "loss") >= model.n_iter_ * D.npartitions
    for prefix in ("normal", "assign", "colsums", "centred"):
        assert _ran(stream, prefix) >= D.npartitions, prefix
