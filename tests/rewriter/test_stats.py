"""Reductions of NormalizedMatrix (sum, mean, var, std, min, max) against the materialized table.

Absent cells count as the NULL value of the table (0 in T0, b after the affine state), exactly as in the
materialized table.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given, strategies as st

from tests.strategies import assert_close, cases, property_settings, scenarios

AXES_ALL = st.sampled_from([None, 0, 1])
AXES_COLUMNS = st.sampled_from([None, 0])


def _check_reduction(result, reference, axis, what):
    if axis is None:
        assert np.ndim(result) == 0, f"{what}: axis=None should give a scalar, got shape {np.shape(result)}"
    else:
        assert isinstance(result, np.ndarray) and result.ndim == 1, f"{what}: expected a 1-D ndarray"
    assert_close(result, reference, what=what)


@pytest.mark.parametrize("name", ["sum", "mean"])
@property_settings(50)
@given(case=cases(), axis=AXES_ALL)
def test_sum_mean(name, case, axis):
    nm, expected = case.build(), case.expected
    _check_reduction(getattr(nm, name)(axis=axis), getattr(expected, name)(axis=axis), axis,
                     f"{name}(axis={axis})")
    case.scenario.assert_inputs_untouched()


@property_settings(50)
@given(case=cases(), axis=AXES_ALL)
def test_sum_of_squares(case, axis):
    """sum_of_squares adds what each part's cells hold beyond b², with no squared copy."""
    nm, expected = case.build(), case.expected
    _check_reduction(nm.sum_of_squares(axis=axis), (expected ** 2).sum(axis=axis), axis,
                     f"sum_of_squares(axis={axis})")
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["var", "std"])
@property_settings(50)
@given(case=cases(), axis=AXES_COLUMNS, ddof=st.sampled_from([0, 1]))
def test_var_std(name, case, axis, ddof):
    nm, expected = case.build(), case.expected
    assume(ddof == 0 or (expected.size if axis is None else expected.shape[0]) >= 2)
    _check_reduction(getattr(nm, name)(axis=axis, ddof=ddof), getattr(expected, name)(axis=axis, ddof=ddof),
                     axis, f"{name}(axis={axis}, ddof={ddof})")
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["min", "max"])
@property_settings(50)
@given(case=cases(), axis=AXES_COLUMNS)
def test_min_max(name, case, axis):
    nm, expected = case.build(), case.expected
    result = getattr(nm, name)(axis=axis)
    reference = getattr(expected, name)(axis=axis)
    _check_reduction(result, reference, axis, f"{name}(axis={axis})")
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["var", "std"])
@property_settings(40)
@given(scenario=scenarios(constant=True, nonneg=True), shift=st.sampled_from([0.0, 1.0, 1e2, 1e4, -3e4, 1e6]),
       axis=AXES_COLUMNS, ddof=st.sampled_from([0, 1]), transpose=st.booleans())
def test_var_std_of_constant_columns_and_rows(name, scenario, shift, axis, ddof, transpose):
    """Constant columns (and rows) moved far from 0: the variance is ~0 and must neither cancel into a
    negative number (std NaN) nor leave a sqrt(eps)-sized std."""
    nm = scenario.build() + shift
    expected = scenario.dense + shift
    if transpose:
        nm, expected = nm.T, expected.T
    assume(ddof == 0 or (expected.size if axis is None else expected.shape[0]) >= 2)
    result = getattr(nm, name)(axis=axis, ddof=ddof)
    assert np.all(np.asarray(result) >= 0), f"{name} negative or NaN: {result}"
    _check_reduction(result, getattr(expected, name)(axis=axis, ddof=ddof), axis,
                     f"{name}(axis={axis}, ddof={ddof}) after + {shift}{', transposed' if transpose else ''}")


@property_settings(60)
@given(value=st.floats(-5, 5, allow_nan=False), rows=st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=8)),
       d=st.integers(1, 12), sparse=st.booleans(), shift=st.sampled_from([None, 0.0, 1.0, -250.0]),
       transpose=st.booleans())
def test_std_of_a_constant_table(value, rows, d, sparse, shift, transpose):
    """Every cell equal (identity or many-to-one indicator): std along either axis and overall is ~0
    (as NumPy's), never NaN or sqrt(eps)."""
    from ilargi import NormalizedMatrix
    n = 5 if rows is None else len(rows)
    source = np.full((n if rows is None else 4, d), value)
    matrix = sp.csr_matrix(source) if sparse else source
    nm = NormalizedMatrix.from_parts([matrix], [rows], [np.arange(d)], (n, d))
    table = np.full((n, d), value)
    if shift is not None:
        nm, table = nm + shift, table + shift
    if transpose:
        nm, table = nm.T, table.T
    for axis in (None, 0):
        result = nm.std(axis=axis)
        assert np.all(np.asarray(result) >= 0), f"std(axis={axis}) is NaN: {result}"
        assert_close(result, table.std(axis=axis), what=f"std(axis={axis})")


@property_settings(60)
@given(value=st.floats(-3, 3), shifts=st.lists(st.floats(-3, 3), min_size=1, max_size=10),
       stored_seed=st.integers(0, 2**32 - 1))
def test_row_std_of_a_constant_row_with_varying_shift(value, shifts, stored_seed):
    """A sparse row whose stored cells (s + b_j) and implicit cells (b_j) all equal `value`: the row's
    std is ~0 however b varies across columns (e.g. after centring a one-hot table)."""
    from ilargi import NormalizedMatrix
    b = np.array(shifts)
    stored = np.random.default_rng(stored_seed).random(b.size) < 0.7
    b[~stored] = value
    source = sp.csr_matrix(np.where(stored, value - b, 0.0)[None, :])
    nm = NormalizedMatrix.from_parts([source], [None], [np.arange(b.size)], (1, b.size)) + b
    table = nm.toarray()
    assert_close(nm.T.std(axis=0), table.std(axis=1), what="row std")
    assert_close(nm.T.var(axis=0), table.var(axis=1), what="row var")


def test_mean_var_on_left_join_example():
    """Hand-checked: the NULL cell counts as 0 in mean and variance."""
    from ilargi import NormalizedMatrix
    nm = NormalizedMatrix.from_parts([np.array([[1.0], [3.0]]), np.array([[4.0]])],
                                     [None, np.array([0, -1])], [[0], [1]], (2, 2))
    # T = [[1, 4], [3, 0]]
    np.testing.assert_allclose(nm.mean(axis=0), [2.0, 2.0], rtol=1e-12)
    np.testing.assert_allclose(nm.var(axis=0), [1.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(nm.var(axis=0, ddof=1), [2.0, 8.0], rtol=1e-12)
    np.testing.assert_allclose(nm.std(), np.std([1.0, 4.0, 3.0, 0.0]), rtol=1e-12)
    assert nm.min() == 0.0 and nm.max() == 4.0
    np.testing.assert_array_equal(nm.min(axis=0), [1.0, 0.0])
    np.testing.assert_array_equal((nm + 2.0).min(axis=0), [3.0, 2.0])


@pytest.mark.parametrize("null_value", [5.0, -100.0])
@pytest.mark.parametrize("n_parts", [3, 64, 65, 70])
def test_row_reductions_with_many_union_parts(n_parts, null_value):
    """A union of many sources (e.g. one file per month): row statistics must not depend on how many
    parts there are (no fixed-width bit set of present parts). The NULL column holds the row max or min."""
    from ilargi import NormalizedMatrix
    sources = [np.array([[p + 1.0, p + 0.5]]) for p in range(n_parts)]
    rows = [np.where(np.arange(n_parts) == p, 0, -1) for p in range(n_parts)]
    nm = NormalizedMatrix.from_parts(sources, rows, [[0, 1]] * n_parts, (n_parts, 3))
    shift = np.array([0.0, 1.0, null_value])
    expected = np.hstack([np.vstack(sources), np.zeros((n_parts, 1))]) + shift
    nm = nm + shift
    for name in ("min", "max", "mean", "var", "std"):
        assert_close(getattr(nm.T, name)(axis=0), getattr(expected, name)(axis=1), what=f"row {name}")
