"""The GPU backend against the NumPy results: every NormalizedMatrix operator on random DI scenarios,
float64 (relative error ≤ 1e-9) and float32 (≤ 1e-4), the graphed training steps against their
eager twins and a plain reference, the device round trip, and the clear out-of-memory errors.

Tests marked ``gpu`` need CuPy and a CUDA device (tests/conftest.py skips them cleanly otherwise);
``benchmarks/gpu_check.py`` runs them on a GPU machine. The CUDA sources are compile-checked with
nvcc wherever a CUDA toolkit is installed, GPU or not.
"""
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st

from strategies import (assert_close, cases, dense_operand, dense_reference, property_settings,
                        scenarios)

gpu = pytest.mark.gpu
SEEDS = st.integers(0, 2**32 - 1)
EXAMPLES = 12  # each example compiles nothing new after the first: keep the device run short
REPO = Path(__file__).resolve().parent.parent
CUDA_SOURCE = REPO / "ilargi" / "backend" / "cuda" / "ilargi.cu"


def _cupy():
    import cupy
    return cupy


def host(result):
    """A NumPy array of a GPU result (CuPy array or scalar, cupyx sparse, NormalizedMatrix)."""
    import cupyx.scipy.sparse as csp
    if hasattr(result, "materialize"):
        result = result.materialize()
    if csp.issparse(result):
        return result.get().toarray()
    return _cupy().asnumpy(result)


def _on_gpu(case):
    return case.build().to("gpu"), case.expected


@gpu
@property_settings(EXAMPLES)
@given(case=cases())
def test_round_trip_is_exact(case):
    cpu = case.build()
    nm = cpu.to("gpu")
    assert nm.device == "gpu" and nm.to("gpu") is nm
    back = nm.to("cpu")
    assert back.device == "cpu" and back.shape == cpu.shape
    for before, after in zip(cpu.parts, back.parts):
        assert np.array_equal(before.cols, after.cols)
        assert (before.indicator.rows is None) == (after.indicator.rows is None)
        if before.indicator.rows is not None:
            assert np.array_equal(before.indicator.rows, after.indicator.rows)
        source_before, source_after = before.source, after.source
        assert sp.issparse(source_before) == sp.issparse(source_after)
        if sp.issparse(source_before):
            source_before, source_after = source_before.toarray(), source_after.toarray()
        assert np.array_equal(source_before, source_after)
    assert np.array_equal(np.asarray(back), np.asarray(cpu))
    assert np.array_equal(np.asarray(nm), np.asarray(cpu))


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), m=st.sampled_from([None, 1, 3]), seed=SEEDS)
def test_products(case, m, seed):
    cp = _cupy()
    nm, expected = _on_gpu(case)
    rows, cols = expected.shape
    x = dense_operand(seed, (cols,) if m is None else (cols, m))
    y = dense_operand(seed + 1, (rows,) if m is None else (m, rows))
    right = nm @ cp.asarray(x)
    assert isinstance(right, cp.ndarray)
    assert_close(host(right), expected @ x, what="nm @ X")
    assert_close(host(cp.asarray(y) @ nm), y @ expected, what="Y @ nm")
    z = dense_operand(seed + 2, (rows,) if m is None else (rows, m))
    assert_close(host(nm.T @ cp.asarray(z)), expected.T @ z, what="nm.T @ Z")
    assert_close(host(nm.T.T @ cp.asarray(x)), expected @ x, what="nm.T.T @ X")


@gpu
@pytest.mark.parametrize("method", ["pieces", "atomic", "csr"])
@property_settings(EXAMPLES)
@given(case=cases(transpose=False), seed=SEEDS)
def test_segment_sum_variants(method, case, seed):
    from ilargi.backend import gpu as kernels
    cp = _cupy()
    nm, expected = _on_gpu(case)
    y = dense_operand(seed, (expected.shape[0], 2))
    saved = kernels.flags.SEGMENT_SUM
    try:
        kernels.flags.SEGMENT_SUM = method
        assert_close(host(nm.T @ cp.asarray(y)), expected.T @ y, what=f"{method} T^T Y")
        assert_close(host(nm.T @ cp.asarray(y[:, 0])), expected.T @ y[:, 0], what=f"{method} T^T y")
    finally:
        kernels.flags.SEGMENT_SUM = saved


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), axis=st.sampled_from([None, 0, 1]))
def test_sums_and_means(case, axis):
    nm, expected = _on_gpu(case)
    assert_close(host(nm.sum(axis=axis)), expected.sum(axis=axis), what=f"sum({axis})")
    assert_close(host(nm.mean(axis=axis)), expected.mean(axis=axis), what=f"mean({axis})")


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), axis=st.sampled_from([None, 0]), ddof=st.sampled_from([0, 1]))
def test_var_std_min_max(case, axis, ddof):
    nm, expected = _on_gpu(case)
    if ddof == 0 or (expected.size if axis is None else expected.shape[0]) >= 2:
        assert_close(host(nm.var(axis=axis, ddof=ddof)), expected.var(axis=axis, ddof=ddof),
                     what=f"var({axis}, ddof={ddof})")
        assert_close(host(nm.std(axis=axis, ddof=ddof)), expected.std(axis=axis, ddof=ddof),
                     what=f"std({axis}, ddof={ddof})")
    assert_close(host(nm.min(axis=axis)), expected.min(axis=axis), what=f"min({axis})")
    assert_close(host(nm.max(axis=axis)), expected.max(axis=axis), what=f"max({axis})")


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), seed=SEEDS)
def test_elementwise(case, seed):
    cp = _cupy()
    nm, expected = _on_gpu(case)
    rng = np.random.default_rng(seed)
    # One value per column of T: a row vector, or a column vector for a transposed view.
    per_column = rng.uniform(0.5, 2.0, (expected.shape[0], 1) if case.transpose
                             else expected.shape[1])
    on_device = cp.asarray(per_column)
    checks = {
        "nm * 2.5 - 1": (nm * 2.5 - 1, expected * 2.5 - 1),
        "3 - nm": (3 - nm, 3 - expected),
        "nm / v": (nm / on_device, expected / per_column),
        "v + nm": (on_device + nm, per_column + expected),
        "nm ** 2": (nm ** 2, expected ** 2),
        "exp": (np.exp(nm), np.exp(expected)),
        "sin": (np.sin(nm), np.sin(expected)),
        "abs": (abs(nm), np.abs(expected)),
    }
    for what, (result, reference) in checks.items():
        assert type(result) is type(nm), f"{what} did not stay factorized"
        assert_close(host(result), reference, what=what)


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), weighted=st.booleans(), seed=SEEDS)
def test_crossprod_tcrossprod(case, weighted, seed):
    cp = _cupy()
    nm, expected = _on_gpu(case)
    w = dense_operand(seed, (expected.shape[0],)) + 0.5 if weighted else np.ones(expected.shape[0])
    gram = nm.crossprod(cp.asarray(w)) if weighted else nm.crossprod()
    assert_close(host(gram), expected.T @ (w[:, None] * expected), what="crossprod")
    assert_close(host(nm.tcrossprod()), expected @ expected.T, what="tcrossprod")


@gpu
@pytest.mark.parametrize("fused", [True, False])
@property_settings(EXAMPLES)
@given(case=cases(), with_v=st.booleans(), with_z=st.booleans(),
       alpha=st.sampled_from([1.0, -0.5]), beta=st.sampled_from([0.0, 2.0]), seed=SEEDS)
def test_gramvec(fused, case, with_v, with_z, alpha, beta, seed):
    from ilargi.backend import gpu as kernels
    cp = _cupy()
    nm, expected = _on_gpu(case)
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    y, v, z = rng.uniform(-1, 1, cols), rng.uniform(-1, 2, rows), rng.uniform(-1, 1, cols)
    saved = kernels.flags.FUSED_GRAMVEC
    try:
        kernels.flags.FUSED_GRAMVEC = fused
        out = nm.gramvec(cp.asarray(y), v=cp.asarray(v) if with_v else None, alpha=alpha,
                         beta=beta, z=cp.asarray(z) if with_z else None)
    finally:
        kernels.flags.FUSED_GRAMVEC = saved
    reference = alpha * (expected.T @ ((v if with_v else 1.0) * (expected @ y)))
    if with_z:
        reference = reference + beta * z
    assert isinstance(out, cp.ndarray) and out.shape == (cols,)
    assert_close(host(out), reference, what=f"gramvec fused={fused}")


@gpu
@property_settings(EXAMPLES)
@given(case=cases(), seed=SEEDS)
def test_selection_and_materialize(case, seed):
    import cupyx.scipy.sparse as csp
    cp = _cupy()
    nm, expected = _on_gpu(case)
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, rows, size=max(1, rows // 2))
    keep = np.sort(rng.choice(cols, size=max(1, cols // 2), replace=False))
    if not case.transpose:  # a device index selects rows of T (columns of a view need host ones)
        assert_close(host(nm[cp.asarray(idx)]), expected[idx], what="nm[rows] (device index)")
    assert_close(host(nm[idx]), expected[idx], what="nm[rows]")
    unique = np.unique(idx)
    assert_close(host(nm[unique, keep]), expected[np.ix_(unique, keep)], what="nm[rows, cols]")
    assert_close(host(nm[rows // 2:]), expected[rows // 2:], what="nm[slice]")
    materialized = nm.materialize()
    assert csp.issparse(materialized) or isinstance(materialized, cp.ndarray)
    assert_close(host(materialized), expected, what="materialize")
    assert_close(np.asarray(nm), expected, what="np.asarray")


@gpu
@pytest.mark.parametrize("sparse_dimension", [False, True])
def test_nonfinite_unreferenced_rows_stay_out(sparse_dimension):
    """NaN/inf in dimension rows no target row takes (allowed) never reach a sum (0·NaN)."""
    from ilargi import NormalizedMatrix
    cp = _cupy()
    rng = np.random.default_rng(0)
    fact, dimension = rng.uniform(-1, 1, (50, 2)), rng.uniform(-1, 1, (6, 3))
    dimension[4], dimension[5, 1] = np.nan, np.inf
    fk = rng.integers(0, 4, 50)  # rows 4 and 5 are never referenced
    source = sp.csr_matrix(dimension) if sparse_dimension else dimension
    cpu = NormalizedMatrix.from_parts([fact, source], [None, fk], [[0, 1], [2, 3, 4]], (50, 5),
                                      allow_nonfinite=True)
    nm, expected = cpu.to("gpu"), np.hstack([fact, dimension[fk]])
    y = rng.uniform(-1, 1, 50)
    assert_close(host(nm.T @ cp.asarray(y)), expected.T @ y, what="T^T y")
    assert_close(host(nm.sum(axis=0)), expected.sum(axis=0), what="colSums")
    assert_close(host(nm.crossprod()), expected.T @ expected, what="crossprod")
    assert_close(host(nm.gramvec(cp.asarray(y[:5]))), expected.T @ (expected @ y[:5]),
                 what="gramvec")
    from ilargi.backend.gpu.graphs import fit_logistic_gd
    labels = (y > 0).astype(np.float64)
    coef, _ = fit_logistic_gd(*_steps_on(nm), labels, 0.1, 5)
    assert_close(host(coef), _logistic_reference(expected, labels, 0.1, 0.0, 5, False, None)[0],
                 what="graphed logistic GD")


def _wide_star(fact_width, dtype, seed=0):
    """A star whose stacked passes take every branch the small hypothesis scenarios cannot: a
    fact table wider than a warp (two column lanes per lane) or at the 64-column bound, rows of
    Iᵀ and of Z longer than one piece (a 3-row dimension taken by ~1000 target rows each; a
    300-column dimension), several tiles per warp, a left join, a sparse part, a dense part above
    SMALL_DENSE (multiplied by cuBLAS), and a table split into two parts that share one indicator
    (as Table.to_matrix builds numeric and one-hot parts)."""
    from ilargi import NormalizedMatrix
    rng = np.random.default_rng(seed)
    n = 3000
    widths = [fact_width, 4, 300, 6, 200, 5]
    sources = [rng.standard_normal((n, fact_width)), rng.standard_normal((3, 4)),
               rng.standard_normal((20, 300)),
               sp.random(50, 6, density=0.4, format="csr", random_state=seed),
               rng.standard_normal((700, 200)),
               sp.random(50, 5, density=0.5, format="csr", random_state=seed + 1)]
    fk = rng.integers(0, 50, n)
    rows = [None, rng.integers(0, 3, n), rng.integers(0, 20, n), fk, rng.integers(-1, 700, n), fk]
    starts = np.cumsum([0] + widths)
    cols = [np.arange(starts[k], starts[k + 1]) for k in range(len(widths))]
    sources = [s.astype(dtype) for s in sources]
    shape = (n, int(starts[-1]))
    parts = list(NormalizedMatrix.from_parts(sources, rows, cols, shape).parts)
    parts[5] = parts[5].with_indicator(parts[3].indicator)
    return NormalizedMatrix(parts, shape), dense_reference(sources, rows, cols, shape)


@gpu
@pytest.mark.parametrize("fact_width", [5, 40, 64])
@pytest.mark.parametrize("stacked", [True, False])
def test_stacked_passes_on_wide_shapes(fact_width, stacked):
    from ilargi.backend import gpu as kernels
    cp = _cupy()
    cpu, T0 = _wide_star(fact_width, np.float64)
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 2.0, T0.shape[1]), rng.uniform(-1, 1, T0.shape[1])
    saved = kernels.flags.STACKED
    try:
        kernels.flags.STACKED = stacked
        for nm, T in ((cpu.to("gpu"), T0), ((cpu * a + b).to("gpu"), T0 * a + b)):
            n, d = T.shape
            x, X3 = rng.standard_normal(d), rng.standard_normal((d, 3))
            y, Y3, v = rng.standard_normal(n), rng.standard_normal((n, 3)), rng.random(n)
            assert_close(host(nm @ cp.asarray(x)), T @ x, what="T x")
            assert_close(host(nm @ cp.asarray(X3)), T @ X3, what="T X")
            assert_close(host(cp.asarray(y) @ nm), y @ T, what="y T")
            assert_close(host(nm.T @ cp.asarray(Y3)), T.T @ Y3, what="T^T Y")
            assert_close(host(nm.sum(axis=0)), T.sum(axis=0), what="colSums")
            assert_close(host(nm.sum(axis=1)), T.sum(axis=1), what="rowSums")
            assert_close(host(nm.crossprod()), T.T @ T, what="crossprod")
            assert_close(host(nm.crossprod(cp.asarray(v))), T.T @ (v[:, None] * T),
                         what="crossprod(w)")
            assert_close(host(nm.gramvec(cp.asarray(x), v=cp.asarray(v), alpha=0.5)),
                         0.5 * T.T @ (v * (T @ x)), what="gramvec")
    finally:
        kernels.flags.STACKED = saved


@gpu
def test_graphed_steps_on_wide_shapes():
    from ilargi.backend.gpu.graphs import KMeansLloyd, LogisticGD
    cpu, T0 = _wide_star(40, np.float64)
    rng = np.random.default_rng(2)
    a, b = rng.uniform(0.5, 2.0, T0.shape[1]), rng.uniform(-1, 1, T0.shape[1])
    nm, T = (cpu * a + b).to("gpu"), T0 * a + b
    labels = (rng.random(T.shape[0]) < 0.5).astype(np.float64)
    weights = rng.uniform(0.5, 2.0, T.shape[0])
    graphed = LogisticGD(*_steps_on(nm), labels, 0.05, 0.01, True, weights, graph=True)
    assert graphed.graphed, graphed.fallback_reason
    graphed.run(13)  # one replay of a 10-step graph and three eager steps
    w_ref, b_ref = _logistic_reference(T, labels, 0.05, 0.01, 13, True, weights)
    assert_close(host(graphed.coef), w_ref, what="graphed logistic GD")
    assert abs(float(graphed.intercept[0]) - b_ref) <= 1e-9 * max(1.0, abs(b_ref))
    start = T[:4].copy()
    eager = KMeansLloyd(*_steps_on(nm), start, graph=False).run(12)
    replayed = KMeansLloyd(*_steps_on(nm), start, graph=True)
    assert replayed.graphed, replayed.fallback_reason
    replayed.run(12)
    assert np.array_equal(host(eager.labels), host(replayed.labels))
    assert_close(host(replayed.centroids), host(eager.centroids), what="graphed k-means")
    C = start.copy()
    for _ in range(12):
        assignment = ((T[:, None, :] - C[None]) ** 2).sum(axis=2).argmin(axis=1)
        C = np.array([T[assignment == c].mean(axis=0) if (assignment == c).any() else C[c]
                      for c in range(4)])
    assert_close(host(replayed.centroids), C, what="k-means reference")


def _float32_scenario(scenario):
    sources = [s.astype(np.float32) for s in scenario.sources]
    from ilargi import NormalizedMatrix
    nm = NormalizedMatrix.from_parts(sources, scenario.rows, scenario.cols, scenario.shape)
    return nm, dense_reference(sources, scenario.rows, scenario.cols, scenario.shape)


@gpu
@property_settings(EXAMPLES)
@given(scenario=scenarios(), seed=SEEDS)
def test_float32(scenario, seed):
    cp = _cupy()
    cpu, expected = _float32_scenario(scenario)
    nm = cpu.to("gpu")
    assert nm.dtype == np.float32
    rows, cols = expected.shape
    x, y = dense_operand(seed, (cols, 2), np.float32), dense_operand(seed + 1, (rows,), np.float32)
    product = nm @ cp.asarray(x)
    assert product.dtype == np.float32
    assert_close(host(product), expected @ x, rtol=1e-4, what="float32 nm @ X")
    assert_close(host(nm.T @ cp.asarray(y)), expected.T @ y, rtol=1e-4, what="float32 nm.T @ y")
    assert_close(host(nm.gramvec(cp.asarray(x[:, 0]), v=cp.asarray(y))),
                 expected.T @ (y * (expected @ x[:, 0])), rtol=1e-4, what="float32 gramvec")
    assert_close(host(nm.sum(axis=0)), expected.sum(axis=0), rtol=1e-4, what="float32 colSums")
    assert_close(host(nm.crossprod()), expected.T @ expected, rtol=1e-4, what="float32 crossprod")


# ---------------------------------------------------------------------------------------------
# Graphed training steps.

def _steps_on(nm):
    """What the graphed steps take of a GPU NormalizedMatrix T: parts, n, d, scale, shift."""
    assert not nm.transposed, "the graphed steps train on T, not a transposed view"
    n, d = nm.shape
    return nm.parts, n, d, nm.scale, nm.shift


def _logistic_reference(T, y, learning_rate, l2, n_iter, fit_intercept, weights):
    w, b = np.zeros(T.shape[1]), 0.0
    s = np.ones(T.shape[0]) if weights is None else weights
    for _ in range(n_iter):
        r = s * (1.0 / (1.0 + np.exp(-(T @ w + b))) - y) / s.sum()
        w, b = w - learning_rate * (T.T @ r + l2 * w), b - learning_rate * r.sum() * fit_intercept
    return w, b


@gpu
@property_settings(EXAMPLES)
@given(case=cases(transpose=False), fit_intercept=st.booleans(), weighted=st.booleans(),
       seed=SEEDS)
def test_graphed_logistic_gd_matches_eager_and_reference(case, fit_intercept, weighted, seed):
    from ilargi.backend.gpu.graphs import LogisticGD, fit_logistic_gd
    nm, expected = _on_gpu(case)
    rng = np.random.default_rng(seed)
    y = (rng.random(expected.shape[0]) < 0.5).astype(np.float64)
    weights = rng.uniform(0.5, 2.0, expected.shape[0]) if weighted else None
    eager = LogisticGD(*_steps_on(nm), y, 0.2, 0.01, fit_intercept, weights, graph=False).run(20)
    graphed = LogisticGD(*_steps_on(nm), y, 0.2, 0.01, fit_intercept, weights, graph=True)
    assert graphed.graphed, graphed.fallback_reason
    graphed.run(20)
    w_ref, b_ref = _logistic_reference(expected, y, 0.2, 0.01, 20, fit_intercept, weights)
    assert_close(host(eager.coef), host(graphed.coef), what="graphed vs eager coef")
    assert_close(host(graphed.coef), w_ref, what="graphed vs reference coef")
    assert abs(float(graphed.intercept[0]) - b_ref) <= 1e-9 * max(1.0, abs(b_ref))
    coef, intercept = fit_logistic_gd(*_steps_on(nm), y, 0.2, 20, l2=0.01,
                                      fit_intercept=fit_intercept, sample_weight=weights)
    assert_close(host(coef), w_ref, what="fit_logistic_gd")
    assert abs(intercept - b_ref) <= 1e-9 * max(1.0, abs(b_ref))


def _clustered_star(seed, sparse_dimension):
    """A star schema whose joined rows form 3 well-separated clusters (no near-ties)."""
    from ilargi import NormalizedMatrix
    rng = np.random.default_rng(seed)
    n, k = 300, 3
    labels = rng.integers(0, k, n)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    fact = centers[labels] + rng.normal(scale=0.3, size=(n, 2))
    dimension = rng.uniform(0, 1, (6, 3)) * (rng.random((6, 3)) < 0.6)
    dimension = sp.csr_matrix(dimension) if sparse_dimension else dimension
    fk = rng.integers(-1, 6, n)
    nm = NormalizedMatrix.from_parts([fact, dimension], [None, fk], [[0, 1], [2, 3, 4]], (n, 5))
    return nm * rng.uniform(0.5, 1.5, 5) + rng.uniform(-1, 1, 5), labels


def _kmeans_reference(T, centroids, n_iter):
    C = centroids.copy()
    for _ in range(n_iter):
        labels = ((T[:, None, :] - C[None]) ** 2).sum(axis=2).argmin(axis=1)
        for c in range(C.shape[0]):
            if (labels == c).any():
                C[c] = T[labels == c].mean(axis=0)
    return C, labels


@gpu
@pytest.mark.parametrize("sparse_dimension", [False, True])
def test_graphed_kmeans_matches_eager_and_reference(sparse_dimension):
    from ilargi.backend.gpu.graphs import KMeansLloyd, fit_kmeans_lloyd
    cpu, labels = _clustered_star(0, sparse_dimension)
    nm, T = cpu.to("gpu"), cpu.toarray()
    start = T[[int(np.flatnonzero(labels == c)[0]) for c in range(3)]]
    C_ref, labels_ref = _kmeans_reference(T, start, 5)
    eager = KMeansLloyd(*_steps_on(nm), start, graph=False).run(5)
    graphed = KMeansLloyd(*_steps_on(nm), start, graph=True)
    assert graphed.graphed, graphed.fallback_reason
    graphed.run(5)
    for loop in (eager, graphed):
        assert_close(host(loop.centroids), C_ref, what="k-means centroids")
        assert np.array_equal(host(loop.labels), labels_ref)
    centroids, fitted_labels = fit_kmeans_lloyd(*_steps_on(nm), start, 5)
    assert_close(host(centroids), C_ref, what="fit_kmeans_lloyd")


# ---------------------------------------------------------------------------------------------
# Out of memory: a clear error naming the operation, before anything is allocated.

def _free_bytes():
    from ilargi.backend import gpu as kernels
    return kernels.free_memory()


@gpu
def test_materialize_beyond_device_memory_raises_clearly():
    from ilargi import NormalizedMatrix
    from ilargi.backend.gpu import DeviceMemoryError
    n = 4_000_000
    d = int(2 * _free_bytes() / (8 * n)) + 1
    nm = NormalizedMatrix.from_parts([np.ones((1, d))], [np.zeros(n, dtype=np.int64)],
                                     [np.arange(d)], (n, d)).to("gpu")
    with pytest.raises(DeviceMemoryError, match="materializing a dense"):
        nm.materialize()
    assert issubclass(DeviceMemoryError, MemoryError)


@gpu
def test_crossprod_and_tcrossprod_beyond_device_memory_raise_clearly():
    from ilargi import NormalizedMatrix
    from ilargi.backend.gpu import DeviceMemoryError
    side = int(np.sqrt(2 * _free_bytes() / 8)) + 1
    wide = NormalizedMatrix.from_parts([np.ones((1, side))], [np.zeros(2, dtype=np.int64)],
                                       [np.arange(side)], (2, side)).to("gpu")
    with pytest.raises(DeviceMemoryError, match="crossprod"):
        wide.crossprod()
    tall = NormalizedMatrix.from_parts([np.ones((1, 2))], [np.zeros(side, dtype=np.int64)],
                                       [np.arange(2)], (side, 2)).to("gpu")
    with pytest.raises(DeviceMemoryError, match="tcrossprod"):
        tall.tcrossprod(max_bytes=10 ** 18)


# ---------------------------------------------------------------------------------------------
# The CUDA sources compile (no GPU needed, only the CUDA toolkit).

@pytest.mark.parametrize("real", ["float", "double"])
def test_cuda_sources_compile(real, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("GPU test skipped: no CUDA toolkit (nvcc) to compile-check the kernels")
    result = subprocess.run([nvcc, "--ptx", "-arch=sm_90", f"-DREAL={real}", "-o",
                             str(tmp_path / "ilargi.ptx"), str(CUDA_SOURCE)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    ptx = (tmp_path / "ilargi.ptx").read_text()
    launched = set()
    for module in sorted((REPO / "ilargi" / "backend" / "gpu").glob("*.py")):
        launched |= set(re.findall(r'"(ilargi_\w+)"', module.read_text()))
    assert launched and all(f".entry {name}(" in ptx for name in launched), launched
