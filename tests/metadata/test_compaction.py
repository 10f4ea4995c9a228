"""Sources far taller than the rows joined to them are kept as the rows in use (metadata.parts.
compacted): the operators pass over those rows only, while the metadata still describes the
user's sources, so it reloads with them."""

import numpy as np
import scipy.sparse as sp

from ilargi import NormalizedMatrix


def _tall(n_dim=1_000, sparse=False, nan_row=None):
    rng = np.random.default_rng(0)
    fact = rng.normal(size=(6, 2))
    dim = rng.normal(size=(n_dim, 3))
    if nan_row is not None:
        dim[nan_row] = np.nan
    fk = np.array([7, -1, 500, 7, 999, 500])  # three of 1,000 rows, one target row absent
    other = np.arange(n_dim, dtype=float)[:, None]  # a second part of the same table
    dims = [sp.csr_matrix(dim), sp.csr_matrix(other)] if sparse else [dim, other]
    return [fact, *dims], [None, fk, fk], [[0, 1], [2, 3, 4], [5]], (6, 6)


def _dense(sources, rows, cols, shape):
    out = np.zeros(shape)
    for source, r, c in zip(sources, rows, cols):
        source = source.toarray() if sp.issparse(source) else source
        r = np.arange(shape[0]) if r is None else r
        out[np.ix_(np.flatnonzero(r >= 0), c)] = source[r[r >= 0]]
    return out


def test_tall_dimension_kept_as_its_used_rows():
    for sparse in (False, True):
        sources, rows, cols, shape = _tall(sparse=sparse)
        T = NormalizedMatrix.from_parts(sources, rows, cols, shape)
        fact, dim, other = T.parts
        assert fact.source.shape == (6, 2) and dim.source.shape == (3, 3)
        assert other.source.shape == (3, 1) and dim.indicator is other.indicator  # still shared
        np.testing.assert_array_equal(dim.indicator.rows, [0, -1, 1, 0, 2, 1])  # order kept
        np.testing.assert_array_equal(
            other.source.toarray() if sparse else other.source, [[7.0], [500.0], [999.0]]
        )
        expected = _dense(sources, rows, cols, shape)
        np.testing.assert_allclose(T.toarray(), expected, rtol=1e-15)
        x, y = np.arange(6.0), np.linspace(-1, 1, 6)
        np.testing.assert_allclose(T @ x, expected @ x, rtol=1e-12)
        np.testing.assert_allclose(T.T @ y, expected.T @ y, rtol=1e-12)
        np.testing.assert_allclose(T.crossprod(), expected.T @ expected, rtol=1e-12)
        np.testing.assert_allclose(T.sum(axis=0), expected.sum(axis=0), rtol=1e-12)


def test_metadata_describes_the_sources_as_given():
    sources, rows, cols, shape = _tall()
    T = NormalizedMatrix.from_parts(sources, rows, cols, shape)
    meta = T.metadata
    assert meta.source_shapes == [(6, 2), (1_000, 3), (1_000, 1)]
    np.testing.assert_array_equal(meta.rows[1], rows[1])
    back = NormalizedMatrix.from_metadata(meta, sources)
    np.testing.assert_array_equal(back.toarray(), T.toarray())
    # through a row selection, a column selection and a transpose the rows stay the user's
    view = T[np.array([4, 0])][:, np.array([5, 2])].T
    np.testing.assert_array_equal(view.metadata.rows[1], [999, 7])
    assert view.metadata.source_shapes[1] == (1_000, 1)


def test_sources_used_by_at_least_half_or_by_no_row_are_kept_whole():
    sources, rows, cols, shape = _tall(n_dim=5)
    rows = [None, np.array([0, 1, 2, 0, 1, 2]), np.array([0, 1, 2, 0, 1, 2])]
    assert NormalizedMatrix.from_parts(sources, rows, cols, shape).parts[1].source.shape == (5, 3)
    rows = [None, np.full(6, -1), np.full(6, -1)]
    assert NormalizedMatrix.from_parts(sources, rows, cols, shape).parts[1].source.shape == (5, 3)


def test_non_finite_rows_cut_away_no_longer_count():
    sources, rows, cols, shape = _tall(nan_row=3)  # a row no target row takes
    T = NormalizedMatrix.from_parts(sources, rows, cols, shape, allow_nonfinite=True)
    assert T.parts[1].finite and T.nonfinite() == (False, False)
    sources, rows, cols, shape = _tall(nan_row=500)  # a row in use
    T = NormalizedMatrix.from_parts(sources, rows, cols, shape, allow_nonfinite=True)
    assert not T.parts[1].finite and T.nonfinite()[0]


def test_inputs_untouched():
    sources, rows, cols, shape = _tall()
    copies = [s.copy() for s in sources], [None if r is None else r.copy() for r in rows]
    NormalizedMatrix.from_parts(sources, rows, cols, shape)
    for before, after in zip(copies[0], sources):
        np.testing.assert_array_equal(before, after)
    np.testing.assert_array_equal(copies[1][1], rows[1])
