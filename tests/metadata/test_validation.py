"""Bad metadata and sources get a clear ValueError/TypeError naming the part, column and reason, when the
parts are built (index vectors, mappings, shapes, overlapping coverage, source contents); inputs are
never mutated, not even by failed validation.

Messages are matched on the part name and the reason's key words, not on exact wording.
"""

import copy

import numpy as np
import pytest
import scipy.sparse as sp

from tests.strategies import raises_all as _raises

FACT = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])  # 4 x 2, identity part
DIM = np.array([[10.0], [20.0], [30.0]])  # 3 x 1
FK = np.array([2, 0, 1, 0])
NAMES = ["fact", "dim"]
SHAPE = (4, 3)


def _build(sources=None, rows=None, cols=None, shape=SHAPE, names=NAMES, **kwargs):
    from ilargi import NormalizedMatrix

    sources = [FACT, DIM] if sources is None else sources
    rows = [None, FK] if rows is None else rows
    cols = [[0, 1], [2]] if cols is None else cols
    return NormalizedMatrix.from_parts(sources, rows, cols, shape, names=names, **kwargs)


# --- indices of the metadata ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.array([2, 0, 3, 0]), np.array([2, 0, -2, 0])])
def test_rows_index_out_of_range(bad):
    with _raises(ValueError, "dim", "out of range|range"):
        _build(rows=[None, bad])


def test_one_rows_array_is_checked_against_every_source_it_indexes():
    """Parts of one table share a rows array, which is validated once per source height: a
    shorter source that it indexes out of range is still refused, by name."""
    short = np.array([[1.0], [2.0]])  # 2 rows: FK's index 2 is out of range for it
    with _raises(ValueError, "short", "out of range|range"):
        _build(
            sources=[FACT, DIM, short],
            rows=[None, FK, FK],
            cols=[[0, 1], [2], [3]],
            shape=(4, 4),
            names=["fact", "dim", "short"],
        )
    nm = _build(
        sources=[FACT, DIM, DIM * 2],
        rows=[None, FK, FK],
        cols=[[0, 1], [2], [3]],
        shape=(4, 4),
        names=["fact", "dim", "dim2"],
    )
    assert nm.parts[1].indicator is nm.parts[2].indicator


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
        _build(
            [np.ones((5, 2)), left, right],
            [None, np.array([0, 1, 2, -1, -1]), np.array([-1, 0, -1, 1, 1])],
            [[0, 1], [2], [2]],
            (5, 3),
            names=["fact", "left", "right"],
            columns=["a", "b", "price"],
        )


def test_disjoint_rows_on_shared_columns_are_not_an_overlap():
    nm = _build(
        [np.array([[1.0]]), np.array([[2.0]])],
        [np.array([0, -1]), np.array([-1, 0])],
        [[0], [0]],
        (2, 1),
        names=["first", "second"],
    )
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


@pytest.mark.parametrize(
    "source",
    [
        np.array([["a"], ["b"], ["c"]]),
        np.array([[1.0], [2.0], [3.0]], dtype=object),
        np.array([[1 + 2j], [2], [3]]),
    ],
)
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
        _build(
            sources=[FACT, source],
            cols=[[0, 1], np.array([2] if source.shape[1] else [], dtype=np.int64)],
        )


def test_no_sources_at_all():
    with pytest.raises(ValueError):
        _build(sources=[], rows=[], cols=[], names=[])


@pytest.mark.parametrize("source", [np.array([10.0, 20.0, 30.0]), np.ones((3, 1, 1))])
def test_sources_that_are_not_2d(source):
    with _raises(ValueError, "dim", "2-d|2d|dimension"):
        _build(sources=[FACT, source])


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
