"""Bins of sparse source columns, vectorized over the columns, and their sparse codes.

A sparse source (one-hot dimension tables have tens of thousands of columns) is binned from its
stored entries, never from dense columns: each column's values are its entries plus one implicit
value (``a_j · 0 + b_j``, also the value of the absent row) held by the remaining rows, each row
weighed by the target rows that take it. Every column's weighted distinct values come from one sort
of (column, value) pairs; LightGBM's bounds (:func:`~ilargi.rewriter.bin_edges.bin_upper_bounds`)
follow for all columns at once where each side of zero has few enough values for GreedyFindBin's
simple rule (a bin closes once it holds ``min_data_in_bin`` rows), per column otherwise.

The codes are stored sparsely (:class:`SparseBinnedTable`): per column only the rows whose code is
not the column's most frequent one (its *default* bin, by weighted count: zero's bin for a one-hot
column), in a CSC-like layout. A leaf's histogram of such a column adds the leaf's sums by key of
those rows into their bins; the default bin is the leaf's totals minus the other bins, as LightGBM
rebuilds its most frequent bin.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ilargi.backend.contract import Array

from .bin_edges import K_ZERO, bin_upper_bounds

# columns with more distinct values than this on one side of zero are binned one by one (the
# vectorized rule pads every column to the widest one)
FEW_VALUES = 64


@dataclass
class SparseBinnedTable:
    """The bin codes of the features one index vector feeds, stored per column as the rows whose
    code is not the column's default.

    Attributes
    ----------
    rows : ndarray of intp or None
        Index vector over the target rows (-1: absent), None for the fact table.
    n_rows : int
        Table rows (with ``rows``, row 0 is the absent row and table row j is row j + 1).
    features : ndarray of intp, shape (k,)
        The target column of each column.
    default : ndarray of uint8, shape (k,)
        Each column's most frequent code (by weighted count).
    indptr : ndarray of intp, shape (k + 1,)
        Column c's stored entries are ``indptr[c]:indptr[c + 1]``.
    entry_rows : ndarray of intp
        The table row of each entry, increasing within a column.
    entry_codes : ndarray of uint8
        The code of each entry (never the column's default).
    """

    rows: Array | None
    n_rows: int
    features: Array
    default: Array
    indptr: Array
    entry_rows: Array
    entry_codes: Array

    def code_rows(self, idx: Array) -> Array:
        """The table rows that target rows ``idx`` read."""
        return idx if self.rows is None else self.rows[idx] + 1

    def column(self, c: int) -> Array:
        """Column c's codes over the table rows (uint8, n_rows)."""
        out = np.full(self.n_rows, self.default[c], dtype=np.uint8)
        lo, hi = self.indptr[c], self.indptr[c + 1]
        out[self.entry_rows[lo:hi]] = self.entry_codes[lo:hi]
        return out

    def dense(self) -> Array:
        """The codes of every table row (n_rows × k, uint8): for tables of at most a few columns
        per target row (a fact table) and tests."""
        k = self.features.size
        out = np.empty((self.n_rows, k), dtype=np.uint8)
        out[:] = self.default
        column = np.repeat(np.arange(k), np.diff(self.indptr))
        out[self.entry_rows, column] = self.entry_codes
        return out


def sparse_entries(columns, n_rows, shifted, offsets):
    """The stored entries of a table's columns, sorted by (column, row).

    Parameters
    ----------
    columns : list of list of (csc_array, int)
        Per column, per stacked part (in the order of ``offsets``), the part's source as CSC and
        the source column (None where that part does not cover the column).
    n_rows : int
        Table rows.
    shifted : bool
        Whether row 0 is the absent row (source row r of a part is table row offset + r + 1).
    offsets : list of int
        Each stacked part's first row.

    Returns
    -------
    col, row : ndarray of intp
    value : ndarray of float64
    """
    cols, rows, values = [], [], []
    for i, offset in enumerate(offsets):
        by_source: dict[int, tuple] = {}
        for k, cover in enumerate(columns):
            if cover[i] is None:
                continue
            source, c = cover[i]
            by_source.setdefault(id(source), (source, [], []))
            by_source[id(source)][1].append(k)
            by_source[id(source)][2].append(c)
        for source, ks, cs in by_source.values():
            block = source[:, np.asarray(cs)]
            counts = np.diff(block.indptr)
            cols.append(np.repeat(np.asarray(ks, dtype=np.intp), counts))
            rows.append(block.indices.astype(np.intp) + (offset + shifted))
            values.append(np.asarray(block.data, dtype=np.float64))
    if not cols:
        return np.empty(0, np.intp), np.empty(0, np.intp), np.empty(0)
    col, row, value = np.concatenate(cols), np.concatenate(rows), np.concatenate(values)
    if len(cols) > 1:  # parts stacked or sources mixed: back to (column, row) order
        order = np.argsort(col * np.int64(n_rows) + row, kind="stable")
        col, row, value = col[order], row[order], value[order]
    return col, row, value


def bin_sparse_table(
    rows, n_rows, features, col, row, value, implicit, weights, max_bin, min_data_in_bin, bounds
):
    """Bin the columns of a table from their stored entries.

    Parameters
    ----------
    rows : ndarray of intp or None
        The table's index vector (None: the fact table).
    n_rows : int
        Table rows.
    features : ndarray of intp, shape (k,)
        The target column of each column.
    col, row : ndarray of intp
        The entries' columns and rows, sorted by (column, row) (:func:`sparse_entries`).
    value : ndarray of float64
        The entries' values (affine transform applied).
    implicit : ndarray of float64, shape (k,)
        The value of each column's other rows (``b_j``).
    weights : ndarray of int64 or None
        Target rows taking each table row (None: one each).
    max_bin, min_data_in_bin : int
        LightGBM's parameters.
    bounds : list of ndarray or None
        Given bounds per column (binning new data like the training data), or None: found here.

    Returns
    -------
    bounds : list of ndarray
        Per column, the bins' upper bounds.
    ranges : list of (float, float) or None
        Per column, the least and greatest value (None with given bounds).
    table : SparseBinnedTable
    """
    k = features.size
    total = int(n_rows if weights is None else weights.sum())
    w = np.ones(col.size, np.int64) if weights is None else weights[row].astype(np.int64)
    implicit_weight = total - np.bincount(col, weights=w, minlength=k).astype(np.int64)
    # (column, value) pairs of the entries and the columns' implicit values, sorted; the implicit
    # values come last in the pairs (entry e of the pairs is entry e, then k more)
    pair_col = np.concatenate([col, np.arange(k, dtype=np.intp)])
    pair_value = np.concatenate([value, implicit])
    pair_weight = np.concatenate([w, implicit_weight])
    order = np.lexsort((pair_value, pair_col))
    sc, sv = pair_col[order], pair_value[order]
    new = np.ones(sc.size, dtype=bool)
    new[1:] = (sc[1:] != sc[:-1]) | (sv[1:] != sv[:-1])
    group = np.cumsum(new) - 1
    inverse = np.empty(sc.size, dtype=np.intp)
    inverse[order] = group
    d_col, d_value = sc[new], sv[new]
    d_count = np.bincount(group, weights=pair_weight[order]).astype(np.int64)
    if bounds is None:
        held = d_count > 0  # weight-0 values are held by no target row
        bounds, ranges = column_bounds(
            d_col[held], d_value[held], d_count[held], k, total, max_bin, min_data_in_bin
        )
    else:
        ranges = None
    d_code = _codes_of(d_col, d_value, bounds, k)
    # the default code: the most frequent one by weighted count (ties: the lower code); codes
    # grow with the values, so a column's (column, code) runs are contiguous
    run_start = np.ones(d_col.size, dtype=bool)
    run_start[1:] = (d_col[1:] != d_col[:-1]) | (d_code[1:] != d_code[:-1])
    starts = np.flatnonzero(run_start)
    run_weight = np.add.reduceat(d_count, starts) if starts.size else np.zeros(0, np.int64)
    run_col, run_code = d_col[starts], d_code[starts]
    best = np.lexsort((run_code, -run_weight, run_col))
    first = np.ones(best.size, dtype=bool)
    first[1:] = run_col[best[1:]] != run_col[best[:-1]]
    default = np.zeros(k, dtype=np.uint8)
    default[run_col[best[first]]] = run_code[best[first]]
    entry_code = d_code[inverse[: col.size]]
    implicit_code = d_code[inverse[col.size :]]
    odd = np.flatnonzero(implicit_code != default)
    keep = entry_code != default[col]
    if odd.size:  # the implicit rows are not the default: store them too (dense-ish columns)
        implicit_rows = _implicit_rows(col, row, odd, n_rows)
    col, row, entry_code = col[keep], row[keep], entry_code[keep]
    if odd.size:
        col = np.concatenate([col, np.repeat(odd, [r.size for r in implicit_rows])])
        row = np.concatenate([row] + implicit_rows)
        entry_code = np.concatenate(
            [entry_code, np.repeat(implicit_code[odd], [r.size for r in implicit_rows])]
        )
        order = np.argsort(col * np.int64(n_rows) + row, kind="stable")
        col, row, entry_code = col[order], row[order], entry_code[order]
    indptr = np.zeros(k + 1, dtype=np.intp)
    np.cumsum(np.bincount(col, minlength=k), out=indptr[1:])
    table = SparseBinnedTable(
        rows,
        int(n_rows),
        np.asarray(features, dtype=np.intp),
        default,
        indptr,
        np.ascontiguousarray(row, dtype=np.intp),
        np.ascontiguousarray(entry_code, dtype=np.uint8),
    )
    return bounds, ranges, table


def _implicit_rows(col, row, odd, n_rows):
    """Per column of ``odd``, the rows without an entry (they hold the implicit value)."""
    out = []
    starts = np.searchsorted(col, odd)
    ends = np.searchsorted(col, odd, side="right")
    for lo, hi in zip(starts, ends):
        own = np.zeros(n_rows, dtype=bool)
        own[row[lo:hi]] = True
        out.append(np.flatnonzero(~own))
    return out


def column_bounds(col, value, count, k, total, max_bin, min_data_in_bin):
    """LightGBM's bounds of many columns at once, from their weighted distinct values.

    Parameters
    ----------
    col : ndarray of intp
        The column of each distinct value; sorted by (column, value).
    value : ndarray of float64
        The distinct values.
    count : ndarray of int64
        Target rows holding each (all > 0).
    k : int
        Columns.
    total : int
        Target rows (each column's counts sum to it).
    max_bin, min_data_in_bin : int
        LightGBM's parameters.

    Returns
    -------
    bounds : list of ndarray
        Per column, what :func:`~ilargi.rewriter.bin_edges.bin_upper_bounds` returns for it.
    ranges : list of (float, float)
        Per column, its least and greatest value (zero for values within 1e-35 of it).
    """
    starts = np.searchsorted(col, np.arange(k))
    ends = np.searchsorted(col, np.arange(k), side="right")
    mapped = np.where(np.abs(value) <= K_ZERO, 0.0, value)
    present = ends > starts
    lo = np.zeros(k)
    hi = np.zeros(k)
    lo[present], hi[present] = mapped[starts[present]], mapped[ends[present] - 1]
    ranges = list(zip(lo.tolist(), hi.tolist()))
    # nonzero values, one ulp apart merged into the larger (bin_upper_bounds' first steps)
    nz = np.abs(value) > K_ZERO
    c, v, n = col[nz], value[nz], count[nz]
    merged = np.zeros(v.size, dtype=bool)
    merged[1:] = (c[1:] == c[:-1]) & (v[1:] <= np.nextafter(v[:-1], np.inf))
    last = np.ones(v.size, dtype=bool)
    last[:-1] = ~merged[1:]
    group = np.cumsum(~merged) - 1
    n = np.bincount(group, weights=n).astype(np.int64) if v.size else n
    c, v = c[last], v[last]
    negative = v < 0
    left_values = np.bincount(c[negative], minlength=k)
    right_values = np.bincount(c[~negative], minlength=k)
    left_data = np.bincount(c[negative], weights=n[negative], minlength=k).astype(np.int64)
    right_data = np.bincount(c[~negative], weights=n[~negative], minlength=k).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = left_data / (left_data + right_data) * (max_bin - 1)
    left_max_bin = np.maximum(1, np.where(left_values > 0, share, 0).astype(np.int64))
    # GreedyFindBin's simple rule applies to a side with at most its max_bin values; the left
    # side's bounds (at most its values) leave the right side max_bin - 1 - those
    fast = (left_values <= np.minimum(left_max_bin, FEW_VALUES)) & (right_values <= FEW_VALUES)
    left_bounds, left_len = _greedy_simple(
        c[negative], v[negative], n[negative], k, fast, min_data_in_bin
    )
    left_len[left_values == 0] = 0
    right_max_bin = max_bin - 1 - left_len
    right = (right_values > 0) & (right_max_bin > 0)
    fast &= ~right | (right_values <= right_max_bin)
    right_bounds, right_len = _greedy_simple(
        c[~negative], v[~negative], n[~negative], k, fast, min_data_in_bin
    )
    right_len[~right] = 0
    # per column: the left bounds (the last one -1e-35), then 1e-35 and the right bounds, or inf
    width = left_len + np.where(right, 1 + right_len, 1)
    out = np.full((k, max(int(width.max(initial=1)), 1)), np.inf)
    at = np.arange(out.shape[1])
    lw = min(left_bounds.shape[1], out.shape[1])
    spots = at[None, :lw] < left_len[:, None]
    out[:, :lw][spots] = left_bounds[:, :lw][spots]
    has_left = left_len > 0
    out[has_left, left_len[has_left] - 1] = -K_ZERO
    rows = np.flatnonzero(right)
    out[rows, left_len[rows]] = K_ZERO
    if rows.size and right_bounds.shape[1]:
        target = left_len[rows, None] + 1 + np.arange(right_bounds.shape[1])[None, :]
        inside = np.arange(right_bounds.shape[1])[None, :] < right_len[rows, None]
        out[np.repeat(rows, inside.sum(axis=1)), target[inside]] = right_bounds[rows][inside]
    bounds = [out[j, : width[j]] for j in range(k)]
    for j in np.flatnonzero(~fast):
        bounds[j] = bin_upper_bounds(
            value[starts[j] : ends[j]], count[starts[j] : ends[j]], max_bin, min_data_in_bin
        )
    return bounds, ranges


def _greedy_simple(col, value, count, k, rows, min_data_in_bin):
    """GreedyFindBin's rule for at most max_bin values, for the columns ``rows`` (bool, k) at
    once: walking the sorted values, a bin closes after value i once it holds at least
    ``min_data_in_bin`` rows, its bound the midpoint of values i and i + 1 rounded up by one ulp
    (dropped where it is within an ulp of the last bound), the last bound +inf.

    Returns the bounds, padded (k × width, +inf), and how many each column has (0 where
    ``rows`` is False or the column has no values)."""
    wanted = rows[col]
    col, value, count = col[wanted], value[wanted], count[wanted]
    starts = np.searchsorted(col, np.arange(k))
    lengths = np.bincount(col, minlength=k)
    width = int(lengths.max(initial=0))
    V = np.zeros((k, max(width, 1)))
    C = np.zeros((k, max(width, 1)), dtype=np.int64)
    position = np.arange(col.size) - starts[col]
    V[col, position] = value
    C[col, position] = count
    out = np.full((k, max(width, 1)), np.inf)
    n_out = np.zeros(k, dtype=np.intp)
    in_bin = np.zeros(k, dtype=np.int64)
    previous = np.full(k, -np.inf)  # the last bound, rounded up by one ulp
    everything = np.arange(k)
    for i in range(width - 1):
        active = i < lengths - 1
        in_bin += np.where(active, C[:, i], 0)
        bound = np.nextafter((V[:, i] + V[:, i + 1]) / 2.0, np.inf)
        take = active & (in_bin >= min_data_in_bin) & ((n_out == 0) | ~(bound <= previous))
        out[everything[take], n_out[take]] = bound[take]
        previous[take] = np.nextafter(bound[take], np.inf)
        n_out[take] += 1
        in_bin[take] = 0
    n_out = np.where(lengths > 0, n_out + 1, 0)  # the last bound, +inf (already there)
    return out, n_out


def _codes_of(col, value, bounds, k):
    """The code of each (column, value): how many of the column's bounds are below the value
    (``searchsorted(bounds, value, side="left")``), for all columns in one sort.

    Parameters
    ----------
    col : ndarray of intp
        Sorted; value sorted within a column, distinct.
    value : ndarray of float64
    bounds : list of ndarray
        Per column, increasing bounds.
    k : int
        Columns.

    Returns
    -------
    ndarray of uint8
    """
    lengths = np.array([b.size for b in bounds], dtype=np.intp)
    flat = np.concatenate(bounds) if k else np.empty(0)
    bound_col = np.repeat(np.arange(k), lengths)
    # a value before the bounds equal to it: they are not below it
    key_col = np.concatenate([col, bound_col])
    key_value = np.concatenate([value, flat])
    tag = np.concatenate([np.zeros(col.size, np.int8), np.ones(flat.size, np.int8)])
    order = np.lexsort((tag, key_value, key_col))
    position = np.empty(order.size, dtype=np.intp)
    position[order] = np.arange(order.size)
    per_column = np.bincount(col, minlength=k) + lengths
    column_start = np.concatenate([[0], np.cumsum(per_column)[:-1]]).astype(np.intp)
    value_start = np.searchsorted(col, np.arange(k))
    rank = np.arange(col.size) - value_start[col]
    return (position[: col.size] - column_start[col] - rank).astype(np.uint8)
