"""Reductions of NormalizedMatrix (sum, mean, var, std, min, max) against the materialized table.

Absent cells count as the NULL value of the table (0 in T0, b after the affine state), exactly as in the
materialized table. Every test runs on each backend (tests/backends.py).
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.backends import assert_on_device, on_backend, to_host
from tests.strategies import assert_close, cases, property_settings, scenarios

AXES_ALL = st.sampled_from([None, 0, 1])
AXES_COLUMNS = st.sampled_from([None, 0])


def _check_reduction(result, reference, axis, what, backend):
    assert_on_device(result, backend, what)
    if axis is None:
        assert np.ndim(to_host(result)) == 0, (
            f"{what}: axis=None should give a scalar, got shape {np.shape(result)}"
        )
    else:
        assert result.ndim == 1, f"{what}: expected a 1-D array"
    assert_close(result, reference, what=what, backend=backend)


@pytest.mark.parametrize("name", ["sum", "mean"])
@property_settings(50)
@given(case=cases(), axis=AXES_ALL)
def test_sum_mean(backend, name, case, axis):
    nm, expected = on_backend(case.build(), backend), case.expected
    _check_reduction(
        getattr(nm, name)(axis=axis),
        getattr(expected, name)(axis=axis),
        axis,
        f"{name}(axis={axis})",
        backend,
    )
    case.scenario.assert_inputs_untouched()


@property_settings(50)
@given(case=cases(), axis=AXES_ALL)
def test_sum_of_squares(backend, case, axis):
    """sum_of_squares adds what each part's cells hold beyond b², with no squared copy."""
    nm, expected = on_backend(case.build(), backend), case.expected
    _check_reduction(
        nm.sum_of_squares(axis=axis),
        (expected**2).sum(axis=axis),
        axis,
        f"sum_of_squares(axis={axis})",
        backend,
    )
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["var", "std"])
@property_settings(50)
@given(case=cases(), axis=AXES_COLUMNS, ddof=st.sampled_from([0, 1]))
def test_var_std(backend, name, case, axis, ddof):
    nm, expected = on_backend(case.build(), backend), case.expected
    assume(ddof == 0 or (expected.size if axis is None else expected.shape[0]) >= 2)
    _check_reduction(
        getattr(nm, name)(axis=axis, ddof=ddof),
        getattr(expected, name)(axis=axis, ddof=ddof),
        axis,
        f"{name}(axis={axis}, ddof={ddof})",
        backend,
    )
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["min", "max"])
@property_settings(50)
@given(case=cases(), axis=AXES_COLUMNS)
def test_min_max(backend, name, case, axis):
    nm, expected = on_backend(case.build(), backend), case.expected
    result = getattr(nm, name)(axis=axis)
    reference = getattr(expected, name)(axis=axis)
    _check_reduction(result, reference, axis, f"{name}(axis={axis})", backend)
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["var", "std"])
@property_settings(40)
@given(
    scenario=scenarios(constant=True, nonneg=True),
    shift=st.sampled_from([0.0, 1.0, 1e2, 1e4, -3e4, 1e6]),
    axis=AXES_COLUMNS,
    ddof=st.sampled_from([0, 1]),
    transpose=st.booleans(),
)
def test_var_std_of_constant_columns_and_rows(
    backend, name, scenario, shift, axis, ddof, transpose
):
    """Constant columns (and rows) moved far from 0: the variance is ~0 and must neither cancel into a
    negative number (std NaN) nor leave a sqrt(eps)-sized std."""
    nm = on_backend(scenario.build(), backend) + shift
    expected = scenario.dense + shift
    if transpose:
        nm, expected = nm.T, expected.T
    assume(ddof == 0 or (expected.size if axis is None else expected.shape[0]) >= 2)
    result = getattr(nm, name)(axis=axis, ddof=ddof)
    assert np.all(to_host(result) >= 0), f"{name} negative or NaN: {result}"
    _check_reduction(
        result,
        getattr(expected, name)(axis=axis, ddof=ddof),
        axis,
        f"{name}(axis={axis}, ddof={ddof}) after + {shift}{', transposed' if transpose else ''}",
        backend,
    )


@property_settings(60)
@given(
    value=st.floats(-5, 5, allow_nan=False),
    rows=st.one_of(st.none(), st.lists(st.integers(0, 3), min_size=1, max_size=8)),
    d=st.integers(1, 12),
    sparse=st.booleans(),
    shift=st.sampled_from([None, 0.0, 1.0, -250.0]),
    transpose=st.booleans(),
)
def test_std_of_a_constant_table(backend, value, rows, d, sparse, shift, transpose):
    """Every cell equal (identity or many-to-one indicator): std along either axis and overall is ~0
    (as NumPy's), never NaN or sqrt(eps)."""
    from ilargi import NormalizedMatrix

    n = 5 if rows is None else len(rows)
    source = np.full((n if rows is None else 4, d), value)
    matrix = sp.csr_matrix(source) if sparse else source
    nm = on_backend(NormalizedMatrix.from_parts([matrix], [rows], [np.arange(d)], (n, d)), backend)
    table = np.full((n, d), value)
    if shift is not None:
        nm, table = nm + shift, table + shift
    if transpose:
        nm, table = nm.T, table.T
    for axis in (None, 0):
        result = nm.std(axis=axis)
        assert np.all(to_host(result) >= 0), f"std(axis={axis}) is NaN: {result}"
        assert_close(result, table.std(axis=axis), what=f"std(axis={axis})", backend=backend)


@property_settings(60)
@given(
    value=st.floats(-3, 3),
    shifts=st.lists(st.floats(-3, 3), min_size=1, max_size=10),
    stored_seed=st.integers(0, 2**32 - 1),
)
def test_row_std_of_a_constant_row_with_varying_shift(backend, value, shifts, stored_seed):
    """A sparse row whose stored cells (s + b_j) and implicit cells (b_j) all equal `value`: the row's
    std is ~0 however b varies across columns (e.g. after centring a one-hot table)."""
    from ilargi import NormalizedMatrix

    b = np.array(shifts)
    stored = np.random.default_rng(stored_seed).random(b.size) < 0.7
    b[~stored] = value
    source = sp.csr_matrix(np.where(stored, value - b, 0.0)[None, :])
    cpu = NormalizedMatrix.from_parts([source], [None], [np.arange(b.size)], (1, b.size))
    table = source.toarray() + b
    nm = on_backend(cpu, backend) + on_backend(b, backend)
    assert_close(nm.T.std(axis=0), table.std(axis=1), what="row std", backend=backend)
    assert_close(nm.T.var(axis=0), table.var(axis=1), what="row var", backend=backend)


def test_mean_var_on_left_join_example(backend):
    """Hand-checked: the NULL cell counts as 0 in mean and variance."""
    from ilargi import NormalizedMatrix

    nm = on_backend(
        NormalizedMatrix.from_parts(
            [np.array([[1.0], [3.0]]), np.array([[4.0]])],
            [None, np.array([0, -1])],
            [[0], [1]],
            (2, 2),
        ),
        backend,
    )
    # T = [[1, 4], [3, 0]]
    checks = [
        (nm.mean(axis=0), [2.0, 2.0]),
        (nm.var(axis=0), [1.0, 4.0]),
        (nm.var(axis=0, ddof=1), [2.0, 8.0]),
        (nm.std(), np.std([1.0, 4.0, 3.0, 0.0])),
        (nm.min(), 0.0),
        (nm.max(), 4.0),
        (nm.min(axis=0), [1.0, 0.0]),
        ((nm + 2.0).min(axis=0), [3.0, 2.0]),
    ]
    for result, expected in checks:
        assert_on_device(result, backend)
        np.testing.assert_allclose(to_host(result), expected, rtol=1e-12)


@pytest.mark.parametrize("null_value", [5.0, -100.0])
@pytest.mark.parametrize("n_parts", [3, 64, 65, 70])
def test_row_reductions_with_many_union_parts(backend, n_parts, null_value):
    """A union of many sources (e.g. one file per month): row statistics must not depend on how many
    parts there are (no fixed-width bit set of present parts). The NULL column holds the row max or min."""
    from ilargi import NormalizedMatrix

    sources = [np.array([[p + 1.0, p + 0.5]]) for p in range(n_parts)]
    rows = [np.where(np.arange(n_parts) == p, 0, -1) for p in range(n_parts)]
    nm = on_backend(
        NormalizedMatrix.from_parts(sources, rows, [[0, 1]] * n_parts, (n_parts, 3)), backend
    )
    shift = np.array([0.0, 1.0, null_value])
    expected = np.hstack([np.vstack(sources), np.zeros((n_parts, 1))]) + shift
    nm = nm + on_backend(shift, backend)
    for name in ("min", "max", "mean", "var", "std"):
        assert_close(
            getattr(nm.T, name)(axis=0),
            getattr(expected, name)(axis=1),
            what=f"row {name}",
            backend=backend,
        )
