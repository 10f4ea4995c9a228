"""The CUDA-graph training steps (``ilargi.backend.gpu.graphs``) on the GPU against their eager
twins, a plain NumPy reference and the CPU, on random scenarios, wide stars and NaN/inf in rows no
target row takes.

Tests marked ``gpu`` need CuPy and a CUDA device (tests/conftest.py skips them cleanly otherwise).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from tests.backends import assert_on_device, to_host
from tests.strategies import assert_close, cases, property_settings, wide_star

gpu = pytest.mark.gpu
SEEDS = st.integers(0, 2**32 - 1)
EXAMPLES = 12


def host(result):
    """A NumPy array of a GPU result, checked to be on the device first."""
    assert_on_device(result, "gpu")
    return to_host(result)


def _on_gpu(case):
    return case.build().to("gpu"), case.expected


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
@given(case=cases(transpose=False), fit_intercept=st.booleans(), weighted=st.booleans(), seed=SEEDS)
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
    coef, intercept = fit_logistic_gd(
        *_steps_on(nm), y, 0.2, 20, l2=0.01, fit_intercept=fit_intercept, sample_weight=weights
    )
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


@gpu
def test_graphed_steps_on_wide_shapes():
    from ilargi.backend.gpu.graphs import KMeansLloyd, LogisticGD

    cpu, T0 = wide_star(40, np.float64)
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
        C = np.array(
            [T[assignment == c].mean(axis=0) if (assignment == c).any() else C[c] for c in range(4)]
        )
    assert_close(host(replayed.centroids), C, what="k-means reference")


@gpu
@pytest.mark.parametrize("sparse_dimension", [False, True])
def test_graphed_logistic_gd_ignores_nonfinite_unreferenced_rows(sparse_dimension):
    """NaN/inf in dimension rows no target row takes (allowed) never reach the graphed gradient (0·NaN).
    The operators on such matrices: tests/rewriter/test_errors.py, on each backend."""
    from ilargi import NormalizedMatrix
    from ilargi.backend.gpu.graphs import fit_logistic_gd

    rng = np.random.default_rng(0)
    fact, dimension = rng.uniform(-1, 1, (50, 2)), rng.uniform(-1, 1, (6, 3))
    dimension[4], dimension[5, 1] = np.nan, np.inf
    fk = rng.integers(0, 4, 50)  # rows 4 and 5 are never referenced
    source = sp.csr_matrix(dimension) if sparse_dimension else dimension
    cpu = NormalizedMatrix.from_parts(
        [fact, source], [None, fk], [[0, 1], [2, 3, 4]], (50, 5), allow_nonfinite=True
    )
    nm, expected = cpu.to("gpu"), np.hstack([fact, dimension[fk]])
    labels = (rng.uniform(-1, 1, 50) > 0).astype(np.float64)
    coef, _ = fit_logistic_gd(*_steps_on(nm), labels, 0.1, 5)
    assert_close(
        coef,
        _logistic_reference(expected, labels, 0.1, 0.0, 5, False, None)[0],
        what="graphed logistic GD",
        backend="gpu",
    )
