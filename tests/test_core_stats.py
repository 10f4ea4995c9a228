"""Reductions of NormalizedMatrix (sum, mean, var, std, min, max) against the materialized table.

Absent cells count as the NULL value of the table (0 in T0, b after the affine state), exactly as in the
materialized table.
"""
import numpy as np
import pytest
from hypothesis import assume, given, strategies as st

from strategies import assert_close, cases, property_settings, scenarios

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
@given(scenario=scenarios(constant=True), shift=st.sampled_from([1.0, 1e2, 1e4, -3e4, 1e6]),
       axis=AXES_COLUMNS, ddof=st.sampled_from([0, 1]))
def test_var_std_of_constant_columns_with_a_large_shift(name, scenario, shift, axis, ddof):
    """Constant columns moved far from 0: the variance is ~0 and must not cancel into a negative
    number (std NaN) or a sqrt(eps)-sized std."""
    assume(ddof == 0 or scenario.shape[0] >= 2)
    nm = scenario.build() + shift
    expected = scenario.dense + shift
    result = getattr(nm, name)(axis=axis, ddof=ddof)
    assert np.all(np.asarray(result) >= 0), f"{name} negative or NaN: {result}"
    _check_reduction(result, getattr(expected, name)(axis=axis, ddof=ddof), axis,
                     f"{name}(axis={axis}, ddof={ddof}) after + {shift}")


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
