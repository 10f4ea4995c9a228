"""One thread pool at a time (ilargi.rewriter.pool): on the compiled CPU backend at k > 1 threads,
every operator, factorized or materialized, runs with BLAS at one thread around each compiled
kernel it launches and each BLAS call it makes, and BLAS's previous limits come back when it
returns; an operator that does neither leaves BLAS alone. The mechanism is checked, not a
timing: each compiled launch goes through ``threads.apply``, where BLAS's thread counts are read
once it has set Numba's."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import ilargi
from ilargi.backend import backend_of, cpu, cpu_kernels, optional, threads
from ilargi.calibration.runs import operator_calls
from ilargi.chooser.workload import Workload
from ilargi.datasets import make_star
from ilargi.rewriter import training

pytestmark = pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")

WORKLOADS = [
    Workload("lmm", 1),
    Workload("lmm", 8),
    Workload("rmm", 1),
    Workload("tmm", 8),
    Workload("rowsums"),
    Workload("colsums"),
    Workload("crossprod"),
    Workload("gramvec"),
]


def blas_threads():
    return {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


@pytest.fixture
def launches(monkeypatch):
    """The BLAS thread counts seen at each compiled launch (``threads.apply`` precedes each; an
    operator's hold on BLAS may be taken there)."""
    seen = []
    apply = threads.apply

    def recorded():
        k = apply()
        seen.append(blas_threads())
        return k

    monkeypatch.setattr(threads, "apply", recorded)
    return seen


@pytest.fixture(scope="module", params=[1.0, 0.3], ids=["dense", "sparse"])
def star(request):
    nm, y = make_star(
        40_000,
        tuple_ratio=5,
        feature_ratio=2,
        n_dims=2,
        d_fact=6,
        density=request.param,
        target="logistic",
        random_state=0,
    )
    return nm, nm.materialize(), y


def _operators(nm, T, y):
    """(name, call, launches compiled kernels) for every operator of the benchmarks, both
    plans, and the others."""
    rng = np.random.default_rng(0)
    calls, dense = [], isinstance(T, np.ndarray)
    for workload in WORKLOADS:
        fact, mat = operator_calls(nm, T, workload, rng)
        calls += [
            (f"{workload.kind} m={workload.m} factorized", fact, True),  # a CSR table's
            (f"{workload.kind} m={workload.m} materialized", mat, dense),
        ]  # may be SciPy's
    x = rng.standard_normal(nm.shape[1])
    link = backend_of(T).BinaryLink(y.astype(np.float64), None)
    others = [  # (name, call): some run NumPy only
        ("var", lambda: nm.var(axis=0)),
        ("std rows", lambda: nm.std(axis=1)),
        ("min", lambda: nm.min(axis=0)),
        ("mean", lambda: nm.mean()),
        ("crossprod w", lambda: nm.crossprod(rng.random(nm.shape[0]))),
        ("tcrossprod", lambda: nm[:300].tcrossprod()),
        ("loss_gradient", lambda: training.loss_gradient(nm, x, 0.0, link)),
        ("matmul materialized", lambda: nm.matmul(x, plan="materialized")),
        ("gramvec materialized", lambda: nm.gramvec(x, plan="materialized")),
        ("crossprod materialized", lambda: nm.crossprod(plan="materialized")),
    ]
    return calls + [(name, call, False) for name, call in others]


def test_every_operator_runs_its_kernels_with_blas_at_one_thread(star, launches):
    nm, T, y = star
    with ilargi.threads(2):
        assert blas_threads() == {2}
        for name, call, compiled in _operators(nm, T, y):
            launches.clear()
            call()
            assert launches or not compiled, f"{name}: no compiled kernel ran"
            assert all(seen == {1} for seen in launches), f"{name}: BLAS at {launches}"
            assert blas_threads() == {2}, f"{name}: BLAS's limit not restored"
    assert launches and not threads._held


def test_previous_blas_limits_come_back_after_an_operator_and_an_error(star, launches):
    nm, T, _ = star
    with threadpool_limits(
        limits=2, user_api="blas"
    ):  # the caller's own limits, set outside ilargi
        nm.T @ np.ones(nm.shape[0])
        assert launches and all(seen == {1} for seen in launches)
        assert blas_threads() == {2}
        with pytest.raises(ValueError, match="inner dimensions"):
            nm @ np.ones(nm.shape[1] + 1)
        assert blas_threads() == {2} and not threads._held


def test_only_the_compiled_backend_holds_blas(star):
    """The NumPy kernels' parallelism is BLAS's own: their operators leave it at k threads."""
    assert optional(cpu, "one_pool") is None
    nm, T, _ = star
    with ilargi.threads(2), cpu_kernels("numpy"):
        assert optional(backend_of(T), "one_pool") is None
        nm @ np.ones((nm.shape[1], 8))
        assert blas_threads() == {2}


@pytest.mark.parametrize("workload", WORKLOADS, ids=lambda w: f"{w.kind}-{w.m}")
def test_materialized_plan_equals_numpy_on_the_table(star, workload):
    """operator_calls' materialized plan (the backend's kernels on T) against NumPy/SciPy on
    the same table, and the factorized plan against both."""
    nm, T, _ = star
    dense = T.toarray() if hasattr(T, "toarray") else T
    fact, mat = operator_calls(nm, T, workload, np.random.default_rng(3))
    rng = np.random.default_rng(3)  # the same operands, drawn as operator_calls draws them
    n, d = dense.shape

    def shape(rows):
        return (rows,) if workload.m == 1 else (rows, workload.m)

    expected = {
        "lmm": lambda: dense @ rng.standard_normal(shape(d)),
        "rmm": lambda: rng.standard_normal(shape(n)).T @ dense,
        "tmm": lambda: dense.T @ rng.standard_normal(shape(n)),
        "rowsums": lambda: dense.sum(axis=1),
        "colsums": lambda: dense.sum(axis=0),
        "crossprod": lambda: dense.T @ dense,
        "gramvec": lambda: (lambda x, v: dense.T @ (v * (dense @ x)))(
            rng.standard_normal(d), rng.random(n)
        ),
    }[workload.kind]()
    for name, got in (("materialized", mat()), ("factorized", fact())):
        got = got.toarray() if hasattr(got, "toarray") else np.asarray(got)
        np.testing.assert_allclose(
            got, expected, rtol=1e-9, atol=1e-9 * np.abs(expected).max(), err_msg=name
        )


def _small_sparse_star():
    """A star whose sources all have fewer than SMALL_CSR entries: its column sums run every
    kernel on one thread and call no BLAS."""
    from ilargi.backend import compiled

    nm, _ = make_star(
        20_000, tuple_ratio=5, feature_ratio=2, n_dims=2, d_fact=2, density=0.3, random_state=0
    )
    assert all(cpu.is_sparse(p.source) for p in nm.parts)
    assert all(p.source.nnz < compiled.SMALL_CSR for p in nm.parts)
    return nm


def test_an_operator_on_one_thread_without_blas_leaves_blas_alone(monkeypatch, launches):
    """Column sums of small sparse sources: no launch at several threads, no BLAS call, so no
    hold (its cost made such an operator slower at 2 threads than at 1); the same sums."""
    nm = _small_sparse_star()
    held = []
    one_thread = threads._one_thread
    monkeypatch.setattr(threads, "_one_thread", lambda calls: held.append(1) or one_thread(calls))
    with ilargi.threads(1):
        single = nm.sum(axis=0)
    with ilargi.threads(2):
        launches.clear()  # threads() applies its count too
        sums = nm.sum(axis=0)
        assert not held and not launches and blas_threads() == {2}
        assert not threads._held and threads._hold is None
        nm @ np.ones(nm.shape[1])  # a gather into the n rows at 2 threads: held from its launch
        assert held and launches and all(seen == {1} for seen in launches)
        assert blas_threads() == {2}
    np.testing.assert_array_equal(sums, single)
    np.testing.assert_allclose(sums, nm.materialize().toarray().sum(axis=0), rtol=1e-12)


def test_blas_before_any_launch_runs_at_one_thread(star, monkeypatch):
    """The square sums of a dense star whose sources are under ``SMALL`` values (NumPy's chunks,
    not the compiled pass) call BLAS before any launch: the hold is taken at that call, not at
    the first launch, so BLAS never runs on its own pool inside an operator."""
    nm, T, _ = star
    if not isinstance(T, np.ndarray):
        pytest.skip("a dense star's BLAS")
    from ilargi.backend import compiled

    monkeypatch.setattr(compiled, "SMALL", T.size + 1)
    seen = []
    for name in ("row_sums", "square_excess"):
        original = getattr(cpu, name)
        monkeypatch.setattr(
            cpu, name, lambda *a, f=original, **k: seen.append(blas_threads()) or f(*a, **k)
        )
    with ilargi.threads(2):
        rows = nm.sum(axis=1)
        squares = nm.sum_of_squares()
        assert seen and all(counts == {1} for counts in seen), seen
        assert blas_threads() == {2} and not threads._held
    np.testing.assert_allclose(rows, T.sum(axis=1), atol=1e-12 * np.abs(T).sum(axis=1).max())
    np.testing.assert_allclose(squares, (T * T).sum(), rtol=1e-12)


def test_blas_of_the_rewriter_is_held_in_an_operator(monkeypatch):
    """pool.blas: the operator's hold from that call to the operator's end (a nested block does
    not put BLAS back); a null context on a backend that holds nothing."""
    from ilargi.rewriter import pool

    class Kernels:  # a backend with a one_pool, as the compiled one
        one_pool = staticmethod(threads.blas_held_on_demand)

    with ilargi.threads(2):
        with pool.one_pool(Kernels):
            assert blas_threads() == {2}
            with pool.blas(Kernels):
                assert blas_threads() == {1}
            assert blas_threads() == {1}
        assert blas_threads() == {2}
        with pool.blas(cpu):
            assert blas_threads() == {2}
