"""Bin edges as LightGBM finds them, from a column's distinct values and how many rows hold each.

A column's bins are those of ``BinMapper::FindBin`` for a numerical feature, every row sampled:
:func:`distinct_counts` (each value weighed by the target rows that take its row), then
:func:`bin_upper_bounds`; :func:`bin_codes` gives a value's bin. A column holding NaN gets a last
bin of its own for it (LightGBM's missing type NaN, whose direction each split learns); without
one, NaN is read as 0, as LightGBM reads it. The binning kernels
(:func:`binning_kernels`) are the backend's, compiled and parallel on the CPU once built.
A categorical feature's bins are its categories, as LightGBM's ``FindBin`` for a categorical
feature finds them (:func:`category_bins`, :func:`category_codes`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ilargi.backend import backend_of
from ilargi.backend.contract import Array, optional

NO_VALUES = np.empty(0)
K_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold: |v| <= it counts as zero
MAX_BIN = 255  # uint8 codes
HASH_SAMPLE = 4096  # distinct_counts: values sampled to choose a hash table or a sort
HASH_DISTINCT = 256  # ... a hash table where the sample holds at most this many distinct values


# ---------------------------------------------------------------------------------------------
# LightGBM's bin boundaries (BinMapper::FindBin for a numerical feature without NaN, every row
# sampled), from the distinct values of a column and their counts.


def distinct_counts(values: Array, weights: Array | None = None) -> tuple[Array, Array]:
    """The sorted distinct values of a column and how many rows hold each.

    Parameters
    ----------
    values : ndarray of float
        Values of a column (or of the rows of a table that feed it).
    weights : ndarray of int, optional
        How many target rows take each value's row (None: one each). Values of weight 0 are
        dropped: no target row holds them.

    Returns
    -------
    distinct : ndarray of float
    counts : ndarray of int64

    Examples
    --------
    >>> distinct_counts(np.array([2.0, 1.0, 2.0, 5.0]), np.array([1, 3, 2, 0]))
    (array([1., 2.]), array([3, 3]))
    """
    values = np.asarray(values, dtype=np.float64)
    if _few_distinct(values):
        return _hashed_distinct_counts(values, weights)
    if weights is not None and np.sum(weights) <= 2 * values.size:
        # as many target rows as table rows (a selection of the fact table's): each value
        # repeated by its weight and sorted costs less than the argsort behind the inverse
        values, weights = np.repeat(values, _counts(weights)), None
    if weights is None:  # a sort, without the argsort that the inverse needs
        distinct, counts = np.unique(values, return_counts=True)
        return distinct, counts.astype(np.int64)
    distinct = np.unique(values)  # a sort, without the argsort behind the inverse
    if distinct.size <= MAX_BIN + 1:
        # each value's place among the distinct ones is its bin with them as the bounds (the
        # first >= it: itself), found by a search per value, in uint8
        codes = np.empty((values.size, 1), dtype=np.uint8)
        binning_kernels()[1](values, distinct, codes, 0)
        inverse = codes[:, 0]
        if np.isnan(distinct[-1]):  # the search's place for NaN is undefined: NaN is last
            inverse[np.isnan(values)] = distinct.size - 1
    else:
        distinct, inverse = np.unique(values, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=weights, minlength=distinct.size)
    counts = np.rint(counts).astype(np.int64)
    keep = counts > 0
    return distinct[keep], counts[keep]


def _few_distinct(values):
    """Whether a sample of the column (every k-th value, about HASH_SAMPLE) holds at most
    HASH_DISTINCT distinct values: then a hash table counts them in one pass, where a sort of
    millions of values costs several passes and copies (either gives the same result)."""
    if values.size <= HASH_SAMPLE:
        return False
    sample = values[:: values.size // HASH_SAMPLE]
    return np.unique(sample).size <= HASH_DISTINCT


def _hashed_distinct_counts(values, weights):
    """:func:`distinct_counts` by pandas' hash table: a pass over the values, no sort or copy of
    them (NaN counted as one value, last, as ``np.unique`` sorts it)."""
    if weights is None:
        counted = pd.Series(values, copy=False).value_counts(sort=False, dropna=False)
        distinct, counts = counted.index.to_numpy(np.float64), counted.to_numpy(np.int64)
    else:
        codes, distinct = pd.factorize(values, use_na_sentinel=False)
        counts = np.bincount(codes, weights=weights, minlength=distinct.size)
        counts = np.rint(counts).astype(np.int64)
        distinct = np.asarray(distinct, dtype=np.float64)
    order = np.argsort(distinct, kind="stable")
    distinct, counts = distinct[order], counts[order]
    keep = counts > 0
    return distinct[keep], counts[keep]


def _counts(weights):
    """Weights as int64 counts (rounded where they are floats; integers as they are)."""
    if weights.dtype == np.int64:
        return weights
    return np.rint(weights).astype(np.int64)


def _upper(a):
    return float(np.nextafter(a, np.inf))


def _greedy_find_bin(values, counts, max_bin, total, min_data_in_bin):
    """LightGBM's GreedyFindBin: upper bounds of at most max_bin bins over sorted distinct values."""
    n = len(values)
    bounds: list[float] = []
    if n <= max_bin:
        values, counts = list(values), list(counts)
        in_bin = 0
        for i in range(n - 1):
            in_bin += counts[i]
            if in_bin >= min_data_in_bin:
                val = _upper((values[i] + values[i + 1]) / 2.0)
                if not bounds or not val <= _upper(bounds[-1]):
                    bounds.append(val)
                    in_bin = 0
        bounds.append(np.inf)
        return bounds
    if min_data_in_bin > 0:
        max_bin = max(min(max_bin, int(total // min_data_in_bin)), 1)
    # LightGBM walks the values one by one; a bin ends at the first value that is big (holds at
    # least a mean bin), fills the bin, or precedes a big value once the bin holds half a mean
    # bin. Each of the three is found by a binary search over prefix sums, so the walk takes
    # one step per bin.
    c = np.asarray(counts, dtype=np.int64)
    mean_bin_size = total / max_bin
    big_mask = c >= mean_bin_size
    big = np.flatnonzero(big_mask)
    rest_bin_cnt = max_bin - big.size
    rest_total = int(total) - int(c[big_mask].sum())
    mean_bin_size = _divide(rest_total, rest_bin_cnt)
    cum = np.cumsum(c).astype(np.float64)  # float: searched with float keys (exact below 2^53)
    not_big_cum = np.cumsum(np.where(big_mask, 0, c))
    before_big = cum[np.maximum(big - 1, 0)]  # rows up to the value before each big one (float)
    upper, lower = [], [values[0]]
    start, last = 0, n - 2
    while start <= last:
        base = float(cum[start - 1]) if start else 0.0
        ends = [last + 1]
        k = int(np.searchsorted(big, start))
        if k < big.size:
            ends.append(int(big[k]))  # a big value
        if not np.isnan(mean_bin_size):
            ends.append(max(start, int(np.searchsorted(cum, base + mean_bin_size, side="left"))))
        half = max(1.0, mean_bin_size * 0.5)
        k1 = int(np.searchsorted(big, start + 1))
        k2 = max(k1, int(np.searchsorted(before_big, base + half, side="left")))
        if k2 < big.size:
            ends.append(int(big[k2]) - 1)  # the value before a big one, half a bin reached
        i = min(ends)
        if i > last:
            break
        upper.append(values[i])
        lower.append(values[i + 1])
        if len(upper) >= max_bin - 1:
            break
        if not big_mask[i]:
            rest_bin_cnt -= 1
            mean_bin_size = _divide(rest_total - int(not_big_cum[i]), rest_bin_cnt)
        start = i + 1
    for i in range(len(upper)):
        val = _upper((upper[i] + lower[i + 1]) / 2.0)
        if not bounds or not val <= _upper(bounds[-1]):
            bounds.append(val)
    bounds.append(np.inf)
    return bounds


def _divide(a, b):
    """a / b in C's double arithmetic: inf for a > 0 and b = 0, NaN for 0 / 0."""
    if b == 0:
        return np.nan if a == 0 else np.inf
    return a / b


def bin_upper_bounds(
    distinct: Array, counts: Array, max_bin: int = MAX_BIN, min_data_in_bin: int = 3
) -> Array:
    """Upper bounds of a column's bins, as LightGBM finds them for a numerical feature from every
    row (``BinMapper::FindBin``, zero as one bin).

    Values with ``|v| <= 1e-35`` count as zero; distinct values one ulp apart merge (the larger
    one kept); zero gets a bin of its own between the negative and the positive values; each side
    gets bins of about equal counts (``GreedyFindBin``), each bound a midpoint of two neighbouring
    values, rounded up by one ulp. A value v falls into the first bin whose bound is >= v. Where
    the column holds NaN, the other values get ``max_bin - 1`` bins and NaN a last one, its bound
    NaN (LightGBM's missing type NaN).

    Parameters
    ----------
    distinct : ndarray of float
        The column's sorted distinct values (:func:`distinct_counts`).
    counts : ndarray of int
        Rows holding each value.
    max_bin : int, default=255
        Bins at most.
    min_data_in_bin : int, default=3
        Rows a bin holds at least (where the values allow it).

    Returns
    -------
    ndarray of float
        Increasing upper bounds, the last one +inf, then NaN where the column holds NaN.

    Examples
    --------
    >>> bounds = bin_upper_bounds(np.array([-1.0, 0.0, 2.0, 3.0]), np.array([5, 5, 5, 5]))
    >>> bounds[2:]  # -1 and 0 each in a bin of its own, bounded by -1e-35 and 1e-35
    array([2.5, inf])
    >>> bool(-1e-34 < bounds[0] < 0 < bounds[1] < 1e-34)
    True
    >>> bin_upper_bounds(np.array([2.0, 3.0, np.nan]), np.array([5, 5, 1]))[1:]  # NaN's bin last
    array([2.5, inf, nan])
    """
    distinct = np.asarray(distinct, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    if distinct.size and np.isnan(distinct[-1]):  # NaN sorts last: a bin of its own
        bounds = bin_upper_bounds(distinct[:-1], counts[:-1], max_bin - 1, min_data_in_bin)
        return np.append(bounds, np.nan)
    total = int(counts.sum())
    nonzero = np.abs(distinct) > K_ZERO
    zero_cnt = total - int(counts[nonzero].sum())
    values, value_counts = distinct[nonzero], counts[nonzero]
    if values.size:  # merge values one ulp apart, keeping the larger (CheckDoubleEqualOrdered)
        merged = values[1:] <= np.nextafter(values[:-1], np.inf)
        group = np.concatenate([[0], np.cumsum(~merged)])
        last = np.concatenate([~merged, [True]])
        value_counts = np.bincount(group, weights=value_counts).astype(np.int64)
        values = values[last]
    dv, cnt = values, value_counts
    if not dv.size:
        dv, cnt = np.zeros(1), np.array([zero_cnt])
    elif (dv[0] > 0 and zero_cnt > 0) or (dv[-1] < 0 and zero_cnt > 0) or dv[0] < 0 < dv[-1]:
        k = int(np.searchsorted(values, 0.0))  # zero goes before the first positive value
        dv, cnt = np.insert(dv, k, 0.0), np.insert(cnt, k, zero_cnt)
    return np.asarray(_zero_as_one_bin(dv, cnt, max_bin, total, min_data_in_bin))


def _zero_as_one_bin(dv, cnt, max_bin, total, min_data_in_bin):
    """LightGBM's FindBinWithZeroAsOneBin (without forced bounds)."""
    values, counts = dv, cnt
    left_data = int(counts[values <= -K_ZERO].sum())
    right_data = int(counts[values > K_ZERO].sum())
    zero_data = total - left_data - right_data
    left_cnt = int(np.searchsorted(values, -K_ZERO, side="right"))  # first value > -K_ZERO
    bounds: list[float] = []
    if left_cnt > 0 and max_bin > 1:
        left_max_bin = int(left_data / (total - zero_data) * (max_bin - 1))
        bounds = _greedy_find_bin(
            dv[:left_cnt], cnt[:left_cnt], max(1, left_max_bin), left_data, min_data_in_bin
        )
        if bounds:
            bounds[-1] = -K_ZERO
    right_start = int(np.searchsorted(values, K_ZERO, side="right"))  # first value > K_ZERO
    right_max_bin = max_bin - 1 - len(bounds)
    if right_start < values.size and right_max_bin > 0:
        right = _greedy_find_bin(
            dv[right_start:], cnt[right_start:], right_max_bin, right_data, min_data_in_bin
        )
        bounds.append(K_ZERO)
        bounds.extend(right)
    else:
        bounds.append(np.inf)
    return bounds


def bin_codes(values: Array, bounds: Array) -> Array:
    """The bin of each value: the first bin whose upper bound is >= the value (uint8); NaN's is
    :func:`nan_bin`'s.

    Parameters
    ----------
    values : ndarray of float
    bounds : ndarray of float
        Increasing upper bounds, the last +inf, then NaN for a bin of NaN
        (:func:`bin_upper_bounds`).

    Returns
    -------
    ndarray of uint8

    Examples
    --------
    >>> bin_codes(np.array([-2.0, 0.0, 2.5, 9.0]), np.array([-1e-35, 1e-35, 2.5, np.inf]))
    array([0, 1, 2, 3], dtype=uint8)
    >>> bin_codes(np.array([np.nan, 1.0]), np.array([-1e-35, 1e-35, 2.5, np.inf]))  # NaN as 0
    array([1, 2], dtype=uint8)
    """
    values = np.asarray(values, dtype=np.float64)
    codes = np.searchsorted(bounds, values, side="left").astype(np.uint8)
    code_nan(values, bounds, codes[:, None] if codes.ndim == 1 else codes, 0)
    return codes


def nan_bin(bounds: Array) -> int:
    """The bin of NaN: the last where the feature has a bin of NaN (its last bound NaN), else
    zero's (LightGBM reads NaN as 0 in a feature without missing values)."""
    if np.isnan(bounds[-1]):
        return len(bounds) - 1
    return int(np.searchsorted(bounds, 0.0, side="left"))  # NaN sorts after 0 and inf


def code_nan(values: Array, bounds: Array, codes: Array, column: int) -> None:
    """codes[:, column] = :func:`nan_bin` where a value is NaN (a search for the first bound
    >= NaN has no answer), in place."""
    nan = np.isnan(values)
    if nan.any():
        codes[nan, column] = nan_bin(bounds)


def most_frequent_bin(distinct: Array, counts: Array, bounds: Array) -> int:
    """The bin LightGBM deems most frequent (``BinMapper::most_freq_bin_``): the one holding
    the most rows where it holds at least 70 % of them, else zero's bin. Where it is bin 0,
    LightGBM sums bin 0 as the rest of a leaf, which its scan for NaN's direction reads."""
    held = np.bincount(bin_codes(distinct, bounds), weights=counts, minlength=len(bounds))
    most = int(np.argmax(held))
    zero = int(np.searchsorted(bounds, 0.0, side="left"))
    if most != zero and held[most] / np.sum(counts) < 0.7:  # LightGBM's kSparseThreshold
        return zero
    return most


# ---------------------------------------------------------------------------------------------
# LightGBM's bins of a categorical feature (BinMapper::FindBin for BinType::CategoricalBin, every
# row sampled): bin 0 holds the categories without a bin of their own, bins 1, 2, ... one
# category each, the most frequent first.

CATEGORY_LIMIT = 2**31  # LightGBM casts categories to int32


def category_bins(
    distinct: Array, counts: Array, max_bin: int = MAX_BIN, min_data_in_bin: int = 3
) -> tuple[Array, bool]:
    """A categorical feature's bins, as LightGBM finds them from every row.

    The categories are taken by how many rows hold each, most first (ties: the smaller category
    first), while they cover less than 99 % of the rows or fewer than ``max_bin`` bins are
    taken; from the third on, a category held by fewer than ``min_data_in_bin`` rows ends the
    list. The categories left over share bin 0 with those never seen and NaN (NaN rows count
    for ``max_bin`` as a category, not for the 99 %).

    Parameters
    ----------
    distinct : ndarray of float
        The feature's distinct values (:func:`distinct_counts`), categories: whole numbers
        from 0 below 2**31 (:func:`check_categories`), and NaN.
    counts : ndarray of int
        Rows holding each.
    max_bin, min_data_in_bin : int
        As for a numerical feature.

    Returns
    -------
    categories : ndarray of float
        The category of each bin, bin 0's -1 (LightGBM's ``bin_2_categorical_``).
    missing : bool
        Whether some category has no bin of its own or some row holds NaN (LightGBM's missing
        type NaN, written in a split's decision type).

    Examples
    --------
    >>> category_bins(np.array([0.0, 3.0, 7.0]), np.array([5, 9, 5]))
    (array([-1.,  3.,  0.,  7.]), False)
    >>> category_bins(np.array([0.0, 3.0, np.nan]), np.array([5, 9, 2]))
    (array([-1.,  3.,  0.]), True)
    """
    distinct = np.asarray(distinct, dtype=np.float64)
    counts = np.asarray(counts, dtype=np.int64)
    nan = np.isnan(distinct)
    held_nan = bool(counts[nan].sum() > 0)
    held = (counts > 0) & ~nan
    order = np.argsort(-counts[held], kind="stable")
    categories, held_by = distinct[held][order], counts[held][order]
    total = int(held_by.sum())
    # RoundInt((total - na_cnt) * 0.99f): a single-precision product, rounded in double
    cut = int(float(np.float32(np.float32(total) * np.float32(0.99))) + 0.5)
    most = min(categories.size + held_nan, max_bin)
    taken = used = 0
    while taken < categories.size and (used < cut or taken + 1 < most):
        if held_by[taken] < min_data_in_bin and taken > 1:
            break
        used += int(held_by[taken])
        taken += 1
    missing = taken < categories.size or held_nan
    return np.concatenate([[-1.0], categories[:taken]]), missing


def check_categories(values: Array, feature: Any) -> None:
    """A ValueError naming ``feature`` unless every value is a category: a whole number from 0
    below 2**31 (the codes LightGBM takes; ``Table.to_matrix(..., categorical="ordinal")``
    encodes strings as such), or NaN (missing, sent right by every split as by LightGBM)."""
    values = np.asarray(values, dtype=np.float64)
    category = (values >= 0) & (values < CATEGORY_LIMIT) & (np.floor(values) == values)
    bad = ~(category | np.isnan(values))
    if bad.any():
        raise ValueError(
            f"categorical feature {feature} holds {float(values[bad][0])!r}; a category is a whole "
            f"number from 0 below 2**31 (encode strings with categorical='ordinal')"
        )


def category_codes(values: Array, categories: Array) -> Array:
    """The bin of each value (uint8) among a feature's ``categories`` (:func:`category_bins`):
    0 for a category without a bin of its own or never seen, and for NaN.

    Examples
    --------
    >>> category_codes(np.array([7.0, 3.0, 5.0, 0.0]), np.array([-1.0, 3.0, 0.0, 7.0]))
    array([3, 1, 0, 2], dtype=uint8)
    """
    values = np.asarray(values, dtype=np.float64)
    known = np.asarray(categories[1:], dtype=np.float64)
    order = np.argsort(known, kind="stable")
    place = np.minimum(np.searchsorted(known[order], values), max(known.size - 1, 0))
    if not known.size:
        return np.zeros(values.shape, dtype=np.uint8)
    found = known[order][place] == values
    return np.where(found, order[place] + 1, 0).astype(np.uint8)


def binning_kernels():
    """(affine_column, bin_column, gather_codes, joint_codes) of the CPU backend (compiled once
    built)."""
    kernels = backend_of(NO_VALUES)
    found = (
        optional(kernels, "affine_column"),
        optional(kernels, "bin_column"),
        optional(kernels, "gather_codes"),
        optional(kernels, "joint_codes"),
    )
    return all_found(kernels, found, "binning")


def all_found(kernels, found, what):
    """The kernels looked up on a backend, checked: all there (``what``: for the error)."""
    if any(kernel is None for kernel in found):  # pragma: no cover - every CPU backend has them
        raise TypeError(f"the {kernels.name} backend has no {what} kernels")
    return found
