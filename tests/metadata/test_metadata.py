"""Metadata: indicator and mapping views, the paper's formula, part records, and resolve_overlap."""

import copy

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given

from tests.strategies import (
    assert_close,
    overlap_reference,
    overlapping_parts,
    property_settings,
    scenarios,
    to_dense,
)


def _loop_indicator(rows, n_source):
    """The n x n_p 0/1 matrix by the definition: I[i, rows[i]] = 1 unless absent."""
    dense = np.zeros((len(rows), n_source))
    for i, j in enumerate(rows):
        if j >= 0:
            dense[i, j] = 1.0
    return dense


def _loop_mapping(cols, d):
    dense = np.zeros((d, len(cols)))
    for j, target in enumerate(cols):
        dense[target, j] = 1.0
    return dense


# --- indicator and mapping views ------------------------------------------------------------------


def test_indicator_index_vector_and_csr_view():
    from ilargi.metadata import Indicator

    rows = np.array([2, -1, 0, 2, -1])
    indicator = Indicator(rows, 4, 5)
    assert not indicator.is_identity
    np.testing.assert_array_equal(indicator.index_vector(), rows)
    assert indicator.n_present == 3
    view = indicator.tocsr()
    assert sp.issparse(view) and view.format == "csr" and view.shape == (5, 4)
    np.testing.assert_array_equal(
        view.toarray(), [[0, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]
    )
    np.testing.assert_array_equal(indicator.counts(), [1, 0, 2, 0])  # source row 3 is unreferenced
    np.testing.assert_array_equal(rows, [2, -1, 0, 2, -1])


def test_identity_indicator():
    from ilargi.metadata import Indicator

    indicator = Indicator(None, 3, 3)
    assert indicator.is_identity
    np.testing.assert_array_equal(indicator.index_vector(), [0, 1, 2])
    np.testing.assert_array_equal(indicator.tocsr().toarray(), np.eye(3))


def test_mapping_csr_view():
    from ilargi.metadata import mapping_matrix

    view = mapping_matrix(np.array([3, 0]), 4)
    assert sp.issparse(view) and view.format == "csr" and view.shape == (4, 2)
    np.testing.assert_array_equal(view.toarray(), [[0, 1], [0, 0], [0, 0], [1, 0]])


@property_settings(50)
@given(scenario=scenarios())
def test_paper_formula_from_the_views(scenario):
    """sum_p I_p S_p M_p^T, from the parts' CSR views, is the target table (no ilargi kernel involved)."""
    nm = scenario.build()
    n, d = scenario.shape
    total = np.zeros((n, d))
    assert len(nm.parts) == len(scenario.sources)
    for part, source, rows, cols in zip(nm.parts, scenario.sources, scenario.rows, scenario.cols):
        indicator, mapping = part.indicator.tocsr(), part.mapping_matrix(d)
        held = np.asarray(part.indicator.index_vector())  # into the source as kept
        np.testing.assert_array_equal(
            indicator.toarray(), _loop_indicator(held, part.indicator.n_source)
        )
        np.testing.assert_array_equal(mapping.toarray(), _loop_mapping(np.asarray(cols), d))
        given, n_given = part.given()
        assert n_given == source.shape[0]
        if rows is None:
            np.testing.assert_array_equal(held, np.arange(n))
        else:
            np.testing.assert_array_equal(np.asarray(given), np.asarray(rows))
        total += indicator @ to_dense(part.source) @ mapping.T
    assert_close(total, scenario.dense, rtol=1e-15, what="sum of I_p S_p M_p^T")
    scenario.assert_inputs_untouched()


def test_part_records():
    from ilargi import NormalizedMatrix

    fact, dim = np.ones((3, 2)), np.ones((2, 1))
    nm = NormalizedMatrix.from_parts(
        [fact, dim],
        [None, [1, 0, -1]],
        [[0, 1], [2]],
        (3, 3),
        names=["fact", "dim"],
        columns=["x", "y", "z"],
    )
    assert [part.name for part in nm.parts] == ["fact", "dim"]
    assert list(nm.columns) == ["x", "y", "z"]
    assert nm.parts[0].indicator.is_identity
    np.testing.assert_array_equal(nm.parts[1].cols, [2])
    meta = nm.metadata
    assert tuple(meta.shape) == (3, 3) and list(meta.names) == ["fact", "dim"]
    assert [tuple(s) for s in meta.source_shapes] == [(3, 2), (2, 1)]
    assert meta.rows[0] is None
    np.testing.assert_array_equal(meta.rows[1], [1, 0, -1])
    assert list(meta.columns) == ["x", "y", "z"]


# --- resolve_overlap -----------------------------------------------------------------------------

# A (rows 0, 2) and B (rows 0, 1) share column 1; C (identity) shares column 1 too.
OVERLAP_SOURCES = [
    np.array([[1.0, 2.0], [3.0, 4.0]]),
    np.array([[5.0, 6.0], [7.0, 8.0]]),
    np.array([[9.0, 10.0], [11.0, 12.0], [13.0, 14.0], [15.0, 16.0]]),
]
OVERLAP_ROWS = [np.array([0, -1, 1, -1]), np.array([0, 1, -1, -1]), None]
OVERLAP_COLS = [np.array([0, 1]), np.array([1, 2]), np.array([1, 3])]
OVERLAP_EXPECTED = {
    # first: A owns columns 0-1 in every row (NULL where A is absent), B column 2, C column 3.
    "first": [[1, 2, 6, 10], [0, 0, 8, 12], [3, 4, 0, 14], [0, 0, 0, 16]],
    # coalesce: column 1 comes from the first of A, B, C present in the row.
    "coalesce": [[1, 2, 6, 10], [0, 7, 8, 12], [3, 4, 0, 14], [0, 15, 0, 16]],
}


@pytest.mark.parametrize("rule", ["first", "coalesce"])
def test_resolve_overlap_hand_made(rule):
    from ilargi import NormalizedMatrix
    from ilargi.metadata import resolve_overlap

    before = copy.deepcopy((OVERLAP_SOURCES, OVERLAP_ROWS, OVERLAP_COLS))
    with pytest.raises(ValueError, match="overlap"):
        NormalizedMatrix.from_parts(
            OVERLAP_SOURCES, OVERLAP_ROWS, OVERLAP_COLS, (4, 4), names=["A", "B", "C"]
        )
    sources, rows, cols, names = resolve_overlap(
        OVERLAP_SOURCES, OVERLAP_ROWS, OVERLAP_COLS, names=["A", "B", "C"], rule=rule
    )
    assert all(name.startswith(("A", "B", "C")) for name in names)
    nm = NormalizedMatrix.from_parts(sources, rows, cols, (4, 4), names=names)
    np.testing.assert_array_equal(nm.toarray(), OVERLAP_EXPECTED[rule])
    np.testing.assert_array_equal(
        overlap_reference(OVERLAP_SOURCES, OVERLAP_ROWS, OVERLAP_COLS, (4, 4), rule),
        OVERLAP_EXPECTED[rule],
    )
    for got, kept in zip(
        OVERLAP_SOURCES + OVERLAP_ROWS[:2] + OVERLAP_COLS, before[0] + before[1][:2] + before[2]
    ):
        np.testing.assert_array_equal(got, kept)


@pytest.mark.parametrize("rule", ["first", "coalesce"])
@property_settings(60)
@given(parts=overlapping_parts())
def test_resolve_overlap_random(rule, parts):
    from ilargi import NormalizedMatrix
    from ilargi.metadata import resolve_overlap

    sources, rows, cols, shape, names = parts
    before = copy.deepcopy(parts)
    resolved = resolve_overlap(sources, rows, cols, names=names, rule=rule)
    out_sources, out_rows, out_cols, out_names = resolved
    assert len(out_sources) == len(out_rows) == len(out_cols) == len(out_names)
    assert out_sources, "the first part always keeps its columns"
    nm = NormalizedMatrix.from_parts(out_sources, out_rows, out_cols, shape, names=out_names)
    np.testing.assert_array_equal(nm.toarray(), overlap_reference(sources, rows, cols, shape, rule))
    for got, kept in zip(sources + cols, before[0] + before[2]):
        np.testing.assert_array_equal(to_dense(got), to_dense(kept))
    for got, kept in zip(rows, before[1]):
        assert (got is None) == (kept is None)
        if got is not None:
            np.testing.assert_array_equal(got, kept)


def test_resolve_overlap_unknown_rule():
    from ilargi.metadata import resolve_overlap

    with pytest.raises(ValueError, match="rule"):
        resolve_overlap(OVERLAP_SOURCES, OVERLAP_ROWS, OVERLAP_COLS, rule="last")


@pytest.mark.parametrize("rule", ["first", "coalesce"])
@pytest.mark.parametrize("n_parts", [3, 65, 70])
def test_resolve_overlap_many_parts(rule, n_parts):
    """Many sources sharing a column (no fixed-width bit set of earlier parts)."""
    from ilargi import NormalizedMatrix
    from ilargi.metadata import resolve_overlap

    n = n_parts
    sources = [np.full((1, 1), p + 1.0) for p in range(n_parts - 1)] + [np.full((n, 2), -5.0)]
    rows = [np.where(np.arange(n) == p, 0, -1) for p in range(n_parts - 1)] + [None]
    cols = [np.array([0])] * (n_parts - 1) + [np.array([0, 1])]
    out_sources, out_rows, out_cols, out_names = resolve_overlap(sources, rows, cols, rule=rule)
    nm = NormalizedMatrix.from_parts(out_sources, out_rows, out_cols, (n, 2), names=out_names)
    np.testing.assert_array_equal(
        nm.toarray(), overlap_reference(sources, rows, cols, (n, 2), rule)
    )
