"""The histograms of gradient-boosted trees on the compiled kernels (:mod:`.kernels`).

A leaf's histogram of one table is a parallel pass over the leaf's rows in row blocks (one per
thread), each adding (gradient, hessian, count) into its own partial histogram by the bin codes of
the row's table row; the partials are summed in block order (deterministic at a fixed thread
count). A leaf's segment-sum by foreign key works the same way into partials of the table's rows.
The NumPy versions, same results to rounding, are those of :mod:`ilargi.backend.cpu`.
"""

import threading

import numpy as np
from numba import njit, prange

from .. import compiled
from .kernels import (
    categorical_kernel,
    column_histograms_kernel,
    histogram_kernel,
    leaf_pass_kernel,
    leaf_sums_kernel,
    nan_thresholds_kernel,
    partition_kernel,
    rebuild_bins_kernel,
    rows_or_columns_kernel,
    scan_split_kernel,
    sparse_histograms_kernel,
    sparse_rows_kernel,
    subtract_held_kernel,
    thresholds_kernel,
)
from .launch import EMPTY_V, LINE_VALUES, padded_partials, thread_count

_NO_ROWS = np.empty(0, dtype=np.intp)
_EVERY_ROW = np.array([-1], dtype=np.intp)  # rows to zero: all of them
_NO_LIST = np.empty(0, dtype=np.int32)  # every row's pass: typed as a learner's 32-bit lists


def _rows(rows):
    return _NO_ROWS if rows is None else np.asarray(rows, dtype=np.intp)


def _index(idx):
    """A list of rows as the kernels take it: 32- or 64-bit as given (a tree learner's lists are
    32-bit where the rows allow: half the bytes to read), other integers as intp."""
    idx = np.asarray(idx)
    if idx.dtype in (np.int32, np.intp) and idx.flags.c_contiguous:
        return idx
    return np.ascontiguousarray(idx, dtype=np.intp)


def _weights(a):
    """Gradients or hessians as C-ordered float32 or float64 (the kernels' two specializations)."""
    a = np.asarray(a)
    return np.ascontiguousarray(a, dtype=np.float32 if a.dtype == np.float32 else np.float64)


def _hessians(h):
    """Hessians as the kernels take them: one value where h repeats one value without storing it
    (``np.broadcast_to``, stride 0: squared error's unit hessians), read for every row; else as
    :func:`_weights`."""
    h = np.asarray(h)
    if h.ndim == 1 and h.shape[0] > 1 and h.strides[0] == 0:
        h = h[:1].copy()  # writable, as every other hessians: the kernels' one specialization
    return _weights(h)


def bin_histograms(codes, rows, idx, g, h, c=None, n_bins=256):
    """Histograms of (g, h, count) by bin code, one per column of ``codes``; as
    :func:`ilargi.backend.cpu.bin_histograms`.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, k)
        Bin codes of a table.
    rows : ndarray of int or None
        Index vector: entry i reads codes row ``rows[i] + 1``; None: codes row i.
    idx : ndarray of int
        The entries summed (a leaf's rows).
    g, h : ndarray
        Gradients and hessians, indexed by the entries of idx.
    c : ndarray, optional
        Counts, indexed likewise (None: 1 each).
    n_bins : int, default=256
        Bins of the histograms (more than the largest code).

    Returns
    -------
    ndarray of shape (k, n_bins, 3)
        Sums of g, h and the count.
    """
    idx = _index(idx)
    k = codes.shape[1]
    nb = max(1, min(thread_count(), idx.shape[0] // 1024))
    parts = np.empty((nb, k, n_bins, 3))
    out = np.empty((k, n_bins, 3))
    counts = EMPTY_V if c is None else np.ascontiguousarray(c, dtype=np.float64)
    g, h = _weights(g), _hessians(h)
    histogram_kernel(codes, _rows(rows), idx, g, h, counts, parts, out)
    return out


def leaf_sums(rows, idx, g, h, n_out):
    """Segment-sums of (g, h, 1) over the entries of idx into row ``rows[i] + 1`` of an
    (n_out × 3) array (row 0: the absent entries); as :func:`ilargi.backend.cpu.leaf_sums`.

    Parameters
    ----------
    rows : ndarray of int
        Index vector (-1: absent).
    idx : ndarray of int
        The entries summed.
    g, h : ndarray
        Gradients and hessians, indexed by the entries of idx.
    n_out : int
        Rows of the result: the table's rows plus one.

    Returns
    -------
    ndarray of shape (n_out, 3)
    """
    idx = _index(idx)
    # partials of at most about half the entries' size (the caller sums by key only where the
    # leaf has at least twice as many rows as the table)
    nb = max(1, min(thread_count(), idx.shape[0] // max(2 * n_out, 1), idx.shape[0] // 1024))
    parts = np.empty((nb, n_out, 3))
    out = np.empty((n_out, 3))
    leaf_sums_kernel(_rows(rows), idx, _weights(g), _hessians(h), parts, out)
    return out


def partition_rows(order, lo, hi, codes, rows, column, threshold):
    """Stable partition of ``order[lo:hi]`` in place: the rows whose bin code in ``column`` is at
    most ``threshold`` first; as :func:`ilargi.backend.cpu.partition_rows`.

    Parameters
    ----------
    order : ndarray of intp
        Row order, leaves as contiguous ranges.
    lo, hi : int
        The leaf's range.
    codes : ndarray of uint8
        Bin codes of the split feature's table.
    rows : ndarray of int or None
        That table's index vector (None: codes row i).
    column : int
        The feature's column of codes.
    threshold : int
        The split's bin: codes <= threshold go left.

    Returns
    -------
    int
        Rows that go left.
    """
    m = hi - lo
    nb = max(1, min(thread_count(), m // 4096))
    copy, left = _partition_scratch(m, order.dtype)
    counts = np.zeros(nb, dtype=np.int64)
    rows = _rows(rows)
    return int(partition_kernel(order, lo, hi, codes, rows, column, threshold, copy, left, counts))


_SCRATCH = threading.local()


def _partition_scratch(m, dtype):
    """The calling thread's scratch of at least m rows for partitions (rows, flags): a tree
    partitions its rows leaf after leaf, and fresh arrays of a big leaf's rows would be
    page-faulted in each time."""
    found = getattr(_SCRATCH, "partition", None)
    if found is None or found[0].shape[0] < m or found[0].dtype != dtype:
        found = _SCRATCH.partition = (np.empty(m, dtype=dtype), np.empty(m, dtype=np.bool_))
    return found


def best_thresholds(hist, offsets, n_bins, usable, G, H, count, params):
    """Per feature, the best threshold of a leaf by LightGBM's reverse scan; as
    :func:`ilargi.models.gbdt_trees.best_splits`, whose NumPy form it compiles.

    Parameters
    ----------
    hist : ndarray of shape (total bins, 3)
        The leaf's histograms of (Σg, Σh, count), feature f's bins from row ``offsets[f]``.
    offsets : ndarray of intp, shape (d,)
        Each feature's first row of hist.
    n_bins : ndarray of intp, shape (d,)
        Bins of each feature.
    usable : ndarray of bool, shape (d,)
        Features to scan.
    G, H : float
        The leaf's Σg and Σh (H with LightGBM's two epsilons).
    count : int
        The leaf's rows.
    params : sequence of float
        (reg_alpha, reg_lambda, min_child_samples, min_child_weight, the leaf's gain plus
        min_split_gain, LightGBM's epsilon).

    Returns
    -------
    out : ndarray of shape (d, 5)
        (gain over the leaf, threshold bin, left Σg, left Σh, left count); gain -inf where no
        threshold passes.
    splittable : ndarray of bool, shape (d,)
        Whether some threshold gains more than the leaf.
    """
    d = n_bins.shape[0]
    # written where read: every feature's gain and flag, the rest of a row where a threshold
    # passes (a gain above -inf)
    out = np.empty((d, 5))
    splittable = np.empty(d, dtype=np.bool_)
    thread_count()
    leaf = _scanned(hist, offsets, n_bins, G, H, count, params)
    thresholds_kernel(*leaf[:3], np.ascontiguousarray(usable, np.bool_), *leaf[3:], out, splittable)
    return out, splittable


def _scanned(hist, offsets, n_bins, G, H, count, params):
    """A leaf scan's arguments as its kernel takes them."""
    return (
        np.ascontiguousarray(hist, dtype=np.float64),
        np.ascontiguousarray(offsets, dtype=np.intp),
        np.ascontiguousarray(n_bins, dtype=np.intp),
        float(G),
        float(H),
        float(count),
        np.asarray(params, dtype=np.float64),
    )


def nan_thresholds(hist, offsets, n_bins, zero_first, G, H, count, params):
    """Per feature with a last bin of NaN, LightGBM's best threshold of a leaf and where NaN
    goes; as :func:`ilargi.models.gbdt_missing.nan_splits`, whose form it compiles.

    Parameters
    ----------
    hist, offsets, n_bins, G, H, count, params
        As in :func:`best_thresholds` (n_bins counting NaN's bin, more than two).
    zero_first : ndarray of bool, shape (k,)
        Whether each feature's most frequent bin is bin 0 (then summed as the rest of the leaf).

    Returns
    -------
    out : ndarray of shape (k, 6)
        (gain over the leaf, threshold bin, left Σg, left Σh, left count, 1.0 where NaN goes
        left); gain -inf where no threshold passes.
    splittable : ndarray of bool, shape (k,)
    """
    k = len(n_bins)
    out = np.empty((k, 6))
    splittable = np.empty(k, dtype=np.bool_)
    leaf = _scanned(hist, offsets, n_bins, G, H, count, params)
    zero_first = np.ascontiguousarray(zero_first, dtype=np.bool_)
    nan_thresholds_kernel(*leaf[:3], zero_first, *leaf[3:], out, splittable)
    return out, splittable


def rebuild_bins(hist, offsets, n_bins, bins, G, H):
    """Each feature's bin ``bins[f]`` of a leaf's histograms rebuilt as the leaf's (G, H) less
    its other bins, one at a time, in place (LightGBM's ``Dataset::FixHistogram``); as
    :meth:`ilargi.models.gbdt_trees.TreeLearner._rebuild_most_frequent`."""
    rebuild_bins_kernel(
        hist,
        np.ascontiguousarray(offsets, dtype=np.intp),
        np.ascontiguousarray(n_bins, dtype=np.intp),
        np.ascontiguousarray(bins, dtype=np.intp),
        float(G),
        float(H),
    )


def categorical_splits(hist, offsets, n_bins, G, H, count, params):
    """Per categorical feature, LightGBM's best set of categories of a leaf; as
    :func:`ilargi.models.gbdt_categorical.best_categorical_split`, whose form it compiles.

    Parameters
    ----------
    hist : ndarray of shape (total bins, 3)
        The leaf's histograms of (Σg, Σh, count), feature f's bins from row ``offsets[f]``.
    offsets, n_bins : ndarray of intp, shape (k,)
        The categorical features' first rows of hist and bins.
    G, H, count
        As in :func:`best_thresholds`.
    params : sequence of float
        The params of :func:`best_thresholds`, then max_cat_to_onehot, max_cat_threshold,
        cat_l2, cat_smooth and min_data_per_group.

    Returns
    -------
    out : ndarray of shape (k, 6)
        (gain over the leaf, bins sent left, left Σg, left Σh, left count, the children's L2
        penalty); gain -inf where no split passes.
    splittable : ndarray of bool, shape (k,)
        Whether some split gains more than the leaf.
    left_bins : ndarray of intp, shape (k, max bins)
        Each feature's bins sent left (the first ``out[f, 1]``).
    """
    k = len(n_bins)
    out = np.empty((k, 6))
    splittable = np.empty(k, dtype=np.bool_)
    left_bins = np.empty((k, max(int(np.max(n_bins, initial=1)), 1)), dtype=np.intp)
    categorical_kernel(
        *_scanned(hist, offsets, n_bins, G, H, count, params), out, splittable, left_bins
    )
    return out, splittable, left_bins


_NO_CODES = np.empty((0, 0), dtype=np.uint8)


def leaf_pass(
    R,
    sel,
    n_outs,
    fcodes,
    idx,
    g,
    h,
    n_bins=256,
    fbins=None,
    counts=True,
    scratch=None,
    hessians=True,
):
    """One pass over a leaf's rows: its segment-sums by the keys of several tables and the fact
    table's histograms; as :func:`ilargi.backend.cpu.leaf_pass`.

    Parameters
    ----------
    R : ndarray of int32 or intp, shape (G, n)
        The tables' index vectors, stacked (-1: absent).
    sel : sequence of int
        The tables (rows of R) to sum by key.
    n_outs : sequence of int
        Their rows plus one.
    fcodes : ndarray of uint8, shape (n, kf), or None
        The fact table's bin codes (None: no fact histograms).
    idx : ndarray of intp or None
        The leaf's rows (None: every target row, read in order without an index).
    g, h : ndarray
        Gradients and hessians of the target rows.
    n_bins : int, default=256
        Bins of the fact histograms.
    fbins : ndarray of int, shape (kf,), optional
        Bins of each fact column (more than its largest code; default n_bins each).
    counts : bool, default=True
        False: the fact histograms' counts are left at zero (a tree's threshold scan estimates
        rows from hessians; two sums a bin instead of three).
    scratch : dict, optional
        A caller's store, kept from leaf to leaf, for the pass's buffers: the sums by key are
        then views of a buffer that is zeroed only where the previous pass wrote (a small leaf
        of big tables costs its rows, not the tables'), valid until the next pass with the same
        scratch; ``scratch["held"]`` gets the rows of the stacked sums the leaf holds (count >
        0), increasing (``sparse_histograms``' ``held``), where a small leaf's pass listed
        them (else None). Default: new buffers.
    hessians : bool, default=True
        False (with counts False): the fact histograms' hessian sums are left at zero too (one
        sum a bin: the caller knows them, e.g. those of every row under fixed hessians).

    Returns
    -------
    sums : list of ndarray of shape (n_out, 3)
        Per selected table, the sums of (g, h, 1) by key (row 0: the absent rows).
    hist : ndarray of shape (kf, n_bins, 3) or None
        The fact table's histograms.
    """
    every = idx is None
    idx = _NO_LIST if every else _index(idx)
    g, h = _weights(g), _hessians(h)
    m = g.shape[0] if every else idx.shape[0]
    codes = _NO_CODES if fcodes is None else fcodes
    sel, n_outs = tuple(sel), tuple(int(k) for k in n_outs)
    offsets, total, foff = _pass_layout(
        {} if scratch is None else scratch, sel, n_outs, codes.shape[1], n_bins, fbins
    )
    # partials of at most about four times the leaf's size: a leaf row gathers from several
    # arrays (cache misses each), a partial's row is summed in order, so the rows of a block
    # cost more than the partials up to there; beyond it, big tables' partials cost more than
    # the blocks save (the block count also fixes the sums' bits: keep it so)
    nb = max(1, min(thread_count(), m // 1024, 4 * m // max(total, 1)))
    # as the kernel decides: a pass that lists the rows it reaches (a small leaf's)
    listing = nb == 1
    buffers = _sum_buffers({} if scratch is None else scratch, sel, n_outs, nb, listing)
    sums, parts, state = buffers
    # one block sums into the result itself; blocks' partials lie a cache line apart, so that no
    # line holds two blocks' bins (a fact table's partials are small and every row writes to each)
    sum_parts = sums[None] if nb == 1 else parts[:nb]
    hist_parts = padded_partials(nb, int(foff[-1]), 3 if counts else (2 if hessians else 1))
    hist = np.empty((codes.shape[1], n_bins, 3))
    k = leaf_pass_kernel(
        R,
        np.asarray(sel, dtype=np.intp),
        offsets,
        codes,
        foff,
        idx,
        every,
        g,
        h,
        sum_parts,
        hist_parts,
        sums,
        hist,
        state,
        (compiled.SPARSE_LEAF, compiled.FAR_SUMS),
    )
    held = state[3][:k] if k >= 0 else None
    if scratch is not None:
        scratch["held"] = held
        # the next pass into these buffers first zeroes the rows this one wrote
        scratch[("cleared", sel, n_outs, listing)] = _EVERY_ROW if held is None else held
    split = [sums[o : o + n] for o, n in zip(offsets, n_outs)]
    return split, (None if fcodes is None else hist)


def _pass_layout(scratch, sel, n_outs, kf, n_bins, fbins):
    """(each selected table's first row in the stacked sums, their rows, each fact column's first
    bin in the partials): kept in the scratch, as a tree's leaves ask for the same few."""
    key = (
        "layout",
        sel,
        n_outs,
        kf,
        n_bins,
        None if fbins is None else np.asarray(fbins).tobytes(),
    )
    found = scratch.get(key)
    if found is None:
        offsets = np.zeros(len(n_outs), dtype=np.intp)
        if n_outs:
            offsets[1:] = np.cumsum(n_outs)[:-1]
        foff = np.zeros(kf + 1, dtype=np.intp)
        foff[1:] = np.cumsum(np.full(kf, n_bins) if fbins is None else fbins)
        found = scratch[key] = (offsets, int(sum(n_outs)), foff)
    return found


def _sum_buffers(scratch, sel, n_outs, nb, listing):
    """The buffers of the sums by key of the tables ``sel`` (their rows n_outs) in ``scratch``:
    (sums, block partials, (rows to zero first, reached rows per block, flags, reached rows)),
    zero but for the rows the last pass into them reached, which it listed (made here, zero,
    the first time or for more blocks than before). Passes that list the rows they reach
    (``listing``) have buffers of their own: a small leaf after a big one then zeroes the rows
    the last small one reached, not every row the big one did."""
    key = (sel, n_outs, listing)
    total = sum(n_outs)
    found = scratch.get(key)
    if found is None or (not listing and found[1].shape[0] < nb):
        blocks = 1 if listing else max(nb, thread_count())
        listed = total if listing else 0  # rows a list may hold (a bigger pass keeps none)
        flags = np.zeros(-(-listed // 8) * 8 or 8, dtype=np.uint8)
        found = (
            np.zeros((total, 3)),
            np.zeros((0 if listing else blocks, total - (-LINE_VALUES // 3), 3)),
            np.empty((blocks, listed + 1), dtype=np.intp),  # + 1: listing writes one past
            flags,
            np.empty(flags.size, dtype=np.intp),  # the flags' length: see _sorted_held
        )
        scratch[key] = found
        scratch[("cleared",) + key] = _NO_ROWS
    sums, parts, held, flags, rows = found
    return sums, parts, (scratch[("cleared",) + key], held, flags, rows)


def column_histograms(codes_t, jobs, sums, out):
    """Histograms of per-row sums by the codes of table columns, added into ``out`` in place; as
    :func:`ilargi.backend.cpu.column_histograms`.

    Parameters
    ----------
    codes_t : ndarray of uint8, shape (k, n_rows)
        Bin codes, one table column a row (tables stacked, padded).
    jobs : ndarray of intp, shape (J, 4)
        Per histogram: (row of codes_t, first row of sums, rows, feature of out).
    sums : ndarray of float64, shape (s, 3)
        (g, h, count) per table row, tables stacked.
    out : ndarray of float64, shape (d, bins, 3)
        Histograms per feature (zero where a job writes).
    """
    thread_count()
    column_histograms_kernel(codes_t, jobs, sums, out)


def sparse_histograms(
    columns,
    by_row,
    sums,
    totals,
    out,
    leaf_rows,
    by_rows=None,
    zero_bins=True,
    held=None,
    only=None,
    counts=True,
):
    """Histograms of sparse columns from per-row sums, the default bins from the leaf's totals,
    written into ``out``; as :func:`ilargi.backend.cpu.sparse_histograms`. A table whose rows the
    leaf mostly misses is added row by row (its entries of the rows the leaf holds), the others
    column by column in parallel: the same sums either way.

    Parameters
    ----------
    columns : (indptr, rows, codes, jobs)
        The columns' entries (column c's are ``indptr[c]:indptr[c + 1]``: table row and code,
        never the column's default) and per column (first row of its table in sums, first row
        of its bins in out, its bins, its default bin, its table, its column c).
    by_row : (row_ptr, bin_at, tables)
        The same entries by row (row r's are ``row_ptr[r]:row_ptr[r + 1]``, r a row of sums;
        each entry's row of out) and per table (first row in sums, rows, entries).
    sums : ndarray of float64, shape (s, 3)
        (g, h, count) per table row, tables stacked.
    totals : ndarray of float64, shape (3,)
        The leaf's (g, h, count) totals.
    out : ndarray of float64, shape (total bins, 3)
        Histograms, each feature's bins in a range of rows: the jobs' rows are written (whatever
        they held), the rows of columns without a job may change.
    leaf_rows : int
        The leaf's rows.
    by_rows : ndarray of bool, shape (T,), optional
        Which tables to add row by row (default: chosen from leaf_rows; for tests).
    zero_bins : bool, default=True
        Whether to rebuild default bins that are bin 0 (a tree's threshold scan never reads
        bin 0: it may leave them at zero).
    held : ndarray of intp, optional
        The rows of sums the leaf holds (count > 0), increasing (``leaf_pass``' scratch): the
        pass by row reads those alone, not every row of its tables.
    only : ndarray of intp, optional
        The jobs to sum (rows of jobs: a leaf's candidate features; default every job).
    counts : bool, default=True
        False: the bins' counts are left at zero (a tree's threshold scan estimates rows from
        hessians): two sums an entry instead of three.
    """
    indptr, rows, codes, jobs = columns
    row_ptr, bin_at, tables = by_row
    threads = thread_count()
    held = _NO_ROWS if held is None else np.asarray(held, dtype=np.intp)
    only = _every_job(jobs.shape[0]) if only is None else np.asarray(only, dtype=np.intp)
    if by_rows is None:
        entries, tables_of = _job_entries(indptr, jobs)
        by_rows = rows_or_columns_kernel(
            tables, held, int(leaf_rows), entries, tables_of, only, threads
        )
    by_rows = np.asarray(by_rows, dtype=np.bool_)
    if by_rows.any():
        sparse_rows_kernel(
            row_ptr,
            bin_at,
            tables,
            by_rows,
            held,
            jobs,
            only,
            sums,
            counts,
            out,
            compiled.SPARSE_ROWS_AHEAD,
        )
    sparse_histograms_kernel(
        indptr, rows, codes, jobs, only, by_rows, sums, totals, zero_bins, counts, out
    )


def subtract_held(by_row, jobs, held, sums, totals, parent, rebuilt, clean, counts=True):
    """parent -= a small leaf's histograms of sparse columns where they are not zero: at the bins
    its held rows' entries reach and the default bins of the jobs ``rebuilt``; the same bytes as
    :func:`sparse_histograms` of every job then :func:`subtract_ranges` over them (its sibling's
    histograms from their parent's), at the cost of the leaf's entries, not of the columns.

    Parameters
    ----------
    by_row : (row_ptr, bin_at, tables)
        The entries by table row, as :func:`sparse_histograms` reads them.
    jobs : ndarray of intp, shape (J, 6)
        The columns' jobs, as :func:`sparse_histograms` reads them.
    held : ndarray of intp
        The rows of sums the leaf holds (count > 0), increasing: ``leaf_pass``' scratch; rows
        past the sparse tables' (other tables summed in the same pass) are not read.
    sums : ndarray of float64, shape (s, 3)
        (g, h, count) per table row, tables stacked.
    totals : ndarray of float64, shape (3,)
        The leaf's (g, h, count) totals.
    parent : ndarray of float64, shape (total bins, 3)
        Histograms subtracted from, in place (its bins of columns that are not a leaf's
        candidates may change too: they are not read).
    rebuilt : ndarray of intp
        The jobs whose default bin the leaf's histograms rebuild (default bin not 0, or all).
    clean : ndarray of float64, shape of parent
        Zero, left zero: the caller's, kept from call to call.
    counts : bool, default=True
        False: the histograms count nothing (parent's counts are left as they are).
    """
    row_ptr, bin_at, _ = by_row
    held = np.asarray(held, dtype=np.intp)
    held = held[: np.searchsorted(held, row_ptr.shape[0] - 1)]
    subtract_held_kernel(
        row_ptr, bin_at, held, sums, jobs, rebuilt, totals, bool(counts), clean, parent
    )


def _job_entries(indptr, jobs):
    """Each job's column's entries and its table, as arrays of their own (kept for the last
    jobs: a tree's leaves sum the same columns): a leaf's few jobs read them from a few
    cache lines, not from their rows of jobs and indptr."""
    found = _JOB_ENTRIES[0]  # read once: another thread may replace it
    if found[0] is not jobs:
        columns = jobs[:, 5]
        found = (jobs, indptr[columns + 1] - indptr[columns], np.ascontiguousarray(jobs[:, 4]))
        _JOB_ENTRIES[0] = found
    return found[1], found[2]


def _every_job(count):
    """0 .. count - 1 (intp), kept for the last count."""
    found = _EVERY_JOB[0]  # read once: another thread may replace it
    if found.shape[0] != count:
        found = _EVERY_JOB[0] = np.arange(count, dtype=np.intp)
    return found


_EVERY_JOB = [np.empty(0, dtype=np.intp)]  # _every_job's
_JOB_ENTRIES: list = [(None, None, None)]  # _job_entries': (jobs, entries, tables)


# ---------------------------------------------------------------------------------------------
# Splits that move one side of a leaf's rows (see :func:`split_rows`). Their Numba code lives
# here, each kernel with every helper it calls, so that Numba's cache (which checks the file that
# defines a function) sees an edit of any of them; the scan of a leaf's list, which prefetches
# and indexes as the leaf pass does, is in .kernels with those helpers.

# Rows of a leaf's list below which one thread scans it: a launch on more costs about as much as
# the scan of that many rows.
PARALLEL_SPLIT = 1 << 15


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def _inverse_split_kernel(inv_ptr, inv_rows, keys, labels, label, new_label, flags, out):
    """The rows labelled ``label`` among those of the table rows ``keys`` (through the inverse
    index inv_ptr/inv_rows), relabelled and written to out increasing; returns how many.
    flags: a byte a target row, a multiple of 8 bytes, zero (left zero)."""
    k = 0
    lo = flags.shape[0]
    hi = 0
    for s in range(keys.shape[0]):
        r = keys[s]
        for e in range(inv_ptr[r], inv_ptr[r + 1]):
            i = inv_rows[e]
            mine = labels[i] == label
            labels[i] = new_label if mine else labels[i]
            out[k] = i
            k += mine
            lo = min(lo, i)
            hi = max(hi, i)
    if k == 0:
        return 0
    if k * 256 < hi - lo:  # a few rows: sorted, cheaper than a pass over the flags between them
        out[:k].sort()
        return k
    for e in range(k):
        flags[out[e]] = 1
    words = flags.view(np.uint64)
    at = 0
    for w in range(lo >> 3, (hi >> 3) + 1):
        if words[w] == 0:
            continue
        for i in range(8 * w, 8 * w + 8):
            # written always, kept where flagged: no branch to mispredict on dense flags
            out[at] = i
            at += flags[i] != 0
            flags[i] = 0
    return k


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def _inverse_index_kernel(keys, n_keys, ptr, rows):
    """ptr (n_keys + 1), rows (len(keys)): the rows of each key, increasing (a counting sort)."""
    ptr[:] = 0
    for i in range(keys.shape[0]):
        ptr[keys[i] + 1] += 1
    for r in range(n_keys):
        ptr[r + 1] += ptr[r]
    at = ptr[:-1].copy()
    for i in range(keys.shape[0]):
        r = keys[i]
        rows[at[r]] = i
        at[r] += 1


@njit(cache=True, fastmath=False, nogil=True, error_model="numpy")
def _compact_kernel(lst, labels, label):
    """The rows of lst labelled ``label`` moved to its front, in order; returns how many."""
    w = 0
    for x in range(lst.shape[0]):
        i = lst[x]
        lst[w] = i
        w += labels[i] == label
    return w


def split_rows(
    lst, labels, label, new_label, codes, rows, column, threshold, side, out, every=False
):
    """Split a leaf by scanning its rows: those labelled ``label`` in ``lst`` whose code test
    (code in ``column`` <= threshold) equals ``side`` are relabelled ``new_label`` and written
    to ``out`` in order; the leaf's other rows are compacted to the front of ``lst``, in order.
    Rows of ``lst`` with another label (taken by a side that moved before) are dropped.

    Parameters
    ----------
    lst : ndarray of intp
        The leaf's rows, increasing; may hold rows of other labels.
    labels : ndarray of uint8 or int32
        Each target row's label.
    label, new_label : int
        The leaf's label; the label of the side that moves.
    codes : ndarray of uint8
        Bin codes of the split feature's table.
    rows : ndarray of int or None
        That table's index vector (None: codes row i).
    column : int
        The feature's column of codes.
    threshold : int or ndarray of bool
        The split's bin; or, for a set of categories, whether each code goes left.
    side : bool
        Which side moves: True the rows whose code goes left (<= threshold).
    out : ndarray of intp
        At least as long as lst.
    every : bool, default=False
        lst is every target row, 0 up to len(lst): its contents are not read (only written).

    Returns
    -------
    moved, kept : int
        Rows written to out; rows kept at the front of lst.
    """
    left = None
    if isinstance(threshold, np.ndarray):  # a set of categories: whether each code goes left
        left, threshold = np.ascontiguousarray(threshold, dtype=np.bool_), -1
    m = lst.shape[0]
    nb = max(1, min(thread_count(), m // PARALLEL_SPLIT))
    counts = np.zeros((nb + 1, 2), dtype=np.int64)  # per block; the last row: the totals
    scan_split_kernel(
        lst,
        bool(every),
        labels,
        label,
        new_label,
        codes,
        _rows(rows),
        column,
        threshold,
        left,
        bool(side),
        out,
        counts,
    )
    return int(counts[0, 0]), int(counts[0, 1])


def split_by_keys(inverse, keys, labels, label, new_label, flags, out):
    """Split off the rows of a leaf that read the table rows ``keys``: those labelled ``label``
    are relabelled ``new_label`` and written to ``out`` increasing; no other row is read.

    Parameters
    ----------
    inverse : (ptr, rows)
        The table's inverse index (:func:`inverse_index`).
    keys : ndarray of intp
        Codes rows of the table (index vector plus one).
    labels : ndarray of uint8 or int32
        Each target row's label.
    label, new_label : int
        The leaf's label; the moved rows' label.
    flags : ndarray of uint8
        A byte a target row, a multiple of 8 bytes, zero (left zero).
    out : ndarray of intp
        Long enough for the moved rows.

    Returns
    -------
    int
        Rows moved.
    """
    ptr, inv_rows = inverse
    return int(_inverse_split_kernel(ptr, inv_rows, keys, labels, label, new_label, flags, out))


def inverse_index(rows, n_rows):
    """The target rows that read each codes row of a table: (ptr, rows) with codes row r's
    target rows ``rows[ptr[r]:ptr[r + 1]]``, increasing.

    Parameters
    ----------
    rows : ndarray of int
        The table's index vector (-1: absent, codes row 0).
    n_rows : int
        Codes rows.

    Returns
    -------
    (ndarray of intp, ndarray of intp)
    """
    ptr = np.empty(n_rows + 1, dtype=np.intp)
    out = np.empty(rows.shape[0], dtype=np.intp)
    _inverse_index_kernel(np.asarray(rows, dtype=np.intp) + 1, n_rows, ptr, out)
    return ptr, out


def compact_rows(lst, labels, label):
    """The rows of ``lst`` labelled ``label`` moved to its front in order; returns how many."""
    return int(_compact_kernel(lst, labels, label))


@njit(parallel=True, cache=True, fastmath=False, nogil=True, error_model="numpy")
def _ranges_kernel(a, b, offsets, n_bins):
    """Over the rows offsets[f]:offsets[f] + n_bins[f] of a (each f): a -= b."""
    for f in prange(offsets.shape[0]):
        o = offsets[f]
        for j in range(o, o + n_bins[f]):
            for q in range(a.shape[1]):
                a[j, q] = a[j, q] - b[j, q]


def subtract_ranges(parent, child, offsets, n_bins):
    """parent -= child over the bins of some features (feature f's rows offsets[f] up to
    offsets[f] + n_bins[f]), in place."""
    thread_count()
    _ranges_kernel(parent, child, offsets, n_bins)


@njit(parallel=True, cache=True, fastmath=False, nogil=True, error_model="numpy")
def _add_by_label_kernel(score, values, labels):
    for i in prange(score.shape[0]):
        score[i] += values[labels[i]]


@njit(parallel=True, cache=True, fastmath=False, nogil=True, error_model="numpy")
def _residuals_kernel(score, y, out):
    for i in prange(score.shape[0]):
        out[i] = score[i] - np.float64(y[i])


def residuals(score, y, out):
    """out = score - y, in double, rounded to out's single precision (NumPy's subtract into a
    float32 out: the same bytes)."""
    thread_count()
    _residuals_kernel(score, y, out)


def add_by_label(score, values, labels):
    """score[i] += values[labels[i]] for every i, in place."""
    thread_count()
    _add_by_label_kernel(score, values, labels)


# One cache for every process of an environment: read and written under a lock (see .build).
from .build import lock_caches  # noqa: E402  (after every kernel is defined)

lock_caches(globals())
