"""The worked join kinds of ``docs/design.rst`` ("Data model"), on tiny hand-written tables with the
expected T written out, on each backend (tests/backends.py)."""

import numpy as np
import pytest
import scipy.sparse as sp

from tests.backends import is_sparse, on_backend, to_host
from tests.strategies import assert_close, assert_matches


def _build(sources, rows, cols, shape, **kwargs):
    from ilargi import NormalizedMatrix

    return NormalizedMatrix.from_parts(sources, rows, cols, shape, **kwargs)


def _check(nm, expected, backend):
    nm = on_backend(nm, backend)
    expected = np.asarray(expected, dtype=float)
    assert_close(nm.toarray(), expected, rtol=0.0, what="toarray", backend=backend)
    assert_matches(nm, expected, what="example", backend=backend)
    assert_matches(nm.T, expected.T, what="example, transposed", backend=backend)
    assert_close(
        nm.crossprod(), expected.T @ expected, rtol=1e-12, what="crossprod", backend=backend
    )


def test_star_join(backend):
    """sales(qty, store_id, product_id) joined with store(size, region) and product(price)."""
    sales = np.array([[1.0], [2.0], [3.0], [4.0]])
    store = np.array([[10.0, 1.0], [20.0, 2.0], [30.0, 3.0]])
    product = np.array([[5.5], [7.0]])
    nm = _build(
        [sales, store, product],
        [None, np.array([2, 0, 2, 1]), np.array([1, 1, 0, 1])],
        [[0], [1, 2], [3]],
        (4, 4),
        columns=["qty", "size", "region", "price"],
        names=["sales", "store", "product"],
    )
    _check(nm, [[1, 30, 3, 7.0], [2, 10, 1, 7.0], [3, 30, 3, 5.5], [4, 20, 2, 7.0]], backend)
    assert list(nm.columns) == ["qty", "size", "region", "price"]


def test_star_join_with_sparse_one_hot_dimension(backend):
    fact = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    dim = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
    nm = _build([fact, dim], [None, np.array([1, 1, 0])], [[0, 1], [2, 3, 4]], (3, 5))
    expected = [[1, 0, 0, 0, 1], [0, 1, 0, 0, 1], [0, 0, 1, 0, 0]]
    assert is_sparse(on_backend(nm, backend).materialize())
    _check(nm, expected, backend)


def test_snowflake_composition(backend):
    """lineitem -> orders -> customer: rows_cust[i] = rows_cust_in_orders[rows_orders[i]], -1 propagates."""
    lineitem = np.array([[1.0], [2.0], [3.0], [4.0]])
    orders = np.array([[100.0], [200.0]])
    customer = np.array([[30.0, 1.0], [40.0, 0.0]])
    rows_orders = np.array([1, 0, 1, 0])
    rows_cust_in_orders = np.array([1, -1])  # order 1 has no customer
    rows_cust = np.array([-1, 1, -1, 1])
    composed = np.where(rows_orders >= 0, rows_cust_in_orders[rows_orders], -1)
    np.testing.assert_array_equal(composed, rows_cust)
    nm = _build(
        [lineitem, orders, customer], [None, rows_orders, rows_cust], [[0], [1], [2, 3]], (4, 4)
    )
    _check(nm, [[1, 200, 0, 0], [2, 100, 40, 0], [3, 200, 0, 0], [4, 100, 40, 0]], backend)


def test_left_join_absent_rows_hold_null(backend):
    fact = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    dim = np.array([[7.0], [8.0]])
    nm = _build([fact, dim], [None, np.array([1, -1, 0])], [[0, 1], [2]], (3, 3))
    _check(nm, [[1, 2, 8], [3, 4, 0], [5, 6, 7]], backend)
    # The NULL cell is 0 before an operation and follows it exactly like the materialized table.
    _check(nm + 1.0, [[2, 3, 9], [4, 5, 1], [6, 7, 8]], backend)
    nm = on_backend(nm, backend)
    np.testing.assert_allclose(
        to_host(np.exp(nm).toarray())[1], np.exp([3.0, 4.0, 0.0]), rtol=1e-15
    )
    np.testing.assert_allclose(
        to_host(np.exp(nm * 2.0 - 1.0).toarray())[1], np.exp([5.0, 7.0, -1.0]), rtol=1e-15
    )


def test_full_outer_join_adds_rows(backend):
    """fact FK = [0, 0, 2] into dim (3 rows); dim row 1 has no fact: an extra target row, fact absent."""
    fact = np.array([[1.0], [2.0], [3.0]])
    dim = np.array([[10.0, -1.0], [20.0, -2.0], [30.0, -3.0]])
    nm = _build(
        [fact, dim], [np.array([0, 1, 2, -1]), np.array([0, 0, 2, 1])], [[0], [1, 2]], (4, 3)
    )
    _check(nm, [[1, 10, -1], [2, 10, -1], [3, 30, -3], [0, 20, -2]], backend)


def test_union_blocks(backend):
    """Source A (2 rows) and source B (3 rows, one extra column) stacked: each covers its own rows."""
    a = np.array([[1.0, 2.0], [3.0, 4.0]])
    b = sp.csr_matrix(np.array([[5.0, 0.0, 1.0], [0.0, 0.0, 0.0], [6.0, 7.0, 2.0]]))
    nm = _build(
        [a, b],
        [np.array([0, 1, -1, -1, -1]), np.array([-1, -1, 0, 1, 2])],
        [[0, 1], [0, 1, 2]],
        (5, 3),
        names=["A", "B"],
    )
    _check(nm, [[1, 2, 0], [3, 4, 0], [5, 0, 1], [0, 0, 0], [6, 7, 2]], backend)


def test_many_to_many_pairs(backend):
    """students x courses through enrollment pairs (0,0), (0,2), (1,1), (1,2): one index vector per side."""
    students = np.array([[18.0, 1.0], [22.0, 0.0]])
    courses = np.array([[3.0], [5.0], [4.0]])
    nm = _build(
        [students, courses], [np.array([0, 0, 1, 1]), np.array([0, 2, 1, 2])], [[0, 1], [2]], (4, 3)
    )
    _check(nm, [[18, 1, 3], [18, 1, 4], [22, 0, 5], [22, 0, 4]], backend)


@pytest.mark.parametrize("cols", [[2, 0], np.array([1, 2], dtype=np.int32)])
def test_mapping_permutes_and_skips_columns(backend, cols):
    """Source columns land in any order; a target column no part covers is all NULL (0)."""
    source = np.array([[1.0, 2.0], [3.0, 4.0]])
    nm = _build([source], [None], [cols], (2, 3))
    expected = np.zeros((2, 3))
    expected[:, np.asarray(cols)] = source
    _check(nm, expected, backend)
