"""The NumPy kernels' softmax pass (ilargi.rewriter.softmax) against the joined table, and against
the compiled kernels' fused pass: stars with fact parts, split and partly absent tables, a
snowflake fold, a fact table alone, sample weights, an affine state, blocks of rows."""

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import cpu_kernels, links, threads
from ilargi.rewriter import NormalizedMatrix, softmax, training


def _star(n=3_000):
    """A fact table (dense and CSR parts), a table split into two CSR parts, and a dense table
    with absent rows and its columns out of order."""
    rng = np.random.default_rng(7)
    users = sp.random_array((40, 9), density=0.3, format="csr", random_state=1)
    tags = sp.random_array((40, 3), density=0.5, format="csr", random_state=2)
    items = rng.standard_normal((25, 6))
    sources = [
        rng.standard_normal((n, 2)),
        sp.random_array((n, 4), density=0.5, format="csr", random_state=4),
        users,
        tags,
        items,
    ]
    rows = [None, None, rng.integers(0, 40, n), None, rng.integers(-1, 25, n)]
    rows[3] = rows[2]
    cols = [[0, 1], [2, 3, 4, 5], list(range(6, 15)), [15, 16, 17], [21, 19, 18, 20, 22, 23]]
    return NormalizedMatrix.from_parts(sources, rows, cols, (n, 24))


def _snowflake(n=3_000):
    """Stores, and regions through the stores (folded into them), no fact columns."""
    rng = np.random.default_rng(9)
    stores = rng.integers(0, 40, n)
    regions = rng.integers(0, 6, 40)[stores]
    return NormalizedMatrix.from_parts(
        [
            sp.random_array((40, 5), density=0.4, format="csr", random_state=5),
            rng.standard_normal((6, 3)),
        ],
        [stores, regions],
        [list(range(5)), [5, 6, 7]],
        (n, 8),
    )


def _fact_only(n=3_000):
    rng = np.random.default_rng(3)
    return NormalizedMatrix.from_parts(
        [rng.standard_normal((n, 5))], [None], [list(range(5))], (n, 5)
    )


def _affine(n=3_000):
    T = _star(n)
    rng = np.random.default_rng(4)
    return T * (0.5 + rng.random(T.shape[1])) + rng.standard_normal(T.shape[1])


def _reference(A, W, c, labels, sw):
    z = A @ W + c
    top = z.max(axis=1, keepdims=True)
    p = np.exp(z - top)
    total = p.sum(axis=1, keepdims=True)
    p /= total
    s = np.ones(A.shape[0]) if sw is None else sw
    picked = z[np.arange(A.shape[0]), labels]
    loss = float(s @ (np.log(total[:, 0]) + top[:, 0] - picked))
    R = (p - np.eye(W.shape[1])[labels]) * s[:, None]
    return loss, A.T @ R, R.sum(axis=0)


@pytest.mark.parametrize("build", [_star, _snowflake, _fact_only, _affine])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("k", [3, 7])
def test_the_softmax_pass_is_the_joined_tables(build, weighted, k, monkeypatch):
    monkeypatch.setattr(softmax, "BLOCK_VALUES", 2_000)  # several blocks, a short last one
    T = build()
    A = T.toarray()
    n, d = T.shape
    rng = np.random.default_rng(k)
    W = rng.standard_normal((d, k))
    c = rng.standard_normal(k)
    labels = rng.integers(0, k, n)
    sw = rng.random(n) if weighted else None
    with cpu_kernels("numpy"):
        assert softmax.applies(T._kernels, links.MultinomialLink(labels, k, sw), n)
        loss, grad, total = training.loss_gradient(T, W, c, links.MultinomialLink(labels, k, sw))
    want_loss, want_grad, want_total = _reference(A, W, c, labels, sw)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-12)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(total, want_total, rtol=1e-10, atol=1e-10)


def test_large_scores_stay_finite():
    T = _star()
    rng = np.random.default_rng(1)
    W = 300.0 * rng.standard_normal((T.shape[1], 4))
    labels = rng.integers(0, 4, T.shape[0])
    with cpu_kernels("numpy"):
        loss, grad, total = training.loss_gradient(T, W, 0.0, links.MultinomialLink(labels, 4))
    want_loss, want_grad, want_total = _reference(T.toarray(), W, 0.0, labels, None)
    assert np.isfinite(loss) and np.isfinite(grad).all()
    np.testing.assert_allclose(loss, want_loss, rtol=1e-10)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-9, atol=1e-8)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_both_kernel_tiers_agree(nthreads):
    T = _star(20_000)
    rng = np.random.default_rng(2)
    W = rng.standard_normal((T.shape[1], 5))
    labels = rng.integers(0, 5, T.shape[0])
    results = []
    with threads.threads(nthreads):
        for tier in ("numpy", "compiled"):
            with cpu_kernels(tier):
                link = T._kernels.MultinomialLink(labels, 5)
                results.append(training.loss_gradient(T, W, 0.1, link))
    (l0, g0, t0), (l1, g1, t1) = results
    np.testing.assert_allclose(l0, l1, rtol=1e-12)
    np.testing.assert_allclose(g0, g1, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(t0, t1, rtol=1e-10, atol=1e-10)


def test_labels_outside_the_classes_raise():
    T = _star(100)
    labels = np.zeros(100, dtype=np.intp)
    labels[3] = 4
    with cpu_kernels("numpy"), pytest.raises(ValueError, match="class codes"):
        training.loss_gradient(T, np.zeros((T.shape[1], 4)), 0.0, links.MultinomialLink(labels, 4))
