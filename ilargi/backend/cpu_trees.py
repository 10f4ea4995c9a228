"""The CPU backend's NumPy kernels for gradient-boosted trees (re-exported by :mod:`.cpu`):
histograms by bin code, a leaf's sums by foreign key, the partition of a leaf's rows by a split,
the histograms of sparse columns, the binning of a BinnedMatrix's tables. The compiled backend's
versions are in compiled/trees.py and compiled/bins.py; each gives the same bytes as its twin
here.
"""

import numpy as np


def bin_histograms(codes, rows, idx, g, h, c=None, n_bins=256):
    """Histograms of (g, h, count) by bin code, one per column of ``codes``: entry i of ``idx``
    reads codes row ``rows[i] + 1`` (row 0: the absent row), or row i where ``rows`` is None.

    Parameters
    ----------
    codes : ndarray of uint8, shape (n_rows, k)
        Bin codes of a table.
    rows : ndarray of int or None
        Index vector of the table (-1: absent), or None.
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
        Sums of g, h and the count per column and bin.
    """
    idx = np.asarray(idx, dtype=np.intp)
    r = idx if rows is None else np.asarray(rows)[idx] + 1
    k, m = codes.shape[1], idx.shape[0]
    flat = (codes[r].astype(np.intp) + np.arange(k, dtype=np.intp) * n_bins).ravel()
    out = np.empty((k, n_bins, 3))
    size = k * n_bins
    weights = (g[idx], h[idx], np.ones(m) if c is None else np.asarray(c, np.float64)[idx])
    for q, w in enumerate(weights):
        w = np.repeat(w.astype(np.float64), k)
        out[:, :, q] = np.bincount(flat, weights=w, minlength=size).reshape(k, n_bins)
    return out


def leaf_sums(rows, idx, g, h, n_out):
    """Segment-sums of (g, h, 1) over the entries i of ``idx`` into row ``rows[i] + 1`` of an
    (n_out × 3) array (row 0: the absent entries).

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
    idx = np.asarray(idx, dtype=np.intp)
    keys = np.asarray(rows)[idx] + 1
    out = np.empty((n_out, 3))
    out[:, 0] = np.bincount(keys, weights=g[idx].astype(np.float64), minlength=n_out)
    out[:, 1] = np.bincount(keys, weights=h[idx].astype(np.float64), minlength=n_out)
    out[:, 2] = np.bincount(keys, minlength=n_out)
    return out


def partition_rows(order, lo, hi, codes, rows, column, threshold):
    """Stable partition of ``order[lo:hi]`` in place: the rows whose bin code in ``column`` is at
    most ``threshold`` first, the others after, each in their order.

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
    segment = order[lo:hi]
    r = segment if rows is None else np.asarray(rows)[segment] + 1
    left = codes[r, column] <= threshold
    n_left = int(np.count_nonzero(left))
    order[lo:hi] = np.concatenate([segment[left], segment[~left]])
    return n_left


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
    """A leaf's segment-sums by the keys of several tables and the fact table's histograms (the
    compiled backend reads the leaf's rows once for all of them).

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
        The leaf's rows (None: every target row).
    g, h : ndarray
        Gradients and hessians of the target rows.
    n_bins : int, default=256
        Bins of the fact histograms.
    fbins : ndarray of int, shape (kf,), optional
        Bins of each fact column (a hint for the compiled layout; unused here).
    counts : bool, default=True
        False: the fact histograms' counts are left at zero (a tree's threshold scan does not
        read them).
    scratch : dict, optional
        The compiled pass's buffers kept from leaf to leaf (unused here: new arrays each time,
        and no ``scratch["held"]``).
    hessians : bool, default=True
        False (with counts False): the fact histograms' hessian sums are left at zero too.

    Returns
    -------
    sums : list of ndarray of shape (n_out, 3)
        Per selected table, the sums of (g, h, 1) by key (row 0: the absent rows).
    hist : ndarray of shape (kf, n_bins, 3) or None
        The fact table's histograms.
    """
    if idx is None:
        idx = np.arange(np.asarray(g).shape[0])
    sums = [leaf_sums(R[t], idx, g, h, k) for t, k in zip(sel, n_outs)]
    hist = None if fcodes is None else bin_histograms(fcodes, None, idx, g, h, None, n_bins)
    if hist is not None and not counts:
        hist[..., 2] = 0.0
    if hist is not None and not hessians:
        hist[..., 1] = 0.0
    return sums, hist


def column_histograms(codes_t, jobs, sums, out):
    """Per job (row of codes_t, first row of sums, rows, feature): out[feature] += the sums of
    the job's rows by their codes (a keyed table's histograms from a leaf's sums by key)."""
    bins = out.shape[1]
    for column, start, n_rows, feature in np.asarray(jobs):
        codes = codes_t[column, :n_rows]
        for q in range(3):
            w = sums[start : start + n_rows, q]
            out[feature, :, q] += np.bincount(codes, weights=w, minlength=bins)


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
    """Per job k of ``columns`` = (indptr, rows, codes, jobs), jobs[k] = (start, offset, bins,
    default, table, column c): out[offset + code] = the sums ``sums[start + rows[e]]`` of column
    c's entries e (``indptr[c]:indptr[c + 1]``) by their codes, its default bin = totals minus
    its other bins (the jobs: every sparse column or a leaf's candidates; a leaf's
    histograms of a sparse table from its sums by key; out's rows of the jobs are written
    whatever they held). Each bin
    is summed in row order, the other bins in bin order, as the compiled kernels sum them (by
    column, or by row for the rows a small leaf holds: ``by_row``, ``leaf_rows`` and ``by_rows``,
    not needed here): the same bytes. ``zero_bins`` False leaves default bins 0 at zero.
    ``only``: the jobs to sum (rows of jobs; default every job); without ``counts`` the bins'
    counts are zero."""
    indptr, rows, codes, jobs = columns
    jobs = np.asarray(jobs) if only is None else np.asarray(jobs)[np.asarray(only, dtype=np.intp)]
    K = jobs.shape[0]
    if K == 0:
        return
    width = int(jobs[:, 2].max())
    first, entries = indptr[jobs[:, 5]], np.diff(indptr)[jobs[:, 5]]
    column = np.repeat(np.arange(K), entries)
    entry = np.arange(column.size) + np.repeat(first - (np.cumsum(entries) - entries), entries)
    flat = column * width + codes[entry]
    at = jobs[column, 0] + rows[entry]
    H = np.empty((K, width, 3))
    for q in range(3):
        H[:, :, q] = np.bincount(flat, weights=sums[at, q], minlength=K * width).reshape(K, width)
    everything = np.arange(K)
    H[everything, jobs[:, 3]] = 0.0
    rest = np.cumsum(H, axis=1)[:, -1]  # sequential, in bin order (bins past a column's: 0)
    H[everything, jobs[:, 3]] = np.asarray(totals)[None, :] - rest
    if not zero_bins:  # default bins 0 left at zero (a threshold scan never reads bin 0)
        H[jobs[:, 3] == 0, 0] = 0.0
    if not counts:
        H[..., 2] = 0.0
    inside = np.arange(width)[None, :] < jobs[:, 2:3]
    out[(jobs[:, 1:2] + np.arange(width)[None, :])[inside]] = H[inside]


def split_rows(
    lst, labels, label, new_label, codes, rows, column, threshold, side, out, every=False
):
    """Split a leaf by scanning its rows: those labelled ``label`` in ``lst`` whose code test
    (code in ``column`` <= threshold) equals ``side`` are relabelled ``new_label`` and written
    to ``out`` in order; the leaf's other rows are compacted to the front of ``lst``, in order.
    Rows of ``lst`` with another label (taken by a side that moved before) are dropped. See
    :func:`ilargi.backend.compiled.trees.split_rows`.

    Returns
    -------
    moved, kept : int
        Rows written to out; rows kept at the front of lst.
    """
    if every:
        lst[:] = np.arange(lst.shape[0])
    mine = lst[labels[lst] == label]
    r = mine if rows is None else np.asarray(rows)[mine] + 1
    code = codes[r, column]
    # threshold: a bin, or (a set of categories) whether each code goes left
    go = (threshold[code] if isinstance(threshold, np.ndarray) else code <= threshold) == bool(side)
    moved, kept = mine[go], mine[~go]
    out[: moved.size] = moved
    lst[: kept.size] = kept
    labels[moved] = new_label
    return int(moved.size), int(kept.size)


def split_by_keys(inverse, keys, labels, label, new_label, flags, out):
    """Split off the rows of a leaf that read the table rows ``keys`` (codes rows): those
    labelled ``label`` are relabelled ``new_label`` and written to ``out`` increasing; see
    :func:`ilargi.backend.compiled.trees.split_by_keys` (``flags`` unused here).

    Returns
    -------
    int
        Rows moved.
    """
    ptr, inv_rows = inverse
    keys = np.asarray(keys, dtype=np.intp)
    if keys.size:
        lengths = ptr[keys + 1] - ptr[keys]
        starts = np.repeat(ptr[keys] - np.cumsum(lengths) + lengths, lengths)
        found = inv_rows[starts + np.arange(int(lengths.sum()))]
    else:
        found = np.empty(0, dtype=np.intp)
    moved = np.sort(found[labels[found] == label])
    labels[moved] = new_label
    out[: moved.size] = moved
    return int(moved.size)


def inverse_index(rows, n_rows):
    """The target rows that read each codes row of a table: (ptr, rows) with codes row r's
    target rows ``rows[ptr[r]:ptr[r + 1]]``, increasing (codes row 0: the absent rows)."""
    keys = np.asarray(rows, dtype=np.intp) + 1
    ptr = np.zeros(n_rows + 1, dtype=np.intp)
    np.cumsum(np.bincount(keys, minlength=n_rows), out=ptr[1:])
    return ptr, np.argsort(keys, kind="stable").astype(np.intp)


def compact_rows(lst, labels, label):
    """The rows of ``lst`` labelled ``label`` moved to its front in order; returns how many."""
    mine = lst[labels[lst] == label]
    lst[: mine.size] = mine
    return int(mine.size)


def _range_rows(offsets, n_bins):
    ends = np.cumsum(n_bins)
    return np.arange(int(ends[-1]) if ends.size else 0) + np.repeat(offsets - ends + n_bins, n_bins)


def subtract_ranges(parent, child, offsets, n_bins):
    """parent -= child over the bins of some features (feature f's rows offsets[f] up to
    offsets[f] + n_bins[f]), in place."""
    at = _range_rows(offsets, n_bins)
    parent[at] -= child[at]


# Rows a step of add_by_label: its gathered values are a temporary of this many, not of n.
_LABEL_STEP = 1 << 18


def add_by_label(score, values, labels):
    """score[i] += values[labels[i]] for every i, in place, a block of rows at a time."""
    for lo in range(0, score.size, _LABEL_STEP):
        score[lo : lo + _LABEL_STEP] += values[labels[lo : lo + _LABEL_STEP]]


def residuals(score, y, out):
    """out = score - y, in double, rounded to out's single precision."""
    np.subtract(score, y, out=out)


# Values binned, or target rows gathered, at once: temporaries of a few MiB, not of every row.
_ROW_STEP = 1 << 18
# Rows of codes transposed at once (a step of a table's row-major codes stays in the caches).
_COPY_STEP = 1 << 14


def affine_column(column, a, b, out):
    """out = column·a + b (float64; the column a view of any strides)."""
    np.multiply(column, a, out=out)
    out += b


def bin_column(values, bounds, codes, column):
    """codes[:, column] = the bin of each value: the first bin whose upper bound is >= it
    (``np.searchsorted(bounds, values, side="left")`` as uint8), in place."""
    for lo in range(0, values.size, _ROW_STEP):
        found = np.searchsorted(bounds, values[lo : lo + _ROW_STEP], side="left")
        codes[lo : lo + _ROW_STEP, column] = found.astype(np.uint8)


def gather_codes(out, at, codes, rows):
    """out[i, at:at + k] = codes[rows[i] + 1] for every target row i (codes row 0: the absent
    row), or codes[i] where ``rows`` is None; k = codes.shape[1]."""
    k = codes.shape[1]
    for lo in range(0, out.shape[0], _ROW_STEP):
        hi = min(lo + _ROW_STEP, out.shape[0])
        step = slice(lo, hi) if rows is None else rows[lo:hi] + 1
        out[lo:hi, at : at + k] = codes[step]


def joint_codes(codes, groups, bins):
    """(joint, by_column): per row and group of columns of ``codes`` (uint8, (n, k)), the joint
    code c0 + b0·(c1 + b1·(...)) of the group's columns in order (b: their ``bins``, whose
    product is at most 256), and a Fortran-ordered copy of ``codes``."""
    n, k = codes.shape
    joint = np.empty((n, len(groups)), dtype=np.uint8)
    by_column = np.empty((n, k), dtype=np.uint8, order="F")
    for lo in range(0, n, _COPY_STEP):  # each step's rows transposed in the caches
        step = by_column[lo : lo + _COPY_STEP]
        step[...] = codes[lo : lo + _COPY_STEP]
        for q, group in enumerate(groups):
            code = step[:, group[-1]].copy()  # every partial code < 256: uint8 throughout
            for c in reversed(group[:-1]):
                code *= np.uint8(bins[c])
                code += step[:, c]
            joint[lo : lo + _COPY_STEP, q] = code
    return joint, by_column


def add_by_label_residuals(score, values, labels, y, out):
    """score[i] += values[labels[i]] for every i, in place, then out = score - y in double,
    rounded to out's single precision: a tree's leaf values added and squared error's next
    gradients made (add_by_label, then residuals); returns Σout, ``sum_float64(out)``."""
    add_by_label(score, values, labels)
    residuals(score, y, out)
    return sum_float64(out)


def sum_float64(a):
    """Σa in double: ``np.sum(a, dtype=np.float64)`` (a tree's Σg; the compiled backend gives the
    same bits from its buffers summed in parallel)."""
    return float(np.sum(a, dtype=np.float64))
