"""Bins and leaf histograms of gradient-boosted trees, factorized, against the materialized table.

* the bin edges of every column, found from the sources (rows weighed by the target rows that take
  them), equal those found on the materialized column, and the codes gathered through the index
  vectors equal the materialized column binned with them: every join kind, dense and sparse
  sources, NULLs, unions, affine state, row selections, snowflakes;
* the edges are LightGBM's own (its binned dataset, row by row), columns holding NaN too (a last
  bin of NaN; without one, NaN is binned as 0);
* a leaf's histograms (by foreign key or row by row, NumPy and compiled kernels) equal those of
  the materialized binned table, and a split partitions the rows as the materialized codes do.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ilargi import NormalizedMatrix
from ilargi.backend import cpu_kernels
from ilargi.rewriter import sparse_bins
from ilargi.rewriter.bin_edges import bin_codes, bin_upper_bounds, distinct_counts
from ilargi.rewriter.binning import _value_range
from ilargi.rewriter.histograms import BinnedMatrix
from ilargi.rewriter.sparse_bins import SparseBinnedTable
from tests.strategies import Case, Scenario, cases, property_settings

KERNELS = ("numpy", "compiled")


def _reference_bins(table, max_bin, min_data_in_bin):
    bounds = []
    for j in range(table.shape[1]):
        distinct, counts = distinct_counts(table[:, j])
        bounds.append(bin_upper_bounds(distinct, counts, max_bin, min_data_in_bin))
    codes = np.stack([bin_codes(table[:, j], b) for j, b in enumerate(bounds)], axis=1)
    return bounds, codes


def _reference_histograms(codes, idx, g, h, bins):
    out = np.zeros((codes.shape[1], bins, 3))
    for j in range(codes.shape[1]):
        c = codes[idx, j]
        np.add.at(out[j, :, 0], c, g[idx].astype(np.float64))
        np.add.at(out[j, :, 1], c, h[idx].astype(np.float64))
        np.add.at(out[j, :, 2], c, 1.0)
    return out


@property_settings(max_examples=60)
@given(
    case=cases(transpose=False),
    max_bin=st.sampled_from((2, 3, 8, 255)),
    mdib=st.sampled_from((1, 3)),
)
def test_bins_and_codes_equal_the_materialized_tables(case, max_bin, mdib):
    nm, table = case.build(), case.expected
    binned = BinnedMatrix.from_matrix(nm, max_bin, mdib)
    bounds, codes = _reference_bins(table, max_bin, mdib)
    for j, (ours, reference) in enumerate(zip(binned.bounds, bounds)):
        np.testing.assert_array_equal(ours, reference, err_msg=f"bounds of column {j}")
    np.testing.assert_array_equal(binned.toarray(), codes)
    # codes stored per table row, never per target row (the fact table's rows are target rows)
    for t in binned.tables:
        if isinstance(t, SparseBinnedTable):  # a sparse source's codes: the non-default ones
            assert t.rows is not None and t.entry_codes.dtype == np.uint8
            assert not np.any(t.entry_codes == np.repeat(t.default, np.diff(t.indptr)))
            continue
        assert t.codes.dtype == np.uint8
        assert t.codes.shape[0] == (nm.shape[0] if t.rows is None else t.codes.shape[0])


@property_settings(max_examples=40)
@given(
    case=cases(transpose=False),
    seed=st.integers(0, 2**16),
    max_bin=st.sampled_from((2, 3, 8, 255)),
)
def test_bins_of_sources_holding_nan_equal_the_materialized_tables(case, seed, max_bin):
    # NaN in the dense sources: each column's bins and codes those of the materialized column
    # (a last bin of NaN where it holds NaN), every join kind, affine state and selection
    rng = np.random.default_rng(seed)
    scenario = case.scenario
    sources = [
        s if sp.issparse(s) else np.where(rng.random(s.shape) < 0.25, np.nan, s)
        for s in scenario.sources
    ]
    holed = Case(
        Scenario(sources, scenario.rows, scenario.cols, scenario.shape, scenario.names,
                 scenario.kinds),
        case.affine,
        case.selection,
        False,
    )  # fmt: skip
    nm, table = holed.build(allow_nonfinite=True), holed.expected
    binned = BinnedMatrix.from_matrix(nm, max_bin, 1)
    bounds, codes = _reference_bins(table, max_bin, 1)
    for j, (ours, reference) in enumerate(zip(binned.bounds, bounds)):
        np.testing.assert_array_equal(ours, reference, err_msg=f"bounds of column {j}")
    np.testing.assert_array_equal(binned.toarray(), codes)
    assert sorted(binned.nan_features) == [
        j for j in range(table.shape[1]) if np.isnan(table[:, j]).any()
    ]


@property_settings(max_examples=30)
@given(case=cases(transpose=False, snowflake=True, affine=False))
def test_bins_of_a_snowflake(case):
    nm, table = case.build(), case.expected
    binned = BinnedMatrix.from_matrix(nm, 16, 1)
    bounds, codes = _reference_bins(table, 16, 1)
    for ours, reference in zip(binned.bounds, bounds):
        np.testing.assert_array_equal(ours, reference)
    np.testing.assert_array_equal(binned.toarray(), codes)


@property_settings(max_examples=40)
@given(
    case=cases(transpose=False),
    seed=st.integers(0, 2**32 - 1),
    fraction=st.sampled_from((0.05, 0.5, 1.0)),
)
@pytest.mark.parametrize("kernels", KERNELS)
def test_leaf_histograms_equal_the_materialized_ones(kernels, case, seed, fraction):
    nm, table = case.build(), case.expected
    rng = np.random.default_rng(seed)
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm, 8, 1)
    _, codes = _reference_bins(table, 8, 1)
    idx = np.flatnonzero(rng.random(n) < fraction).astype(np.intp)
    g = rng.standard_normal(n).astype(np.float32)
    h = rng.random(n).astype(np.float32)
    with cpu_kernels(kernels):
        hist = binned.histograms(idx, g, h)
        np.testing.assert_allclose(
            hist, _reference_histograms(codes, idx, g, h, binned.max_bins), rtol=1e-9, atol=1e-9
        )
        if idx.size == n:  # every row, read in order without a list: the same sums
            np.testing.assert_allclose(binned.histograms(None, g, h), hist, rtol=1e-12, atol=1e-12)
        if idx.size:
            j = int(rng.integers(table.shape[1]))
            threshold = int(rng.integers(binned.n_bins[j]))
            order = idx.copy()
            n_left = binned.partition(order, 0, order.size, j, threshold)
            left = codes[idx, j] <= threshold
            np.testing.assert_array_equal(order[:n_left], idx[left])
            np.testing.assert_array_equal(order[n_left:], idx[~left])
            np.testing.assert_array_equal(binned.goes_left(idx, j, threshold), left)


@property_settings(max_examples=30)
@given(case=cases(transpose=False), seed=st.integers(0, 2**32 - 1), side=st.booleans())
@pytest.mark.parametrize("kernels", KERNELS)
def test_a_split_of_every_row_needs_no_list(kernels, case, seed, side):
    """A root's split (every target row, its list not filled: garbage in it) moves and keeps the
    rows a split of the filled list 0..n-1 does, by scan or by inverse index, and leaves the
    same labels; where the list is handed back unread (kept -1), it is filled."""
    nm, table = case.build(), case.expected
    rng = np.random.default_rng(seed)
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm, 8, 1)
    _, codes = _reference_bins(table, 8, 1)
    j = int(rng.integers(table.shape[1]))
    threshold = int(rng.integers(binned.n_bins[j]))
    with cpu_kernels(kernels):
        results = []
        for every in (False, True):
            lst = np.arange(n) if not every else rng.integers(-(2**40), 2**40, n)
            labels = np.zeros(n, dtype=np.uint8)
            out = np.empty(n + 1, dtype=np.intp)
            moved, kept = binned.split(lst, labels, 0, 1, j, threshold, side, out, every)
            stay = lst if kept < 0 else lst[:kept]
            results.append((out[:moved].copy(), np.sort(stay[labels[stay] == 0]), labels))
        (out_a, stay_a, labels_a), (out_b, stay_b, labels_b) = results
        np.testing.assert_array_equal(out_a, out_b)
        np.testing.assert_array_equal(stay_a, stay_b)
        np.testing.assert_array_equal(labels_a, labels_b)
        goes = (codes[:, j] <= threshold) == side
        np.testing.assert_array_equal(out_b, np.flatnonzero(goes))


@pytest.mark.parametrize("kernels", KERNELS)
def test_histograms_by_key_and_row_by_row_agree_on_a_large_leaf(kernels):
    """A leaf of many more rows than the dimension sums by foreign key first; a small one reads
    the codes through the index vector; both equal the materialized histograms."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(3)
    n, m = 20_000, 50
    fk = rng.integers(-1, m, n)
    nm = NormalizedMatrix.from_parts(
        [rng.standard_normal((n, 2)), np.round(rng.standard_normal((m, 3)), 1)],
        [None, fk],
        [[0, 1], [2, 3, 4]],
        (n, 5),
    )
    binned = BinnedMatrix.from_matrix(nm)
    _, codes = _reference_bins(nm.materialize(), 255, 3)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    with cpu_kernels(kernels):
        for idx in (np.arange(n), np.sort(rng.choice(n, 60, replace=False))):
            np.testing.assert_allclose(
                binned.histograms(idx, g, h),
                _reference_histograms(codes, idx, g, h, binned.max_bins),
                rtol=1e-9,
                atol=1e-9,
            )


@pytest.mark.parametrize("kernels", KERNELS)
def test_one_hessian_repeated_without_storing_it_gives_the_stored_arrays_bytes(kernels):
    """Squared error's unit hessians come as one value broadcast over the rows (stride 0): the
    compiled kernels read that value instead of gathering a leaf's, the NumPy ones index it;
    the histograms of every path (the fact table's, sums by key, codes through an index vector,
    the root without a list) are the bytes of the same hessians stored row by row."""
    from ilargi import NormalizedMatrix
    from ilargi.backend import compiled, cpu

    rng = np.random.default_rng(4)
    n, m = 20_000, 50
    nm = NormalizedMatrix.from_parts(
        [rng.standard_normal((n, 2)), np.round(rng.standard_normal((m, 3)), 1)],
        [None, rng.integers(-1, m, n)],
        [[0, 1], [2, 3, 4]],
        (n, 5),
    )
    binned = BinnedMatrix.from_matrix(nm)
    g = rng.standard_normal(n).astype(np.float32)
    for value in (1.0, 0.375):
        stored = np.full(n, value, np.float32)
        repeated = np.broadcast_to(np.float32(value), (n,))
        with cpu_kernels(kernels):
            for idx in (None, np.arange(n), np.sort(rng.choice(n, 60, replace=False))):
                for counts in (True, False):
                    ours = binned.leaf_histograms(idx, g, repeated, counts=counts)
                    theirs = binned.leaf_histograms(idx, g, stored, counts=counts)
                    np.testing.assert_array_equal(ours, theirs)
    codes = rng.integers(0, 30, (m + 1, 3)).astype(np.uint8)
    rows = rng.integers(-1, m, n)
    idx = np.sort(rng.choice(n, 5000, replace=False))
    stored, repeated = np.ones(n, np.float32), np.broadcast_to(np.float32(1.0), (n,))
    for backend in (compiled, cpu):
        for h in (stored, repeated):
            np.testing.assert_array_equal(
                backend.bin_histograms(codes, rows, idx, g, h, None, 32),
                backend.bin_histograms(codes, rows, idx, g, stored, None, 32),
            )
            np.testing.assert_array_equal(
                backend.leaf_sums(rows, idx, g, h, m + 1),
                backend.leaf_sums(rows, idx, g, stored, m + 1),
            )


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_selection_of_fact_rows_is_binned_per_target_row(kernels):
    """The fact table of X[rows] (a row selection, more source rows than target rows) is one
    table of codes per target row; its bins, codes and histograms are the materialized table's."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(4)
    n, m = 3000, 40
    full = NormalizedMatrix.from_parts(
        [rng.standard_normal((n, 2)), np.round(rng.standard_normal((m, 3)), 1)],
        [None, rng.integers(0, m, n)],
        [[0, 1], [2, 3, 4]],
        (n, 5),
    )
    X = full[np.sort(rng.choice(n, 2000, replace=False))]
    binned = BinnedMatrix.from_matrix(X)
    fact = [t for t in binned.tables if t.rows is None]
    assert len(fact) == 1 and fact[0].codes.shape[0] == X.shape[0]
    bounds, codes = _reference_bins(X.materialize(), 255, 3)
    for ours, theirs in zip(binned.bounds, bounds):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(binned.toarray(), codes)
    g, h = rng.standard_normal(2000).astype(np.float32), rng.random(2000).astype(np.float32)
    with cpu_kernels(kernels):
        for idx in (np.arange(2000), np.sort(rng.choice(2000, 30, replace=False))):
            np.testing.assert_allclose(
                binned.histograms(idx, g, h),
                _reference_histograms(codes, idx, g, h, binned.max_bins),
                rtol=1e-9,
                atol=1e-9,
            )


@pytest.mark.parametrize("kernels", KERNELS)
def test_features_of_few_bins_share_a_column_of_the_leaf_pass(kernels):
    """Fact and narrow dimension features whose bins multiply to at most 256 are coded jointly for
    the leaf pass (one column each group), each feature's histogram a sum of the joint one; the
    histograms, splits and goes_left are still the materialized table's, on every row and on a
    sparse leaf, and the codes then lie a column at a time."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(7)
    n, m = 5000, 300
    levels = (2, 3, 5, 7, 1, 200, 4, 9, 11)  # distinct values: the features' bins
    fact = np.column_stack([rng.integers(0, k, n) for k in levels[:6]]).astype(float)
    dim = np.column_stack([rng.integers(0, k, m) for k in levels[6:]]).astype(float)
    X = NormalizedMatrix.from_parts(
        [fact, dim], [None, rng.integers(0, m, n)], [list(range(6)), [6, 7, 8]], (n, 9)
    )
    binned = BinnedMatrix.from_matrix(X)
    _, codes = _reference_bins(X.materialize(), 255, 3)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    with cpu_kernels(kernels):
        for idx in (np.arange(n), np.sort(rng.choice(n, 400, replace=False))):
            np.testing.assert_allclose(
                binned.histograms(idx, g, h),
                _reference_histograms(codes, idx, g, h, binned.max_bins),
                rtol=1e-9,
                atol=1e-9,
            )
        joint = binned._fact_codes()
        assert joint.codes.shape[1] < 9 and joint.bins.max() <= 256
        assert binned.tables[binned._fact].codes.flags.f_contiguous
        idx = np.sort(rng.choice(n, 700, replace=False))
        for j in range(9):
            threshold = int(binned.n_bins[j]) // 2
            left = codes[idx, j] <= threshold
            np.testing.assert_array_equal(binned.goes_left(idx, j, threshold), left)
            labels = np.zeros(n, dtype=np.uint8)
            lst, out = idx.copy(), np.empty(idx.size + 1, dtype=np.intp)
            moved, kept = binned.split(lst, labels, 0, 1, j, threshold, True, out)
            np.testing.assert_array_equal(out[:moved], idx[left])
            np.testing.assert_array_equal(lst[:kept], idx[~left])


@pytest.mark.parametrize("kernels", KERNELS)
def test_every_rows_repeated_hessians_are_kept_and_the_sums_are_the_same_bytes(kernels):
    """Under a key naming the hessians, the root's pass keeps the fact features' hessian sums of
    every row, and later passes with that key add the gradients alone: each one's histograms
    are the same bytes as a full pass's; another key sums the hessians again."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(11)
    n, m = 4000, 60
    fact = np.column_stack([rng.integers(0, k, n) for k in (3, 5, 90)]).astype(float)
    X = NormalizedMatrix.from_parts(
        [fact, np.round(rng.standard_normal((m, 2)), 1)],
        [None, rng.integers(0, m, n)],
        [[0, 1, 2], [3, 4]],
        (n, 5),
    )
    binned = BinnedMatrix.from_matrix(X)
    ones = np.ones(n, dtype=np.float32)
    other = rng.random(n).astype(np.float32) + 0.5
    with cpu_kernels(kernels):
        for h, key in (
            (ones, (ones, 1)),
            (ones, (ones, 1)),
            (other, (other, 1)),
            (ones, (ones, 1)),
        ):
            g = rng.standard_normal(n).astype(np.float32)
            full = binned.leaf_histograms(None, g, h, counts=False)
            keyed = binned.leaf_histograms(None, g, h, counts=False, hessians_of=key)
            np.testing.assert_array_equal(keyed, full)
            assert binned._every_row_hessians[0] == key


def test_the_numpy_and_compiled_histograms_agree():
    from ilargi.backend import compiled, cpu

    rng = np.random.default_rng(0)
    codes = rng.integers(0, 30, (500, 4)).astype(np.uint8)
    rows = rng.integers(-1, 499, 3000)
    idx = np.sort(rng.choice(3000, 2000, replace=False))
    g, h = rng.standard_normal(3000), rng.random(3000)
    with cpu_kernels("compiled"):
        np.testing.assert_allclose(
            compiled.bin_histograms(codes, rows, idx, g, h, None, 32),
            cpu.bin_histograms(codes, rows, idx, g, h, None, 32),
            rtol=1e-12,
        )
        np.testing.assert_allclose(
            compiled.leaf_sums(rows, idx, g, h, 500), cpu.leaf_sums(rows, idx, g, h, 500)
        )
        sums = rng.random((600, 3))
        jobs = np.array([[0, 0, 500, 1], [3, 100, 400, 0], [2, 0, 7, 2]])
        ours, theirs = np.zeros((3, 32, 3)), np.zeros((3, 32, 3))
        compiled.column_histograms(codes.T.copy(), jobs, sums, ours)
        cpu.column_histograms(codes.T.copy(), jobs, sums, theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def _lightgbm_bins(X, max_bin, min_data_in_bin):
    """LightGBM's bin of every cell (its binned dataset dumped as text)."""
    lightgbm = pytest.importorskip("lightgbm")
    dataset = lightgbm.Dataset(
        X,
        np.zeros(len(X)),
        params=dict(
            verbose=-1,
            max_bin=max_bin,
            min_data_in_bin=min_data_in_bin,
            enable_bundle=False,
            feature_pre_filter=False,
            bin_construct_sample_cnt=len(X) + 1,
        ),
    ).construct()
    if not hasattr(dataset, "_dump_text"):
        pytest.skip("this LightGBM cannot dump its binned dataset")
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".txt") as f:
        dataset._dump_text(f.name)
        lines = f.read().splitlines()
    last = X.shape[1] - 1
    start = next(i for i, line in enumerate(lines) if line.startswith(f"feature {last}:")) + 1
    return np.array(
        [
            [int(v) for v in line.strip().rstrip(",").split(",")]
            for line in lines[start : start + len(X)]
        ]
    )


@pytest.mark.parametrize("seed", range(4))
def test_bins_are_lightgbms(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 20_000))
    X = np.column_stack(
        [
            rng.standard_normal(n),
            np.round(rng.standard_normal(n), 1),
            rng.integers(-3, 5, n).astype(float),
            np.where(rng.random(n) < 0.4, 0.0, np.abs(rng.standard_normal(n))),
            np.where(rng.random(n) < 0.5, 0.0, -np.abs(np.round(rng.standard_normal(n) * 10))),
            rng.zipf(1.5, n).astype(float),  # values holding more than a mean bin
            np.round(rng.standard_normal(n) * 30),
        ]
    )
    for max_bin, mdib in ((255, 3), (15, 1), (4, 10), (63, 50)):
        reference = _lightgbm_bins(X, max_bin, mdib)
        _, codes = _reference_bins(X, max_bin, mdib)
        for j in range(X.shape[1]):
            np.testing.assert_array_equal(codes[:, j], reference[:, j], err_msg=f"column {j}")


@pytest.mark.parametrize("seed", range(3))
def test_bins_of_columns_holding_nan_are_lightgbms(seed):
    # NaN's own last bin, the other values in max_bin - 1 bins (LightGBM's missing type NaN)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(200, 20_000))
    X = np.column_stack(
        [
            rng.standard_normal(n),
            np.round(rng.standard_normal(n), 1),
            np.where(rng.random(n) < 0.6, 0.0, rng.standard_normal(n)),
            np.where(rng.random(n) < 0.5, -1.0, rng.integers(0, 4, n).astype(float)),
            np.zeros(n),
        ]
    )
    for j, share in enumerate((0.1, 0.4, 0.05, 0.2, 0.3)):
        X[rng.random(n) < share, j] = np.nan
    for max_bin, mdib in ((255, 3), (15, 1), (4, 10)):
        reference = _lightgbm_bins(X, max_bin, mdib)
        bounds, codes = _reference_bins(X, max_bin, mdib)
        for j in range(X.shape[1]):
            assert np.isnan(bounds[j][-1]) and bounds[j].size <= max_bin
            np.testing.assert_array_equal(codes[:, j], reference[:, j], err_msg=f"column {j}")
        binned = BinnedMatrix.from_matrix(_one_part(X), max_bin, mdib)
        np.testing.assert_array_equal(binned.toarray(), codes)
        assert binned.nan_bin.all() and sorted(binned.nan_features) == list(range(X.shape[1]))


def _one_part(X):
    return NormalizedMatrix.from_parts(
        [X], [None], [list(range(X.shape[1]))], X.shape, allow_nonfinite=True
    )


def test_nan_is_read_as_zero_where_a_feature_has_no_bin_of_it():
    bounds = bin_upper_bounds(np.array([-1.0, 0.0, 2.0]), np.array([5, 5, 5]))
    assert bin_codes(np.array([np.nan]), bounds)[0] == bin_codes(np.array([0.0]), bounds)[0]
    X = np.array([[1.0], [2.0], [3.0], [4.0]])
    binned = BinnedMatrix.from_matrix(_one_part(X), min_data_in_bin=1)
    given = BinnedMatrix.from_matrix(_one_part(np.array([[np.nan], [0.0]])), bounds=binned.bounds)
    assert given.toarray()[0, 0] == given.toarray()[1, 0]
    with pytest.raises(ValueError, match="NaN in a sparse source"):
        BinnedMatrix.from_matrix(
            NormalizedMatrix.from_parts(
                [sp.csr_matrix(np.array([[np.nan], [1.0]]))],
                [None],
                [[0]],
                (2, 1),
                allow_nonfinite=True,
            )
        )


def test_bins_refuse_a_transposed_view_and_bad_max_bin(small_star):
    nm, _ = small_star
    with pytest.raises(ValueError, match="transposed"):
        BinnedMatrix.from_matrix(nm.T)
    with pytest.raises(ValueError, match="max_bin"):
        BinnedMatrix.from_matrix(nm, 256)


# ---------------------------------------------------------------------------------------------
# Sparse sources: bins from the stored entries (vectorized over the columns), codes stored as
# the rows off each column's default bin, histograms from sums by key and the leaf's totals.


@st.composite
def sparse_columns(draw):
    """A sparse table (CSC), the target rows taking each of its rows (some none), the columns'
    implicit values, LightGBM's parameters."""
    n_rows = draw(st.integers(1, 80))
    k = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.sampled_from((0.0, 0.05, 0.3, 0.9)))
    kind = draw(st.sampled_from(("onehot", "small ints", "signed", "wide", "tiny")))
    S = sp.random(n_rows, k, density=density, random_state=seed, format="csc")
    S.data = {
        "onehot": lambda m: np.ones(m),
        "small ints": lambda m: rng.integers(1, 4, m).astype(float),
        "signed": lambda m: rng.integers(-3, 4, m).astype(float),  # explicit zeros too
        "wide": lambda m: np.round(rng.standard_normal(m) * 30, 1),
        "tiny": lambda m: rng.choice([1e-36, -1e-36, 5e-324, 1.0, np.nextafter(1.0, 2)], m),
    }[kind](S.data.size)
    weights = rng.integers(0, 4, n_rows) if draw(st.booleans()) else None
    if weights is not None and weights.sum() == 0:
        weights[0] = 1
    implicit = np.where(rng.random(k) < 0.3, np.round(rng.standard_normal(k), 1), 0.0)
    max_bin = draw(st.sampled_from((2, 3, 8, 255)))
    mdib = draw(st.sampled_from((1, 3, 5)))
    few = draw(st.sampled_from((1, 3, 64)))  # the vectorized rule's limit: both paths
    return S, weights, implicit, max_bin, mdib, few


@property_settings(max_examples=150)
@given(data=sparse_columns())
def test_sparse_columns_are_binned_as_each_column_alone(data):
    S, weights, implicit, max_bin, mdib, few = data
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sparse_bins, "FEW_VALUES", few)
        _check_sparse_bins(S, weights, implicit, max_bin, mdib)


def _check_sparse_bins(S, weights, implicit, max_bin, mdib):
    n_rows, k = S.shape
    col, row, value = sparse_bins.sparse_entries([[(S, c)] for c in range(k)], n_rows, False, [0])
    bounds, ranges, table = sparse_bins.bin_sparse_table(
        None,
        n_rows,
        np.arange(k),
        col,
        row,
        value + implicit[col],
        implicit,
        weights,
        max_bin,
        mdib,
        None,
    )
    dense = S.toarray() + implicit
    codes = table.dense()
    w = np.ones(n_rows, np.int64) if weights is None else weights
    for j in range(k):
        distinct, counts = distinct_counts(dense[:, j], weights)
        reference = bin_upper_bounds(distinct, counts, max_bin, mdib)
        np.testing.assert_array_equal(bounds[j], reference, err_msg=f"column {j}")
        assert ranges[j] == _value_range(distinct)
        np.testing.assert_array_equal(codes[:, j], bin_codes(dense[:, j], reference))
        # the default: the most frequent code by weight, the lowest of ties; never stored
        by_code = np.bincount(codes[:, j], weights=w, minlength=256)
        assert table.default[j] == np.argmax(by_code)
        stored = table.entry_codes[table.indptr[j] : table.indptr[j + 1]]
        assert np.all(stored != table.default[j])
        assert np.all(np.diff(table.entry_rows[table.indptr[j] : table.indptr[j + 1]]) > 0)
    # given bounds (new data binned like the training data): the same codes
    again = sparse_bins.bin_sparse_table(
        None,
        n_rows,
        np.arange(k),
        col,
        row,
        value + implicit[col],
        implicit,
        weights,
        max_bin,
        mdib,
        bounds,
    )
    np.testing.assert_array_equal(again[2].dense(), codes)
    assert again[1] is None


def _one_hot_star(seed, n=3000, dims=((40, 60), (300, 320)), absent=0.05, extra_values=(1.0,)):
    """A fact table of two dense columns and one-hot CSR dimensions (an identity block plus a
    few extra ones a row, some rows never referenced, some fact rows absent; the extra columns'
    values drawn from ``extra_values``)."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(seed)
    sources, rows, cols, at = [np.round(rng.standard_normal((n, 2)), 1)], [None], [[0, 1]], 2
    for m, d in dims:
        extra = sp.random(m, d - m, density=3 / (d - m), random_state=seed, format="csr")
        extra.data[:] = rng.choice(extra_values, extra.data.size)
        sources.append(sp.hstack([sp.identity(m), extra], format="csr"))
        fk = rng.integers(0, m - 3, n)  # the last rows: weight 0
        fk[rng.random(n) < absent] = -1
        rows.append(fk)
        cols.append(list(range(at, at + d)))
        at += d
    return NormalizedMatrix.from_parts(sources, rows, cols, (n, at)), rng


@pytest.mark.parametrize("kernels", KERNELS)
def test_one_hot_dimensions_are_sparse_and_their_histograms_exact(kernels):
    nm, rng = _one_hot_star(0)
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm, 255, 3)
    assert sum(isinstance(t, SparseBinnedTable) for t in binned.tables) == 2
    for t in binned.tables:
        if isinstance(t, SparseBinnedTable):  # one-hot: zero's bin the default, ones stored
            assert np.all(t.default == 0) and np.all(t.entry_codes == 1)
    bounds, codes = _reference_bins(_dense(nm.materialize()), 255, 3)
    for ours, reference in zip(binned.bounds, bounds):
        np.testing.assert_array_equal(ours, reference)
    np.testing.assert_array_equal(binned.toarray(), codes)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    with cpu_kernels(kernels):
        for fraction in (1.0, 0.3, 0.01):
            idx = np.flatnonzero(rng.random(n) < fraction).astype(np.intp)
            np.testing.assert_allclose(
                binned.histograms(idx, g, h),
                _reference_histograms(codes, idx, g, h, binned.max_bins),
                rtol=1e-9,
                atol=1e-9,
            )
            for j in (int(rng.integers(2, 42)), int(rng.integers(42, nm.shape[1]))):
                order = idx.copy()
                n_left = binned.partition(order, 0, order.size, j, 0)
                left = codes[idx, j] <= 0
                np.testing.assert_array_equal(order[:n_left], idx[left])
                np.testing.assert_array_equal(order[n_left:], idx[~left])
                np.testing.assert_array_equal(binned.goes_left(idx, j, 0), left)


def test_sparse_histograms_numpy_and_compiled_by_column_and_by_row_are_the_same_bytes():
    from ilargi.backend import compiled, cpu

    nm, rng = _one_hot_star(1, n=5000, dims=((50, 90), (700, 760)))
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    columns, by_row = binned._sparse_layout
    R, position = binned._keys()
    jobs = columns[3]
    some = np.sort(rng.choice(jobs.shape[0], jobs.shape[0] // 3, replace=False))
    some_bins = np.concatenate([np.arange(o, o + b) for o, b in jobs[some, 1:3]])
    assert set(jobs[some, 4]) == {0, 1}  # some columns of each table
    with cpu_kernels("compiled"):
        for fraction in (1.0, 0.05, 0.002):
            idx = np.flatnonzero(rng.random(n) < fraction).astype(np.intp)
            sums, _ = cpu.leaf_pass(
                R,
                [position[t] for t in binned.sparse],
                [binned.tables[t].n_rows for t in binned.sparse],
                None,
                idx,
                g,
                h,
            )
            stacked = np.concatenate(sums)
            totals = np.array(
                [g[idx].sum(dtype=np.float64), h[idx].sum(dtype=np.float64), idx.size]
            )
            reference = np.zeros((binned.total_bins, 3))
            cpu.sparse_histograms(columns, by_row, stacked, totals, reference, idx.size)
            for by_rows in (None, np.zeros(2, bool), np.ones(2, bool), np.array([True, False])):
                ours = np.zeros((binned.total_bins, 3))
                compiled.sparse_histograms(
                    columns, by_row, stacked, totals, ours, idx.size, by_rows
                )
                np.testing.assert_array_equal(ours, reference)
                # some of the jobs (a leaf's candidates), into a buffer that held anything: their
                # bins are written whole, by either backend
                for backend in (compiled, cpu):
                    dirty = rng.standard_normal((binned.total_bins, 3)) * 1e3
                    backend.sparse_histograms(
                        columns, by_row, stacked, totals, dirty, idx.size, by_rows, True, None, some
                    )
                    np.testing.assert_array_equal(dirty[some_bins], reference[some_bins])
            with cpu_kernels("numpy"):
                numpy_hist = binned.leaf_histograms(idx, g, h)
                unfixed = binned.leaf_histograms(idx, g, h, zero_bins=False)
            np.testing.assert_array_equal(binned.leaf_histograms(idx, g, h), numpy_hist)
            # one-hot features' bin 0 left at zero (a scan never reads it), the rest the same
            ours = binned.leaf_histograms(idx, g, h, zero_bins=False)
            np.testing.assert_array_equal(ours, unfixed)
            zero = binned.offsets[binned.tables[binned.sparse[0]].features]
            assert np.all(ours[zero] == 0.0)
            rest = np.ones(binned.total_bins, bool)
            rest[
                binned.offsets[np.concatenate([binned.tables[t].features for t in binned.sparse])]
            ] = False
            np.testing.assert_array_equal(ours[rest], numpy_hist[rest])


@pytest.mark.parametrize("kernels", KERNELS)
# a few of the dimensions' features, or all of them; 0: the fact columns alone (no sums by key)
@pytest.mark.parametrize("share", [0.0, 0.02, 1.0])
def test_a_leafs_candidates_are_exact_in_a_reused_buffer(kernels, share):
    """A tree learner's leaf builds only its candidate features' histograms, into a buffer that
    held another leaf's: their bins (one-hot default bins included) are the bytes of the full
    histograms, whatever the buffer held, and the parent's minus a child's are the other
    child's."""
    nm, rng = _one_hot_star(3, n=4000, dims=((60, 90), (500, 540)))
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    d = binned.d
    features = 2 + np.flatnonzero(rng.random(d - 2) < share)  # dimensions' features
    features = np.union1d(features, [0, 5, d - 1] if share else [0, 1])
    candidates = binned.candidates(features)
    assert (candidates.sparse_jobs.size == 0) == (share == 0.0)
    bins = np.concatenate(
        [np.arange(o, o + b) for o, b in zip(candidates.offsets, candidates.n_bins)]
    )
    with cpu_kernels(kernels):
        for fraction in (1.0, 0.2, 0.01):
            idx = np.flatnonzero(rng.random(n) < fraction).astype(np.intp)
            full = binned.leaf_histograms(idx, g, h, zero_bins=False)
            dirty = rng.standard_normal((binned.total_bins, 3)) * 1e3
            ours = binned.leaf_histograms(
                idx, g, h, zero_bins=False, candidates=candidates, out=dirty
            )
            assert ours is dirty
            np.testing.assert_array_equal(ours[bins], full[bins])
            # without counts (what a tree learner reads): the fact table's and the sparse
            # dimensions' counts zero (dense dimensions' counted)
            uncounted = binned.leaf_histograms(idx, g, h, zero_bins=False, counts=False)
            np.testing.assert_array_equal(uncounted[:, :2], full[:, :2])
            sparse = np.zeros(binned.total_bins, bool)
            for t in binned.sparse:
                for f in binned.tables[t].features:
                    sparse[binned.offsets[f] : binned.offsets[f + 1]] = True
            fact = np.arange(binned.offsets[0], binned.offsets[2])  # features 0 and 1
            sparse[fact] = True
            assert np.all(uncounted[sparse, 2] == 0.0)
            np.testing.assert_array_equal(uncounted[~sparse, 2], full[~sparse, 2])
            # the larger child: its parent's (all rows here) minus the smaller child's
            parent = binned.leaf_histograms(np.arange(n), g, h, zero_bins=False)
            rest = np.setdiff1d(np.arange(n), idx)
            binned.subtract(parent, ours, candidates)
            np.testing.assert_allclose(
                parent[bins],
                binned.leaf_histograms(rest, g, h, zero_bins=False)[bins],
                rtol=1e-9,
                atol=1e-6,
            )


@pytest.mark.parametrize("share", [1.0, 0.3])  # candidates: every feature, or some
@pytest.mark.parametrize("counts", [False, True])
@pytest.mark.parametrize("zero_bins", [False, True])
def test_a_leaf_subtracted_from_its_parent_as_it_is_summed_gives_its_siblings_bytes(
    zero_bins, counts, share
):
    """A leaf that cannot split: its histograms only make its sibling's, subtracted from their
    parent's as they are summed (a small leaf's sparse features' at the bins its rows reach,
    where its pass listed them): the bytes of its histograms made whole and then subtracted,
    with one-hot columns and sparse numeric ones whose default bin is not bin 0."""
    nm, rng = _one_hot_star(4, n=4000, dims=((60, 90), (500, 540)), extra_values=(-2.0, 1.0, 3.0))
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm)
    sparse = [binned.tables[t] for t in binned.sparse]
    assert any(np.any(t.default != 0) for t in sparse)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    splittable = np.flatnonzero(binned.n_bins > 1)
    candidates = binned.candidates(splittable[rng.random(splittable.size) < share])
    bins = np.concatenate(
        [np.arange(o, o + b) for o, b in zip(candidates.offsets, candidates.n_bins)]
    )
    if not zero_bins:  # default bins 0: not read by a scan, undefined here
        bins = np.setdiff1d(
            bins, candidates.offsets[columns_defaulting_to_zero(binned, candidates)]
        )
    every = np.arange(n)
    with cpu_kernels("compiled"):
        for m in (1, 4, 12, 300, 3000):  # one block lists its rows: its sparse bins reached alone
            idx = np.sort(rng.choice(n, m, replace=False)).astype(np.intp)
            totals = (g[idx].sum(dtype=np.float64), h[idx].sum(dtype=np.float64))
            kwargs = dict(zero_bins=zero_bins, candidates=candidates, counts=counts)
            parent = binned.leaf_histograms(
                every, g, h, **kwargs, out=np.zeros((binned.total_bins, 3))
            )
            expected = parent.copy()
            child = binned.leaf_histograms(
                idx, g, h, totals, **kwargs, out=rng.random(parent.shape)
            )
            binned.subtract(expected, child, candidates)
            got = parent.copy()
            binned._clean = None
            binned.leaf_histograms(
                idx, g, h, totals, **kwargs, out=rng.random(parent.shape), sibling=got
            )
            assert (binned._clean is not None) == (m < 1024)  # the direct path where listed
            assert got[bins].tobytes() == expected[bins].tobytes()
            if binned._clean is not None:
                assert not binned._clean.any()  # left zero for the next leaf


def columns_defaulting_to_zero(binned, candidates):
    """Which candidates are sparse columns whose default bin is bin 0."""
    jobs = binned._sparse_job[candidates.features]
    defaults = binned._sparse_layout[0][3][:, 3]
    return (jobs >= 0) & (defaults[np.maximum(jobs, 0)] == 0)


def test_a_small_row_selection_keeps_wide_sparse_tables_sparse():
    """A test set of fewer rows than a one-hot dimension (predict): its codes stay sparse, not
    one byte per target row and column."""
    nm, _ = _one_hot_star(2, n=400, dims=((600, 640),))
    X = nm[np.arange(100, 300)]
    binned = BinnedMatrix.from_matrix(X)
    assert any(isinstance(t, SparseBinnedTable) and t.n_rows > X.shape[0] for t in binned.tables)
    _, codes = _reference_bins(_dense(X.materialize()), 255, 3)
    np.testing.assert_array_equal(binned.toarray(), codes)


def test_a_mostly_filled_sparse_column_stores_its_implicit_rows():
    """A sparse column whose most frequent value is a stored one: the rows without an entry
    (the implicit zero) are the ones stored."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(5)
    m, n = 200, 2000
    dense = np.where(rng.random((m, 3)) < 0.8, 7.0, 0.0)
    dense[:, 2] = np.where(rng.random(m) < 0.5, rng.integers(1, 5, m), 0.0)
    nm = NormalizedMatrix.from_parts(
        [sp.csr_array(dense)], [rng.integers(-1, m, n)], [[0, 1, 2]], (n, 3)
    )
    binned = BinnedMatrix.from_matrix(nm, 255, 1)
    (table,) = binned.tables
    assert isinstance(table, SparseBinnedTable) and table.default[0] == 1  # 7.0's bin
    _, codes = _reference_bins(_dense(nm.materialize()), 255, 1)
    np.testing.assert_array_equal(binned.toarray(), codes)
    g, h = rng.standard_normal(n), rng.random(n)
    idx = np.sort(rng.choice(n, 700, replace=False))
    np.testing.assert_allclose(
        binned.histograms(idx, g, h),
        _reference_histograms(codes, idx, g, h, binned.max_bins),
        rtol=1e-9,
        atol=1e-9,
    )


def _dense(table):
    return table.toarray() if sp.issparse(table) else np.asarray(table)


def test_tables_sums_by_key_are_stacked_without_a_copy_only_where_consecutive():
    """The compiled pass writes the tables' sums by key as consecutive rows of one array: that
    array is used as is; sums anywhere else are copied, in order."""
    from ilargi.rewriter.histograms import _stacked

    a = np.empty((10, 3))
    a[:] = np.arange(30.0).reshape(10, 3)
    assert _stacked([a[:4], a[4:]]) is a
    assert _stacked([a]) is a
    for parts in ([a[:4], a[5:]], [a[:4], a[4:9]], [a[4:], a[:4]], [np.ones((2, 3)), a[:3]]):
        stacked = _stacked(parts)
        assert stacked is not a
        np.testing.assert_array_equal(stacked, np.concatenate(parts))
