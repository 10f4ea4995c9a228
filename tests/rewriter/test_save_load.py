"""NormalizedMatrix.save/load: the metadata (npz + JSON) with or without the sources, affine state,
selections, transposes and derived matrices included."""

import tempfile

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given
from hypothesis import strategies as st

from tests.strategies import Case, Scenario, assert_close, cases, property_settings, to_dense


def _rows_taken(part):
    """I_p S_p, dense: the source row each target row takes (zeros where absent)."""
    rows = np.asarray(part.indicator.index_vector())
    taken = to_dense(part.source)[np.maximum(rows, 0)]
    taken[rows < 0] = 0.0
    return taken


def _assert_same_matrix(loaded, original, expected, given=True):
    assert loaded.shape == original.shape and loaded.dtype == original.dtype
    assert [p.name for p in loaded.parts] == [p.name for p in original.parts]
    assert (None if original.columns is None else list(original.columns)) == (
        None if loaded.columns is None else list(loaded.columns)
    )
    for got, want in zip(loaded.parts, original.parts):
        # A load may keep fewer rows of a source than the matrix saved (a row selection of it
        # uses at most half of them): the parts agree in the terms of the sources loaded with
        # (the user's, or those saved: the sources as held) and row by row.
        assert got.indicator.is_identity == want.indicator.is_identity
        (got_rows, got_height) = got.given()  # into the sources it was loaded with
        (want_rows, want_height) = (
            want.given() if given else (want.indicator.rows, want.indicator.n_source)
        )
        assert got_height == want_height
        if want_rows is not None:
            np.testing.assert_array_equal(np.asarray(got_rows), np.asarray(want_rows))
        np.testing.assert_array_equal(got.cols, want.cols)
        assert sp.issparse(got.source) == sp.issparse(want.source)
        np.testing.assert_array_equal(_rows_taken(got), _rows_taken(want))
    np.testing.assert_array_equal(loaded.toarray(), original.toarray())
    assert_close(loaded.toarray(), expected, what="loaded")


@property_settings(30)
@given(case=cases(), with_sources=st.booleans(), named_columns=st.booleans())
@example(  # a slice of every row of a fact table is the identity again, not an index vector
    case=Case(
        Scenario.of(
            parts=[(np.array([[0.5478467492858172]]), None, np.array([0]))],
            shape=(1, 1),
            kinds=["identity/dense"],
        ),
        affine=(np.array([0.5478467492858172]), np.array([-1.8361059042552212])),
        selection=slice(0, None, 1),
        transpose=False,
    ),
    with_sources=False,
    named_columns=False,
)
def test_save_load_round_trip(case, with_sources, named_columns):
    """Affine state, row selection and transpose survive save/load, with or without the sources."""
    from ilargi import NormalizedMatrix

    scenario = case.scenario
    columns = [f"c{j}" for j in range(scenario.shape[1])] if named_columns else None
    nm = case.build(columns=columns)
    with tempfile.TemporaryDirectory() as folder:
        nm.save(folder, sources=with_sources)
        if with_sources:
            loaded = NormalizedMatrix.load(folder)
        else:
            with pytest.raises((FileNotFoundError, ValueError)):
                NormalizedMatrix.load(folder)
            loaded = NormalizedMatrix.load(folder, sources=scenario.sources)
    _assert_same_matrix(loaded, nm, case.expected, given=not with_sources)
    _assert_same_matrix(
        NormalizedMatrix.from_metadata(nm.metadata, scenario.sources), nm, case.expected
    )
    scenario.assert_inputs_untouched()


@pytest.mark.parametrize("rows", [slice(None, 1), slice(1, 3), slice(1, None)])
def test_a_row_slice_records_the_fact_rows_it_keeps_in_the_users_terms(rows):
    """A row slice cuts the fact table's source to a view; its metadata still fits the sources
    the user gave (found by hypothesis: a slice of a two-row fact table was recorded as a
    one-row source), also for a slice of a slice."""
    from ilargi import NormalizedMatrix

    fact, dim = np.array([[0.5], [-0.9], [3.0]]), np.array([[1.0], [2.0]])
    nm = NormalizedMatrix.from_parts([fact, dim], [None, [0, 1, 1]], [[0], [1]], (3, 2))
    for cut in (nm[rows], nm[rows][:1]):
        assert cut.metadata.source_shapes == [(3, 1), (2, 1)]
        again = NormalizedMatrix.from_metadata(cut.metadata, [fact, dim])
        np.testing.assert_array_equal(again.toarray(), cut.toarray())
        with tempfile.TemporaryDirectory() as folder:
            cut.save(folder, sources=True)
            np.testing.assert_array_equal(NormalizedMatrix.load(folder).toarray(), cut.toarray())


def test_load_with_sources_of_wrong_shape():
    from ilargi import NormalizedMatrix

    nm = NormalizedMatrix.from_parts(
        [np.ones((3, 2)), np.ones((2, 1))],
        [None, [1, 0, -1]],
        [[0, 1], [2]],
        (3, 3),
        names=["fact", "dim"],
    )
    with tempfile.TemporaryDirectory() as folder:
        nm.save(folder)
        with pytest.raises(ValueError, match="dim"):
            NormalizedMatrix.load(folder, sources=[np.ones((3, 2)), np.ones((1, 1))])
    with pytest.raises(ValueError, match="dim"):
        NormalizedMatrix.from_metadata(nm.metadata, [np.ones((3, 2)), np.ones((2, 2))])


# A fact table with a zero cell and a left join with a miss: NULL and zero cells for log and 1/x.
LEFT_JOIN_SOURCES = (np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]]), np.array([[0.5], [-1.0]]))


def _left_join():
    from ilargi import NormalizedMatrix

    return NormalizedMatrix.from_parts(
        list(LEFT_JOIN_SOURCES), [None, np.array([1, -1, 0])], [[0, 1], [2]], (3, 3)
    )


@pytest.mark.parametrize(
    "derive",
    [
        lambda nm: np.sin(nm),
        lambda nm: nm**2,
        lambda nm: np.exp(nm * 2.0 + 1.0),
    ],
    ids=["sin", "square", "exp_affine"],
)
def test_metadata_only_save_of_an_elementwise_result_is_refused(derive):
    """A matrix whose sources hold f(S_p) cannot be saved without them: its metadata would load with the
    user's raw sources into the plain table."""
    derived = derive(_left_join())
    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises(ValueError, match="sources=True"):
            derived.save(folder)


def test_metadata_only_save_of_a_column_selection_refuses_the_full_sources():
    """Column selection restricts the sources: the saved metadata names the restricted shapes, so the
    user's full sources are refused at load, naming the part, never read as the plain table."""
    from ilargi import NormalizedMatrix

    derived = _left_join()[:, [2, 0]]
    with tempfile.TemporaryDirectory() as folder:
        derived.save(folder)
        with pytest.raises(ValueError, match=r"part0.*shape"):
            NormalizedMatrix.load(folder, sources=list(LEFT_JOIN_SOURCES))
        restricted = [LEFT_JOIN_SOURCES[0][:, [0]], LEFT_JOIN_SOURCES[1]]
        loaded = NormalizedMatrix.load(folder, sources=restricted)
    np.testing.assert_array_equal(loaded.toarray(), _left_join().toarray()[:, [2, 0]])


@pytest.mark.parametrize(
    "derive",
    [
        lambda nm: np.sin(nm),
        lambda nm: np.log(abs(nm)),
        lambda nm: 1.0 / nm,
        lambda nm: nm[:, [2, 0]],
    ],
    ids=["sin", "log_abs", "reciprocal", "column_selection"],
)
def test_derived_matrix_round_trip_with_sources(derive):
    """Saved with its sources, a derived matrix loads back as itself, non-finite cells (log 0, 1/0,
    which the materialized table holds too) included."""
    from ilargi import NormalizedMatrix

    nm = _left_join()
    with np.errstate(divide="ignore"):
        derived = derive(nm)
        expected = derive(nm.toarray())
    with tempfile.TemporaryDirectory() as folder:
        derived.save(folder, sources=True)
        loaded = NormalizedMatrix.load(folder)
        # The user's raw sources do not fit a derived matrix: refused, never silently wrong.
        with pytest.raises(ValueError, match="transformed by an elementwise function|shape"):
            NormalizedMatrix.load(folder, sources=list(LEFT_JOIN_SOURCES))
    np.testing.assert_array_equal(loaded.toarray(), expected)


def test_load_from_a_folder_without_metadata():
    from ilargi import NormalizedMatrix

    with tempfile.TemporaryDirectory() as folder:
        with pytest.raises((FileNotFoundError, ValueError)):
            NormalizedMatrix.load(folder)
