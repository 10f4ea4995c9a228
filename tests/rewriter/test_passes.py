"""The one-pass rules (ilargi.rewriter.passes) on the compiled CPU backend: sparse dimensions stacked
as one CSR, against the materialized table and against the table-by-table route."""

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import threads
from ilargi.backend.links import BinaryLink
from ilargi.rewriter import NormalizedMatrix, training


def _star(dense_dimension=False):
    """A fact table (dense and CSR parts) and two tables, one split into two CSR parts (their
    index vector shared), one with absent rows and its columns out of order."""
    rng = np.random.default_rng(7)
    n = 2_000
    users = sp.random_array((40, 9), density=0.3, format="csr", random_state=1)
    tags = sp.random_array((40, 3), density=0.5, format="csr", random_state=2)
    items = sp.random_array((25, 6), density=0.4, format="csr", random_state=3)
    if dense_dimension:
        items = items.toarray()
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
    T = NormalizedMatrix.from_parts(sources, rows, cols, (n, 24))
    assert T.parts[2].indicator is T.parts[3].indicator
    return T


@pytest.mark.parametrize("nthreads", [1, 2])
@pytest.mark.parametrize("m", [None, 3])
def test_sparse_tables_stacked_as_one_csr(nthreads, m):
    T = _star()
    tabs = T._pass_tables()
    assert tabs.stacked is not None and tabs.stacked.shape == (40 + 25, 24)
    A = T.toarray()
    rng = np.random.default_rng(8)
    x = rng.standard_normal((24,) if m is None else (24, m))
    y = rng.standard_normal((A.shape[0],) if m is None else (A.shape[0], m))
    with threads.threads(nthreads):
        np.testing.assert_allclose(T @ x, A @ x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(T.T @ y, A.T @ y, rtol=1e-12, atol=1e-12)
        labels = (rng.random(A.shape[0]) < 0.4).astype(float)
        loss, grad, total = training.loss_gradient(
            T, x if m is None else x[:, 0], 0.2, BinaryLink(labels)
        )
        z = A @ (x if m is None else x[:, 0]) + 0.2
        r = 1 / (1 + np.exp(-z)) - labels
        np.testing.assert_allclose(grad, A.T @ r, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(loss, np.sum(np.logaddexp(0, z) - labels * z), rtol=1e-12)


def test_a_dense_table_or_a_fold_keeps_the_table_by_table_route():
    assert _star(dense_dimension=True)._pass_tables().stacked is None
    rng = np.random.default_rng(9)
    stores = rng.integers(0, 40, 2_000)
    regions = rng.integers(0, 6, 40)[stores]  # each store in one region: a snowflake
    T = NormalizedMatrix.from_parts(
        [
            sp.random_array((40, 5), density=0.4, format="csr", random_state=5),
            sp.random_array((6, 3), density=0.6, format="csr", random_state=6),
        ],
        [stores, regions],
        [list(range(5)), [5, 6, 7]],
        (2_000, 8),
    )
    tabs = T._pass_tables()
    assert tabs.fold and tabs.stacked is None
    x = rng.standard_normal(8)
    np.testing.assert_allclose(T @ x, T.toarray() @ x, rtol=1e-12, atol=1e-12)
