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


# ---------------------------------------------------------------------------------------------
# The edges of float64: huge magnitudes, subnormals, a large mean with a small spread, mixed signs.
# The reference is NumPy on the materialized table. Where NumPy's answer is not finite only because
# one of its partial sums overflowed (its order of summation), NumPy on the table divided by a power
# of two and multiplied back is the reference: the rule is "finite wherever the sum of the cells
# is". Finite results agree to 1e-9 relative, plus NumPy's own rounding bound (the condition of a
# cancelling sum, and for a variance the rounding of its mean, squared).

EPS = np.finfo(np.float64).eps
EDGES = {  # each maps a source's values v (|v| <= largest) to an edge of float64
    "huge": lambda v, largest: v * (1.7e308 / largest),
    "large": lambda v, largest: v * 1e300,
    "subnormal": lambda v, largest: v * 1e-310,
    "tiny": lambda v, largest: v * 1e-300,
    "large mean, small spread": lambda v, largest: 1e8 + v * 1e-3,
    "negative large mean": lambda v, largest: -3e9 + v * 1e-2,
    "plain": lambda v, largest: v,
}


def _edged(source, edge):
    if sp.issparse(source):
        out = sp.csr_array(source, dtype=np.float64, copy=True)
        out.sum_duplicates()
        largest = max(1.0, float(np.abs(out.data).max(initial=0.0)))
        out.data = EDGES[edge](out.data, largest)
        return out
    values = np.asarray(source, dtype=np.float64)
    return EDGES[edge](values, max(1.0, float(np.abs(values).max(initial=0.0))))


@st.composite
def edge_cases(draw):
    """A case of `cases` whose sources' values are moved to the edges of float64, one edge per
    source (so huge, tiny and ordinary columns meet in one table)."""
    from tests.strategies import Case, Scenario

    case = draw(cases())
    scenario = case.scenario
    edges = [draw(st.sampled_from(sorted(EDGES))) for _ in scenario.sources]
    sources = [_edged(s, e) for s, e in zip(scenario.sources, edges)]
    edged = Scenario(sources, scenario.rows, scenario.cols, scenario.shape, scenario.names, edges)
    return Case(edged, case.affine, case.selection, case.transpose)


def _sum_reference(table, axis):
    """NumPy's sum of table / 2^k multiplied back (a power of two is exact), so that no partial
    sum overflows: ±inf only where the sum of the cells does; cells that are ±inf or NaN give the
    sum of the extended reals (NumPy's own can turn inf into NaN by an overflowing partial sum)."""
    finite = np.where(np.isfinite(table), table, 0.0)
    count = table.size if axis is None else table.shape[axis]
    top = np.frexp(np.abs(finite).max(axis=axis, keepdims=True, initial=0.0))[1]
    k = np.maximum(0, top + int(np.ceil(np.log2(max(count, 1)))) + 2 - 1020)  # per result cell
    scaled = np.ldexp(np.ldexp(finite, -k).sum(axis=axis, keepdims=True), k)
    scaled = scaled.reshape(()) if axis is None else scaled.squeeze(axis)
    # With ±inf cells, the extended reals' sum: NaN with a NaN or both infinities, else the inf.
    positive, negative = (table == np.inf).any(axis=axis), (table == -np.inf).any(axis=axis)
    nan = np.isnan(table).any(axis=axis) | (positive & negative)
    return np.where(nan, np.nan, np.where(positive, np.inf, np.where(negative, -np.inf, scaled)))


def _edge_reference(table, name, axis, ddof=0):
    """(reference, tolerance) by NumPy's definitions on the materialized table, with the sum of
    :func:`_sum_reference` (mean = sum / count; var = Σ (x − mean)² / max(count − ddof, 0));
    the tolerance is 1e-9 relative plus NumPy's own rounding bound."""
    with np.errstate(all="ignore"):
        count = table.size if axis is None else table.shape[axis]
        total = _sum_reference(table, axis)
        mean = total / np.float64(count)
        centre = mean if axis is None else np.expand_dims(mean, axis)
        var = ((table - centre) ** 2).sum(axis=axis) / np.float64(max(count - ddof, 0))
        reference = {"sum": total, "mean": mean, "var": var, "std": np.sqrt(var)}[name]
        absolute = _sum_reference(np.abs(table), axis)
        largest = np.abs(table).max(axis=axis, initial=0.0)
        slack = {
            "sum": 4 * count * EPS * absolute,
            "mean": 4 * count * EPS * absolute / max(count, 1),
            "var": (16 * count * EPS * largest) ** 2,
            "std": np.where(  # unbounded where the variance's slack is
                np.isfinite((16 * count * EPS * largest) ** 2), 16 * count * EPS * largest, np.inf
            ),
        }[name]
        tolerance = 1e-9 * np.abs(reference) + slack
    return reference, tolerance


def _assert_edge(result, reference, tolerance, what, variance=False):
    """Same NaN and ±inf cells, finite cells within ``tolerance``. A variance whose tolerance is
    itself beyond float64 (cells ≳ 1e170, where a mean one unit in the last place off squares to
    an overflow: NumPy's variance of a constant column of 1.9e300 is inf) is only checked to be
    non-negative or NaN where the reference is."""
    result = np.asarray(to_host(result), dtype=np.float64)
    unbounded = ~np.isfinite(tolerance) & ~np.isnan(reference) & variance
    if unbounded.any():
        assert (np.isnan(result) == np.isnan(reference)).all() and (result[unbounded] >= 0).all()
        reference = np.where(unbounded, result, reference)
    assert result.shape == np.shape(reference), f"{what}: shape {result.shape}"
    assert np.array_equal(np.isnan(result), np.isnan(reference)), (
        f"{what}: NaN cells differ: {result} vs {reference}"
    )
    infinite = np.isinf(reference)
    assert np.array_equal(np.isinf(result), infinite), (
        f"{what}: inf cells differ: {result} vs {reference}"
    )
    assert np.array_equal(result[infinite], np.asarray(reference)[infinite]), (
        f"{what}: inf signs differ"
    )
    finite = np.isfinite(reference)
    error = np.abs(result - reference)[finite]
    assert (error <= np.asarray(tolerance)[finite]).all(), (
        f"{what}: {result} vs {reference} (tolerance {tolerance})"
    )


@pytest.mark.parametrize("name", ["sum", "mean", "var", "std"])
@property_settings(80)
@given(case=edge_cases(), axis=AXES_ALL, ddof=st.sampled_from([0, 1]))
def test_reductions_at_the_edges_of_float64(backend, name, case, axis, ddof):
    """Finite wherever NumPy's result (free of partial-sum overflow) is, and the same inf/NaN
    cells where not; sums and means of huge columns, variances of huge values (inf, not NaN),
    subnormals, and a large mean with a small spread (NumPy's two-pass digits)."""
    nm, expected = on_backend(case.build(), backend), case.expected
    if name in ("var", "std"):
        assume(ddof == 0 or (expected.size if axis is None else expected.shape[axis or 0]) >= 2)
    else:
        ddof = 0
    kwargs = {"ddof": ddof} if name in ("var", "std") else {}
    with np.errstate(all="ignore"):
        result = getattr(nm, name)(axis=axis, **kwargs)
    reference, tolerance = _edge_reference(expected, name, axis, ddof)
    what = f"{name}(axis={axis}, ddof={ddof})"
    _assert_edge(result, reference, tolerance, what, variance=name in ("var", "std"))
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("name", ["min", "max", "sum", "var"])
@property_settings(60)
@given(case=cases(), seed=st.integers(0, 2**32 - 1), axis=AXES_ALL)
def test_reductions_over_column_selections(backend, name, case, seed, axis):
    """Over a column selection, some sources feed no kept column (or no selected row): along rows
    too, the NULL cells count, as in the materialized table."""
    nm, expected = on_backend(case.build(), backend), case.expected
    rng = np.random.default_rng(seed)
    keep = np.sort(
        rng.choice(expected.shape[1], int(rng.integers(1, expected.shape[1] + 1)), False)
    )
    nm, expected = nm[:, keep], expected[:, keep]
    with np.errstate(all="ignore"):
        reference = getattr(expected, name)(axis=axis)
    _check_reduction(getattr(nm, name)(axis=axis), reference, axis, f"{name}[:, {keep}]", backend)


@pytest.mark.parametrize("name", ["min", "max", "sum", "mean"])
def test_row_reductions_of_a_table_no_part_covers(name):
    """A column no source feeds, selected alone: every cell is NULL (b), along rows too."""
    from ilargi import NormalizedMatrix

    nm = NormalizedMatrix.from_parts([np.arange(6.0).reshape(3, 2)], [None], [[0, 1]], (3, 3))
    for view, table in ((nm[:, [2]], np.zeros((3, 1))), ((nm + 2.5)[:, [2]], np.full((3, 1), 2.5))):
        np.testing.assert_array_equal(getattr(view, name)(axis=1), getattr(table, name)(axis=1))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_std_into_out_holds_the_std(axis):
    """std(out=buf) writes the standard deviation (not the variance) and returns buf, as NumPy."""
    from ilargi import NormalizedMatrix

    fk = np.array([0, 1, 1, -1, 0])
    nm = NormalizedMatrix.from_parts(
        [np.arange(10.0).reshape(5, 2) ** 2, np.array([[1.0, 0.0], [0.0, 3.0]])],
        [None, fk],
        [[0, 1], [2, 3]],
        (5, 4),
    )
    table = nm.toarray()
    buf = np.empty(()) if axis is None else np.empty(table.shape[1 - axis])
    returned = nm.std(axis=axis, out=buf, ddof=1)
    assert returned is buf
    np.testing.assert_allclose(buf, table.std(axis=axis, ddof=1), rtol=1e-12)


def test_variance_of_huge_values_is_inf_not_nan():
    """E[x²] − E[x]² would give inf − inf = NaN; NumPy's two-pass gives inf (the squares
    overflow), and a sum that only NumPy's partial sums could overflow stays finite."""
    from ilargi import NormalizedMatrix

    dim = np.array([[1e308, 1.0], [-1e308, 2.0]])
    nm = NormalizedMatrix.from_parts(
        [np.array([[1.0], [2.0], [3.0], [4.0]]), dim],
        [None, np.array([0, 1, 0, 1])],
        [[0], [1, 2]],
        (4, 3),
    )
    table = nm.toarray()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(nm.var(axis=0), table.var(axis=0))
        assert np.isinf(nm.var()) and np.isinf(nm.std())
    np.testing.assert_array_equal(nm.sum(axis=0), [10.0, 0.0, 6.0])  # 2·1e308 − 2·1e308
    np.testing.assert_array_equal(nm.mean(axis=0), [2.5, 0.0, 1.5])
    assert float(nm.sum()) == 16.0


def test_variance_of_a_large_mean_with_a_small_spread_keeps_its_digits():
    """Values 1e8 + noise of 1e-3: NumPy's two-pass keeps the variance to ~1e-10; so must the
    factorized one, down columns, along rows (where two sources' means nearly agree) and over all."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(0)
    fk = rng.integers(0, 5, 60)
    fk[:6] = -1
    nm = (
        NormalizedMatrix.from_parts(
            [1e8 + rng.normal(0, 1e-3, (60, 2)), 1e8 + rng.normal(0, 1e-3, (5, 3))],
            [None, fk],
            [[0, 1], [2, 3, 4]],
            (60, 5),
        )
        - 1e8 * 0.5
    )
    table = nm.toarray()
    for axis in (None, 0, 1):
        np.testing.assert_allclose(nm.var(axis=axis), table.var(axis=axis), rtol=1e-9)
