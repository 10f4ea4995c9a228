"""The kernels that bin a BinnedMatrix's tables: compiled and NumPy give the same bytes, at one
thread and at two, on more rows than a step of the NumPy versions."""

import numpy as np
import pytest

import ilargi
from ilargi.backend import cpu

compiled = pytest.importorskip("ilargi.backend.compiled")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n_bounds", [1, 2, 3, 50, 255, 256])
def test_a_columns_bins_are_numpys_searchsorted(threads, n_bounds):
    """Each value's bin: the first bound >= it, for values on the bounds, between them, beyond
    both ends, signed zeros, infinities and NaN (after every number, as NumPy sorts it)."""
    rng = np.random.default_rng(n_bounds)
    n = 300_001
    bounds = np.append(np.unique(rng.standard_normal(n_bounds - 1)), np.inf)
    values = rng.standard_normal(n) * 1.5
    values[: bounds.size] = bounds  # on a bound: its own bin
    values[bounds.size : 2 * bounds.size] = np.nextafter(bounds, -np.inf)
    values[-6:] = [np.nan, -np.inf, np.inf, 0.0, -0.0, 1e-300]
    expected = np.searchsorted(bounds, values, side="left").astype(np.uint8)
    ours, theirs = np.zeros((n, 3), np.uint8), np.zeros((n, 3), np.uint8)
    with ilargi.threads(threads):
        compiled.bin_column(values, bounds, ours, 1)
    cpu.bin_column(values, bounds, theirs, 1)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(theirs[:, 1], expected)
    assert not theirs[:, [0, 2]].any()  # the other columns untouched


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("keyed", [False, True])
def test_codes_gathered_per_target_row_are_numpys(threads, keyed):
    rng = np.random.default_rng(7)
    n, m = 600_000, 4000
    codes = rng.integers(0, 256, (m + 1 if keyed else n, 3)).astype(np.uint8)
    rows = rng.integers(-1, m, n) if keyed else None
    if keyed:
        rows.flags.writeable = False  # an indicator's rows may be read-only
    ours, theirs = np.zeros((n, 6), np.uint8), np.zeros((n, 6), np.uint8)
    with ilargi.threads(threads):
        compiled.gather_codes(ours, 2, codes, rows)
    cpu.gather_codes(theirs, 2, codes, rows)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(theirs[:, 2:5], codes[np.arange(n) if rows is None else rows + 1])
    assert not theirs[:, [0, 1, 5]].any()


@pytest.mark.parametrize("threads", [1, 2])
def test_joint_codes_and_the_copy_by_column_are_numpys(threads):
    rng = np.random.default_rng(8)
    n = 50_001  # steps of both versions and a last, partial one
    bins = np.array([3, 255, 2, 5, 16, 4, 7, 1])
    codes = (rng.integers(0, 1 << 30, (n, bins.size)) % bins).astype(np.uint8)
    groups = [[7, 2, 5, 3], [6], [1], [4, 0]]  # products 40, 7, 255, 48
    with ilargi.threads(threads):
        joint, by_column = compiled.joint_codes(codes, groups, bins)
    expected_joint, expected_columns = cpu.joint_codes(codes, groups, bins)
    assert joint.flags.c_contiguous and by_column.flags.f_contiguous
    assert expected_columns.flags.f_contiguous
    np.testing.assert_array_equal(joint, expected_joint)
    np.testing.assert_array_equal(by_column, codes)
    np.testing.assert_array_equal(expected_columns, codes)
    c = codes.astype(np.intp)
    np.testing.assert_array_equal(
        joint[:, 0], c[:, 7] + 1 * (c[:, 2] + 2 * (c[:, 5] + 4 * c[:, 3]))
    )
    np.testing.assert_array_equal(joint[:, 3], c[:, 4] + 16 * c[:, 0])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("strided", [False, True])
def test_a_columns_values_are_numpys_multiply_and_add(threads, strided):
    """a·s + b rounded twice (a product, then a sum), never fused: scales and shifts whose
    fused multiply-add would round differently for many of these values."""
    rng = np.random.default_rng(9)
    n = 300_001
    source = rng.standard_normal((n, 3)) * 1e3
    column = source[:, 1] if strided else source[:, 1].copy()
    a, b = 1.0 / 3.0, np.pi * 1e-3
    ours, theirs = np.empty(n), np.empty(n)
    with ilargi.threads(threads):
        compiled.affine_column(column, a, b, ours)
    cpu.affine_column(column, a, b, theirs)
    np.testing.assert_array_equal(ours, theirs)
    fused = np.array(
        [float(np.longdouble(x) * np.longdouble(a) + np.longdouble(b)) for x in column[:2000]]
    )
    assert (fused != theirs[:2000]).any()  # the values tell a fused multiply-add apart
    readonly = column.copy()
    readonly.flags.writeable = False
    compiled.affine_column(readonly, a, b, ours)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("rare", [0, 3_000])
def test_distinct_counts_by_hash_table_equal_the_sort(weighted, rare):
    """A long column whose sample shows few distinct values is counted by a hash table: the
    values and counts of np.unique, NaN one value and last, weight-0 values dropped; also where
    the sample missed thousands of rare values."""
    from ilargi.rewriter.bin_edges import (
        HASH_DISTINCT,
        HASH_SAMPLE,
        _few_distinct,
        distinct_counts,
    )

    rng = np.random.default_rng(rare)
    m = 20 * HASH_SAMPLE
    values = rng.integers(0, 9, m) * 0.5
    values[rng.choice(m, 50, replace=False)] = np.nan
    values[rng.choice(m, rare, replace=False)] = rng.normal(size=rare) * 1e3
    values[:2] = [0.0, -0.0]
    assert _few_distinct(values) and len(np.unique(values)) > (HASH_DISTINCT if rare else 9)
    weights = rng.integers(0, 5, m) if weighted else np.ones(m, dtype=np.int64)
    distinct, counts = distinct_counts(values, weights if weighted else None)
    expected, inverse = np.unique(values, return_inverse=True)
    expected_counts = np.bincount(inverse.ravel(), weights=weights, minlength=expected.size)
    keep = expected_counts > 0
    np.testing.assert_array_equal(distinct, expected[keep])
    np.testing.assert_array_equal(counts, expected_counts[keep].astype(np.int64))
    assert distinct.dtype == np.float64 and counts.dtype == np.int64
    assert np.isnan(distinct[-1])


@pytest.mark.parametrize("kernels", ["numpy", "compiled"])
@pytest.mark.parametrize("levels", [1, 7, 256, 257, 5000])
def test_weighted_distinct_counts_are_the_argsorts(kernels, levels):
    """A keyed table's distinct values and the target rows that take each: found by a search
    per value up to 256 distinct values, by the inverse of np.unique beyond; weight-0 values
    dropped, both signed zeros one value."""
    from ilargi.backend import cpu_kernels
    from ilargi.rewriter.bin_edges import distinct_counts

    rng = np.random.default_rng(levels)
    m = 40_000
    values = rng.integers(0, levels, m) * 0.25 - 0.25 * (levels // 2)
    values[:2] = [0.0, -0.0]
    weights = rng.integers(0, 40, m)
    weights[2:50] = 0
    with cpu_kernels(kernels):
        distinct, counts = distinct_counts(values, weights)
    expected, inverse = np.unique(values, return_inverse=True)
    expected_counts = np.bincount(inverse, weights=weights, minlength=expected.size)
    keep = expected_counts > 0
    np.testing.assert_array_equal(distinct, expected[keep])
    np.testing.assert_array_equal(counts, expected_counts[keep].astype(np.int64))
    assert counts.dtype == np.int64
