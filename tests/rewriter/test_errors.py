"""Bad input gets a clear ValueError/TypeError naming the part, column and reason; inputs are never mutated.

Messages are matched on the part name and the reason's key words, not on exact wording.
"""
import copy

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given, strategies as st

from tests.strategies import as_dense, assert_close, assert_matches, property_settings, scenarios, with_unreferenced_rows

FACT = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])  # 4 x 2, identity part
DIM = np.array([[10.0], [20.0], [30.0]])                           # 3 x 1
FK = np.array([2, 0, 1, 0])
NAMES = ["fact", "dim"]
SHAPE = (4, 3)


def _build(sources=None, rows=None, cols=None, shape=SHAPE, names=NAMES, **kwargs):
    from ilargi import NormalizedMatrix
    sources = [FACT, DIM] if sources is None else sources
    rows = [None, FK] if rows is None else rows
    cols = [[0, 1], [2]] if cols is None else cols
    return NormalizedMatrix.from_parts(sources, rows, cols, shape, names=names, **kwargs)


@pytest.fixture
def nm():
    return _build()


def _raises(error, *patterns):
    """pytest.raises whose message must contain every regex in `patterns` (case-insensitive)."""
    return pytest.raises(error, match="(?is)" + "".join(f"(?=.*{p})" for p in patterns))


# --- shape mismatch in @ and the other operand-taking operators ------------------------------------

@pytest.mark.parametrize("operand", [np.ones(4), np.ones((2, 3)), np.ones((3, 1, 1))])
def test_matmul_shape_mismatch(nm, operand):
    if operand.ndim == 3:
        with pytest.raises((ValueError, TypeError)):
            nm @ operand
        return
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        nm @ operand


@pytest.mark.parametrize("operand", [np.ones(3), np.ones((2, 3))])
def test_left_matmul_shape_mismatch(nm, operand):
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        operand @ nm


def test_transpose_matmul_shape_mismatch(nm):
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        nm.T @ np.ones(3)


@pytest.mark.parametrize("vector", [np.ones(2), np.ones(4), np.ones((2, 3))])
def test_row_vector_of_wrong_length(nm, vector):
    with pytest.raises(ValueError):
        nm + vector
    with pytest.raises(ValueError):
        nm * vector


def test_operator_argument_shapes(nm):
    with pytest.raises(ValueError):
        nm.crossprod(np.ones(3))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(2))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(3), v=np.ones(3))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(3), beta=1.0, z=np.ones(4))


@pytest.mark.parametrize("axis", [2, -3])
def test_reduction_axis_out_of_range(nm, axis):
    with pytest.raises((ValueError, TypeError)):
        nm.sum(axis=axis)


def test_tcrossprod_refuses_huge_result():
    """T T^T for 10^6 rows would be 8 TB: refused with a clear error, not an attempted allocation."""
    big = _build([DIM], [np.zeros(10**6, dtype=np.int64)], [[0]], (10**6, 1), names=["dim"])
    with _raises(ValueError, r"tcrossprod|large|size|bound|memory"):
        big.tcrossprod()


# --- row selection -------------------------------------------------------------------------------

@pytest.mark.parametrize("selection", [np.array([0, 4]), np.array([5]), [0, 99]])
def test_selection_out_of_range(nm, selection):
    with pytest.raises((IndexError, ValueError)):
        nm[selection]


def test_selection_mask_of_wrong_length(nm):
    with pytest.raises((IndexError, ValueError)):
        nm[np.array([True, False, True])]


def test_selection_by_floats(nm):
    with pytest.raises((IndexError, TypeError)):
        nm[np.array([0.0, 1.0])]


# --- indices of the metadata ---------------------------------------------------------------------

@pytest.mark.parametrize("bad", [np.array([2, 0, 3, 0]), np.array([2, 0, -2, 0])])
def test_rows_index_out_of_range(bad):
    with _raises(ValueError, "dim", "out of range|range"):
        _build(rows=[None, bad])


@pytest.mark.parametrize("bad", [np.array([2.0, 0.0, 1.0, 0.0]), np.array(["2", "0", "1", "0"])])
def test_rows_non_integer(bad):
    with _raises(TypeError, "dim", "integer"):
        _build(rows=[None, bad])


def test_cols_non_integer():
    with _raises(TypeError, "fact", "integer"):
        _build(cols=[np.array([0.0, 1.0]), [2]])


@pytest.mark.parametrize("bad", [[0, 3], [-1, 1]])
def test_cols_outside_target_columns(bad):
    with _raises(ValueError, "fact", "range"):
        _build(cols=[bad, [2]])


def test_cols_not_injective():
    with _raises(ValueError, "fact", "injective|twice|duplicate", "1"):
        _build(cols=[[1, 1], [2]])


@pytest.mark.parametrize("bad", [[0], [0, 1, 2]])
def test_cols_length_differs_from_source_columns(bad):
    with _raises(ValueError, "fact", "length|columns"):
        _build(cols=[bad, [2]], shape=(4, 4))


@pytest.mark.parametrize("length", [3, 5])
def test_rows_vector_of_wrong_length(length):
    with _raises(ValueError, "dim", "length", str(length)):
        _build(rows=[None, np.zeros(length, dtype=np.int64)])


def test_identity_part_with_wrong_source_rows():
    with _raises(ValueError, "fact", "identity", "4"):
        _build(sources=[FACT[:3], DIM])


def test_list_lengths_disagree():
    with pytest.raises(ValueError):
        _build(rows=[None])
    with pytest.raises(ValueError):
        _build(cols=[[0, 1]])


@pytest.mark.parametrize("shape", [(4, -1), (-4, 3)])
def test_negative_shape(shape):
    with pytest.raises(ValueError):
        _build(shape=shape)


@pytest.mark.parametrize("shape", [(4.5, 3), (4, 3.7), ("4", 3), (4, None)])
def test_shape_must_be_integers(shape):
    """A fractional or textual shape is a caller's mistake, not something to truncate silently."""
    with _raises((TypeError, ValueError), "shape"):
        _build(shape=shape)


def test_column_names_of_wrong_length():
    with _raises(ValueError, "column", "2|3"):
        _build(columns=["a", "b"])


# --- overlapping coverage ------------------------------------------------------------------------

def test_overlap_names_both_parts_and_a_cell():
    # 'left' covers rows 0-2 of column 2 ("price"); 'right' covers rows 3-4 and row 1: cell (1, 2) overlaps.
    left = np.array([[1.0], [2.0], [3.0]])
    right = np.array([[4.0], [5.0]])
    with _raises(ValueError, "left", "right", "overlap", r"\b1\b", "price|2"):
        _build([np.ones((5, 2)), left, right],
               [None, np.array([0, 1, 2, -1, -1]), np.array([-1, 0, -1, 1, 1])],
               [[0, 1], [2], [2]], (5, 3), names=["fact", "left", "right"], columns=["a", "b", "price"])


def test_disjoint_rows_on_shared_columns_are_not_an_overlap():
    nm = _build([np.array([[1.0]]), np.array([[2.0]])], [np.array([0, -1]), np.array([-1, 0])],
                [[0], [0]], (2, 1), names=["first", "second"])
    np.testing.assert_array_equal(nm.toarray(), [[1.0], [2.0]])


def test_overlap_with_an_identity_part():
    with _raises(ValueError, "fact", "dim", "overlap"):
        _build(cols=[[0, 1], [1]])


# --- source contents -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("sparse", [False, True])
def test_nonfinite_sources(value, sparse):
    dim = DIM.copy()
    dim[1, 0] = value
    source = sp.csr_matrix(dim) if sparse else dim
    with _raises(ValueError, "dim", "nan|inf|finite", "allow_nonfinite"):
        _build(sources=[FACT, source])
    nm = _build(sources=[FACT, source], allow_nonfinite=True)
    table = nm.toarray()
    expected_column = np.array([30.0, 10.0, value, 10.0])
    np.testing.assert_array_equal(table[:, 2], expected_column)
    np.testing.assert_array_equal(table[:, :2], FACT)


@property_settings(40)
@given(scenario=scenarios(), value=st.sampled_from([np.nan, np.inf]), seed=st.integers(0, 2**32 - 1))
def test_nonfinite_in_unreferenced_source_rows_stays_out(scenario, value, seed):
    """With allow_nonfinite=True, a NaN/inf in a source row that no target row takes is not in T, so it
    must not reach any result (0 * NaN = NaN in a segment sum or a weighted gram would leak it)."""
    assume(any(r is not None for r in scenario.rows))
    poisoned = with_unreferenced_rows(scenario, value)
    nm, expected = poisoned.build(allow_nonfinite=True), poisoned.dense
    assert_matches(nm, expected, seed, what="unreferenced NaN/inf")
    assert_matches(nm.T, expected.T, seed, what="unreferenced NaN/inf, transposed")
    assert_close(nm.crossprod(), expected.T @ expected, what="crossprod")
    for name in ("sum", "mean", "var", "min", "max"):
        assert_close(getattr(nm, name)(axis=0), getattr(expected, name)(axis=0), what=name)
    assert_close(as_dense(np.exp(nm)), np.exp(expected), what="exp")


@pytest.mark.parametrize("source", [np.array([["a"], ["b"], ["c"]]),
                                    np.array([[1.0], [2.0], [3.0]], dtype=object),
                                    np.array([[1 + 2j], [2], [3]])])
def test_non_numeric_sources(source):
    with _raises(TypeError, "dim", "dtype|number|numeric"):
        _build(sources=[FACT, source])


@pytest.mark.parametrize("fmt", ["coo", "lil", "dok", "bsr", "dia"])
def test_other_sparse_formats_work_or_are_refused_clearly(fmt):
    """CSR/CSC are the documented formats; any other scipy.sparse format is converted exactly or gets a
    TypeError naming the part, never an AttributeError from deep inside."""
    dim = sp.csr_matrix(DIM).asformat(fmt)
    try:
        nm = _build(sources=[FACT, dim])
    except TypeError as error:
        assert "dim" in str(error)
        return
    np.testing.assert_array_equal(nm.toarray(), np.hstack([FACT, DIM[FK]]))


@pytest.mark.parametrize("source", [np.zeros((0, 1)), np.zeros((3, 0)), sp.csr_matrix((0, 1))])
def test_empty_sources(source):
    with _raises(ValueError, "dim", "empty"):
        _build(sources=[FACT, source], cols=[[0, 1], np.array([2] if source.shape[1] else [], dtype=np.int64)])


def test_no_sources_at_all():
    with pytest.raises(ValueError):
        _build(sources=[], rows=[], cols=[], names=[])


@pytest.mark.parametrize("source", [np.array([10.0, 20.0, 30.0]), np.ones((3, 1, 1))])
def test_sources_that_are_not_2d(source):
    with _raises(ValueError, "dim", "2-d|2d|dimension"):
        _build(sources=[FACT, source])


# --- dtypes --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtypes, expected", [
    ((np.int64, np.float64), np.float64),
    ((np.int32, np.int64), np.float64),
    ((np.float32, np.float64), np.float64),
    ((np.float32, np.int64), np.float64),
    ((np.float32, np.float32), np.float32),
    ((np.bool_, np.float32), np.float64),
])
@pytest.mark.parametrize("sparse_dim", [False, True])
def test_dtype_promotion(dtypes, expected, sparse_dim):
    fact = (FACT > 3).astype(dtypes[0]) if dtypes[0] == np.bool_ else FACT.astype(dtypes[0])
    dim = DIM.astype(dtypes[1])
    nm = _build(sources=[fact, sp.csr_matrix(dim) if sparse_dim else dim])
    assert nm.dtype == expected
    materialized = nm.materialize()
    assert materialized.dtype == expected
    assert nm.toarray().dtype == expected
    table = np.hstack([fact.astype(np.float64), DIM[FK]])
    np.testing.assert_allclose(nm.toarray(), table, rtol=1e-6)
    x = np.ones(3, dtype=expected)
    out = nm @ x
    assert out.dtype == expected
    np.testing.assert_allclose(out, table @ np.ones(3), rtol=1e-6)
    # Inputs keep their dtype: the cast is a copy.
    assert fact.dtype == dtypes[0] and dim.dtype == dtypes[1]


def test_float32_stays_float32_through_scalar_and_unary_operations():
    """NumPy keeps float32 for float32 op Python scalar (NEP 50) and for unary ufuncs."""
    nm = _build(sources=[FACT.astype(np.float32), DIM.astype(np.float32)])
    table = nm.toarray()
    for derived, reference in ((nm * 2.0, table * 2.0), (nm + 1, table + 1), (-nm, -table),
                               (np.exp(nm), np.exp(table)), (nm[[0, 2]], table[[0, 2]])):
        assert reference.dtype == np.float32
        assert derived.dtype == np.float32, f"dtype became {derived.dtype}"
        assert derived.toarray().dtype == np.float32


def test_float32_result_follows_numpy_with_float64_operand():
    nm = _build(sources=[FACT.astype(np.float32), DIM.astype(np.float32)])
    assert (nm @ np.ones(3)).dtype == np.result_type(np.float32, np.float64)


# --- inputs are never mutated, not even by failed validation ---------------------------------------

def test_failed_validation_leaves_inputs_alone():
    sources = [FACT.copy(), DIM.astype(np.int64)]
    rows = [None, np.array([2, 0, 7, 0], dtype=np.int32)]
    cols = [np.array([0, 1], dtype=np.int32), [2]]
    before = copy.deepcopy((sources, rows, cols))
    with pytest.raises(ValueError):
        _build(sources=sources, rows=rows, cols=cols)
    for got, kept in zip(sources + rows[1:] + cols, before[0] + before[1][1:] + before[2]):
        assert np.asarray(got).dtype == np.asarray(kept).dtype
        np.testing.assert_array_equal(got, kept)


def test_sparse_source_not_canonicalized_in_place():
    """A CSR with duplicate entries and unsorted indices is read correctly and left as given."""
    data, indices, indptr = np.array([1.0, 2.0, 3.0]), np.array([1, 0, 1]), np.array([0, 3, 3, 3])
    dim = sp.csr_matrix((data.copy(), indices.copy(), indptr.copy()), shape=(3, 2))
    nm = _build(sources=[FACT, dim], cols=[[0, 1], [2, 3]], shape=(4, 4))
    expected_dim = np.array([[2.0, 4.0], [0.0, 0.0], [0.0, 0.0]])
    np.testing.assert_allclose(nm.toarray()[:, 2:], expected_dim[FK])
    np.testing.assert_array_equal(dim.data, data)
    np.testing.assert_array_equal(dim.indices, indices)
    np.testing.assert_array_equal(dim.indptr, indptr)
