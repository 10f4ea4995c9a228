"""Key matching for ``Table.merge``: the row pairs of ``pandas.merge``, computed on int64 key codes.

Keys are factorized jointly, so both sides share one code per distinct value; every missing value
(NaN, None, NULL, or a row a previous join left absent) shares one extra "NA" code, so missing keys match
each other as they do in pandas. The row pairs of each join kind then come from bincount, stable
argsort and repeat -- never a Python loop over rows. Row order is pandas.merge's: inner and left keep
the left order (a row's matches in right order), right keeps the right order (a row's matches in left
order), outer sorts the keys (missing last) and lists each key's left x right pairs left-major.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_CODE_LIMIT = 2**62


def factorize_jointly(arrays, sort):
    """Codes of several 1-D arrays in one code space.

    Integer keys whose range is not much wider than their count (surrogate keys) are coded by direct
    addressing, ``value - min``: one subtraction instead of a hash table, and already sorted.

    Parameters
    ----------
    arrays : list of array-like
        The key columns.
    sort : bool
        Codes follow the sorted order of the distinct values.

    Returns
    -------
    codes : list of ndarray of int64
        One code array per input; missing values get -1.
    count : int
        The number of distinct values (codes are below it).

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi.table.join import factorize_jointly
    >>> codes, count = factorize_jointly([np.array(["b", "a"]), np.array(["a", "c"])], sort=True)
    >>> [c.tolist() for c in codes], count
    ([[1, 0], [0, 2]], 3)
    """
    direct = _direct_codes(arrays)
    if direct is not None:
        return direct
    values = pd.concat([pd.Series(array) for array in arrays], ignore_index=True)
    codes, uniques = pd.factorize(values, sort=sort)
    bounds = np.cumsum([len(array) for array in arrays])[:-1]
    return np.split(codes.astype(np.int64, copy=False), bounds), len(uniques)


def _direct_codes(arrays):
    arrays = [
        np.asarray(array) if isinstance(getattr(array, "dtype", None), np.dtype) else None
        for array in arrays
    ]
    if any(array is None or array.dtype.kind not in "iu" for array in arrays):
        return None
    total = sum(len(array) for array in arrays)
    if total == 0:
        return None
    low = min(int(array.min()) for array in arrays if len(array))
    high = max(int(array.max()) for array in arrays if len(array))
    if high - low > 2 * total + 1024 or max(abs(low), abs(high)) >= _CODE_LIMIT:
        return None
    if low >= 0 and high <= 2 * total + 1024 and all(array.dtype == np.int64 for array in arrays):
        return arrays, high + 1  # the keys are codes already (never written to): no shifted copy
    return [np.subtract(array, low, dtype=np.int64) for array in arrays], high - low + 1


def gather_codes(pieces, nrows, na):
    """Codes of a joined column from its row-disjoint pieces.

    Parameters
    ----------
    pieces : list of (ndarray, ndarray or None)
        ``(source codes, rows)``: codes per source row (``na`` for missing values already) and the
        index vector from joined rows to source rows (-1 = absent, None = identity).
    nrows : int
        Rows of the joined table.
    na : int
        The code of a missing value.

    Returns
    -------
    ndarray of int64
        The code of each joined row; ``na`` where absent or uncovered. An identity piece's codes
        are returned as they are, not copied.
    """
    if len(pieces) == 1 and len(pieces[0][0]):
        codes, rows = pieces[0]
        if rows is None:
            return codes
        out = codes.take(rows)
        out[rows < 0] = na
        return out
    out = np.full(nrows, na, dtype=np.int64)
    for codes, rows in pieces:
        if rows is None:
            out = codes.copy()  # later pieces write into it; the codes may be a caller's column
        else:
            present = rows >= 0
            out[present] = codes.take(rows[present])
    return out


def compact(left, right, sort):
    """Renumber the codes of both sides to 0..k-1.

    Parameters
    ----------
    left, right : ndarray of int64
        Codes of the two sides.
    sort : bool
        Keep the order of the codes.

    Returns
    -------
    left, right : ndarray of int64
        The new codes.
    count : int
        The number k of distinct codes.
    """
    (left, right), count = factorize_jointly([left, right], sort)
    return left, right, count


def combine_codes(left_codes, right_codes, sizes, sort):
    """Fold the per-column codes of a composite key into one code per row (lexicographic order).

    Parameters
    ----------
    left_codes, right_codes : list of ndarray of int64
        Per key column, the codes of each side.
    sizes : list of int
        Per key column, the size of its code space.
    sort : bool
        Keep the lexicographic order when the codes must be compacted.

    Returns
    -------
    left, right : ndarray of int64
        One code per row of each side.
    size : int
        The size of the combined code space.
    """
    left, right, size = left_codes[0], right_codes[0], sizes[0]
    for more_left, more_right, more_size in zip(left_codes[1:], right_codes[1:], sizes[1:]):
        if size * more_size >= _CODE_LIMIT:
            left, right, size = compact(left, right, sort)
        left, right, size = (
            left * more_size + more_left,
            right * more_size + more_right,
            size * more_size,
        )
    return left, right, size


def first_duplicate(codes, size):
    """The first row whose code occurs more than once.

    Parameters
    ----------
    codes : ndarray of int64
        Codes in [0, size).
    size : int
        The size of the code space.

    Returns
    -------
    tuple of (int, int) or None
        ``(row, count of its code)``, or None when every code is unique.
    """
    counts = np.bincount(codes, minlength=size)
    repeated = np.flatnonzero(counts.take(codes) > 1)
    if len(repeated) == 0:
        return None
    row = int(repeated[0])
    return row, int(counts[codes[row]])


def join_indexers(left, right, size, how):
    """The row pairs of ``pandas.merge(how=how)``, from key codes.

    Parameters
    ----------
    left, right : ndarray of int64
        Key codes of each side, in [0, size).
    size : int
        The size of the code space.
    how : {"inner", "left", "right", "outer"}
        The join kind.

    Returns
    -------
    left_take, right_take : ndarray of int64 or None
        Per joined row, the row of each side; -1 marks the absent side of a pair, None the
        identity (every row, in order).

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi.table.join import join_indexers
    >>> left_take, right_take = join_indexers(np.array([0, 1, 1, 2]), np.array([1, 0]), 3, "left")
    >>> left_take, right_take.tolist()
    (None, [1, 0, 0, -1])
    """
    if how == "right":
        right_take, left_take = join_indexers(right, left, size, "left")
        return left_take, right_take
    n, m = len(left), len(right)
    if n == 0 or m == 0:
        return _one_side_empty(left, right, how)
    if size > 2 * (n + m) + 16:
        left, right, size = compact(left, right, sort=how == "outer")
    if how == "outer":
        return _outer(left, right, size)
    return _left_or_inner(left, right, size, keep_unmatched=how == "left")


def _one_side_empty(left, right, how):
    # nothing matches; an outer join still lists the other side's rows in key order
    empty = np.empty(0, dtype=np.int64)
    if how == "outer":
        if len(left) == 0:
            return np.full(len(right), -1, dtype=np.int64), np.argsort(right, kind="stable")
        return np.argsort(left, kind="stable"), np.full(len(left), -1, dtype=np.int64)
    if how == "left" and len(left) > 0:
        return None, np.full(len(left), -1, dtype=np.int64)
    return empty, empty


def _left_or_inner(left, right, size, keep_unmatched):
    n, m = len(left), len(right)
    counts = np.bincount(right, minlength=size)
    if counts.max() <= 1:
        # many-to-one, the usual case: one lookup per left row, no repeats
        position = np.full(size, -1, dtype=np.int64)
        position[right] = np.arange(m)
        right_take = position.take(left)
        matched = right_take >= 0
        if keep_unmatched or matched.all():
            return None, right_take
        return np.flatnonzero(matched), right_take[matched]
    order = np.argsort(right, kind="stable")
    starts = np.cumsum(counts) - counts
    matches = counts.take(left)
    repeats = np.maximum(matches, 1) if keep_unmatched else matches
    left_take = np.repeat(np.arange(n), repeats)
    within = np.arange(len(left_take)) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    position = np.minimum(np.repeat(starts.take(left), repeats) + within, m - 1)
    right_take = order.take(position)
    if keep_unmatched:
        right_take[np.repeat(matches == 0, repeats)] = -1
    return left_take, right_take


def _outer(left, right, size):
    n, m = len(left), len(right)
    left_count = np.bincount(left, minlength=size)
    right_count = np.bincount(right, minlength=size)
    left_start = np.cumsum(left_count) - left_count
    right_start = np.cumsum(right_count) - right_count
    both = (left_count > 0) & (right_count > 0)
    group = np.where(both, left_count * right_count, left_count + right_count)
    key = np.repeat(np.arange(size), group)
    within = np.arange(len(key)) - np.repeat(np.cumsum(group) - group, group)
    pairs = both.take(key)
    width = np.maximum(right_count.take(key), 1)
    left_pos = np.where(pairs, within // width, within)
    right_pos = np.where(pairs, within % width, within)
    left_order = np.argsort(left, kind="stable")
    right_order = np.argsort(right, kind="stable")
    left_take = np.where(
        left_count.take(key) > 0,
        left_order.take(np.minimum(left_start.take(key) + left_pos, n - 1)),
        -1,
    )
    right_take = np.where(
        right_count.take(key) > 0,
        right_order.take(np.minimum(right_start.take(key) + right_pos, m - 1)),
        -1,
    )
    return left_take, right_take
