"""NumPy/SciPy kernels behind the rewrite rules: the CPU backend (:mod:`.contract`).

Kernel choice decides whether factorized beats materialized (``docs/design.rst``, "Performance
principles"): ``np.take`` with a preallocated output and ``mode="clip"`` for gathers (indices are
validated once and copied into the Indicator, so the bounds check is wasted work), ``np.bincount``
for 1-column segment sums, a CSR view of Iᵀ built once for several columns, and never
``np.add.at`` or fancy indexing on hot paths. Measurements behind these choices
are listed under "Kernel notes" in ``benchmarks/RESULTS.md``.

Examples
--------
>>> import numpy as np
>>> from ilargi.metadata import Indicator
>>> ind = Indicator(np.array([1, -1, 1, 0]), 2)
>>> gather(np.array([10.0, 20.0]), ind).tolist()
[20.0, 0.0, 20.0, 10.0]
>>> segment_sum(np.array([1.0, 2.0, 3.0, 4.0]), ind).tolist()
[4.0, 4.0]
"""

import threading

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import daxpy, ddot

from . import threads
from .cpu_trees import (  # noqa: F401  (the NumPy tree kernels of this backend)
    add_by_label,
    add_by_label_residuals,
    affine_column,
    bin_column,
    bin_histograms,
    column_histograms,
    compact_rows,
    gather_codes,
    inverse_index,
    joint_codes,
    leaf_pass,
    leaf_sums,
    partition_rows,
    residuals,
    sparse_histograms,
    split_by_keys,
    split_rows,
    subtract_ranges,
    sum_float64,
)
from .links import BinaryLink, MultinomialLink  # noqa: F401  (the NumPy links of this backend)

xp = np
name = "cpu"


def is_sparse(x):
    """Whether x is a SciPy sparse matrix or array."""
    return sp.issparse(x)


def as_csr(x, dtype=None):
    """A CSR array view of x (copying only when the format or dtype must change)."""
    out = sp.csr_array(x, dtype=dtype) if not isinstance(x, sp.csr_array) else x
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return out


def csr(data, indices, indptr, shape):
    """A SciPy CSR array from its three arrays."""
    return sp.csr_array((data, indices, indptr), shape=shape)


def to_dense(x):
    """x as a dense ndarray."""
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def asnumpy(x):
    """A host copy of x (device arrays are fetched; host arrays pass through)."""
    return x.get() if hasattr(x, "get") and not sp.issparse(x) else x


def move_array(x):
    """A host (NumPy) copy of a device array; host arrays pass through."""
    return x.get() if hasattr(x, "get") else x


def move_source(S):
    """A source on the host: NumPy array or SciPy CSR (from CuPy/cupyx or host input)."""
    if hasattr(S, "get"):
        S = S.get()
    return as_csr(S) if sp.issparse(S) else S


# ---------------------------------------------------------------------------------------------
# Indicator structures, built once per indicator and cached on it (see Indicator.cached).


def safe_rows(ind):
    """Row indices with absent (-1) entries replaced by 0, so gathers need no bounds checks."""

    def build():
        rows = ind.rows
        return np.where(rows < 0, 0, rows) if ind.n_absent else rows

    return ind.cached("safe_rows", build)


def absent_positions(ind):
    """Target rows where this source is absent."""
    return ind.cached("absent", lambda: np.flatnonzero(ind.rows < 0))


def bucket_rows(ind):
    """Rows with absent entries sent to an extra bucket n_source (dropped after bincount)."""

    def build():
        rows = ind.rows
        return np.where(rows < 0, ind.n_source, rows) if ind.n_absent else rows

    return ind.cached("bucket_rows", build)


def indicator_matrix(ind):
    """I as CSR (n × n_source, data = 1), built once; its transpose is the segment-sum operator."""
    return ind.cached("csr", ind.tocsr)


# ---------------------------------------------------------------------------------------------
# The two primitives of every rule: gather g(Z, rows) and segment-sum s(Y, rows, n_p).


def identity_gather(Z, out=None):
    """g(Z, rows) of an identity indicator, for the gathers of every backend: Z itself, or Z
    written into ``out`` if given (NumPy and CuPy arrays alike)."""
    if out is None:
        return Z
    out[...] = Z
    return out


def gather(Z, ind, out=None):
    """g(Z, rows): row i of the result is Z[rows[i]], or 0 where rows[i] = -1 (into out if given)."""
    if ind.is_identity:
        return identity_gather(Z, out)
    shape = (ind.n_rows,) + Z.shape[1:]
    if out is None:
        out = np.empty(shape, dtype=Z.dtype)
    if Z.shape[0] != ind.n_source:  # O(1), and what makes the clip below safe
        raise ValueError(
            f"gather: {Z.shape[0]} rows to gather from, the indicator has "
            f"{ind.n_source} source rows"
        )
    if Z.shape[0] == 0:
        out[...] = 0
        return out
    # mode="clip" skips a bounds check that cannot fail: an Indicator's rows are validated once
    # (range [-1, n_source)) and held as its private copy (handed out only as read-only views),
    # the -1 entries are mapped to 0 by safe_rows, and Z has n_source rows (checked above).
    np.take(Z, safe_rows(ind), axis=0, out=out, mode="clip")
    if ind.n_absent:
        out[absent_positions(ind)] = 0
    return out


def gather_add(out, Z, ind):
    """out += g(Z, rows), allocating out on first use (out=None)."""
    if ind.is_identity:
        if out is None:
            return Z  # callers pass a freshly computed Z, so it is ours to accumulate into
        out += Z
        return out
    if out is None:
        return gather(Z, ind)
    out += gather(Z, ind, out=_scratch((ind.n_rows,) + Z.shape[1:], out.dtype))
    return out


_SCRATCH = threading.local()
_SCRATCH_LIMIT = 1 << 23  # elements; larger temporaries are allocated per call


def _scratch(shape, dtype):
    """A per-thread buffer for a temporary that never leaves a kernel: a fresh n-vector in every
    iteration of a training loop is page-faulted in each time, which costs more than the gather
    that fills it."""
    if np.prod(shape) > _SCRATCH_LIMIT:
        return np.empty(shape, dtype)
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.shape != shape or buffer.dtype != dtype:
        buffer = _SCRATCH.buffer = np.empty(shape, dtype)
    return buffer


def segment_sum(Y, ind):
    """s(Y, rows, n_p) = Iᵀ·Y: row j sums the rows i of Y with rows[i] = j (absent rows dropped)."""
    if ind.is_identity:
        return Y
    if Y.ndim == 1:
        return np.bincount(bucket_rows(ind), weights=Y, minlength=ind.n_source + 1)[: ind.n_source]
    if Y.flags.f_contiguous and not Y.flags.c_contiguous:
        # One bincount per column reads a contiguous column each time.
        out = np.empty((ind.n_source, Y.shape[1]), dtype=np.result_type(Y.dtype, np.float64))
        for j in range(Y.shape[1]):
            out[:, j] = segment_sum(Y[:, j], ind)
        return out
    # Iᵀ·Y as a scatter (CSC of Iᵀ): Y is read once in order and added into the small result,
    # cheaper than gathering Y's rows through a CSR of Iᵀ.
    return indicator_matrix(ind).T @ Y


def counts(ind):
    """cnt_p = bincount(rows ≥ 0): how many target rows take each source row."""
    if ind.is_identity:
        return np.ones(ind.n_rows)
    return np.bincount(bucket_rows(ind), minlength=ind.n_source + 1)[: ind.n_source].astype(
        np.float64
    )


def cooccurrence(first, second, w=None):
    """C = I_pᵀ·diag(w)·I_q as CSR (n_p × n_q), or None if no target row takes both sources.

    No search for source-row pairs is needed when one indicator is the identity (C = I_pᵀ·diag(w)
    or diag(w)·I_q) or when one index vector is a function of the other (same table, or a
    snowflake: each orders row has one customer row), where C has one entry per source row,
    weighted by s(w, rows). Otherwise the pairs are summed (unweighted C is built once and cached).
    """
    if first.is_identity or second.is_identity:
        other = second if first.is_identity else first
        if other.is_identity:
            data = np.ones(other.n_rows) if w is None else w
            return sp.csr_array(
                (data, (np.arange(other.n_rows), np.arange(other.n_rows))),
                shape=(other.n_rows, other.n_rows),
            )
        weighted = _weighted_indicator(other, w)
        return weighted if first.is_identity else weighted.T.tocsr()
    for fine, coarse, flip in ((first, second, False), (second, first, True)):
        mapped = coarse.function_of(fine)
        if mapped is not None:
            sums = counts(fine) if w is None else segment_sum(w, fine)
            keep = np.flatnonzero((mapped >= 0) & (sums != 0))
            C = sp.csr_array(
                (sums[keep], (keep, mapped[keep])), shape=(fine.n_source, coarse.n_source)
            )
            return (C.T.tocsr() if flip else C) if keep.size else None
    if w is not None:
        return _pairs(first, second, w)
    return first.cached("cooccurrence", lambda: _pairs(first, second, None), owner=second)


def _pairs(first, second, w):
    """I_pᵀ·diag(w)·I_q from the (rows_p, rows_q) pairs: COO to CSR sums duplicate pairs with a
    counting sort by row (cheaper than sorting the pair keys)."""
    rows_p, rows_q = first.rows, second.rows
    both = np.flatnonzero((rows_p >= 0) & (rows_q >= 0))
    if both.size == 0:
        return None
    data = np.ones(both.size) if w is None else w[both]
    out = sp.coo_array(
        (data, (rows_p[both], rows_q[both])), shape=(first.n_source, second.n_source)
    ).tocsr()
    out.sum_duplicates()
    return out


def _weighted_indicator(ind, w):
    """diag(w)·I as CSR (n × n_source): the indicator's own pattern with the weights as data."""
    pattern = indicator_matrix(ind)
    if w is None:
        return pattern
    return sp.csr_array(
        (w[ind.rows >= 0] if ind.n_absent else w, pattern.indices, pattern.indptr),
        shape=pattern.shape,
    )


# ---------------------------------------------------------------------------------------------
# Small helpers on sources (dense ndarray or CSR).


def product(S, X, out=None):
    """S·X for a source S and a dense operand X (into out if given). np.dot, because NumPy's
    matmul of an n × 1 column by a 1-vector runs far slower than np.dot's BLAS call."""
    if sp.issparse(S) or (out is not None and out.dtype != np.result_type(S.dtype, X.dtype)):
        if out is None:
            return S @ X
        out[...] = S @ X
        return out
    return np.dot(S, X, out=out)


def transposed_product(S, Y):
    """Sᵀ·Y for a source S (n_p × d_p) and a dense Y of its rows (n_p [× m])."""
    return S.T @ Y


def row_sums(S):
    """Per-row sums as S·1: a GEMV reads a C-ordered dense S faster than NumPy's sum over short
    rows."""
    return S @ np.ones(S.shape[1], dtype=S.dtype)


def column_sums(S):
    """Per-column sums of S: a dense S as 1ᵀ·S (BLAS; NumPy's sum over axis 0 of a narrow
    C-ordered array runs row by row, many times slower), a CSR's by one bincount
    of its entries (SciPy's sum multiplies by an n-vector of ones, fresh pages at every call)."""
    dtype = S.dtype if S.dtype.kind == "f" else np.dtype(np.float64)
    if sp.issparse(S) and S.format == "csr":
        return np.bincount(S.indices, weights=S.data, minlength=S.shape[1]).astype(
            dtype, copy=False
        )
    if isinstance(S, np.ndarray) and S.ndim == 2:
        return np.ones(S.shape[0], dtype=dtype) @ S.astype(dtype, copy=False)
    return np.asarray(S.sum(axis=0)).ravel()


def column_min_max(S):
    """Per-column (min, max) of S, implicit zeros of a sparse S included."""
    if sp.issparse(S):
        return S.min(axis=0).toarray().ravel(), S.max(axis=0).toarray().ravel()
    return S.min(axis=0), S.max(axis=0)


def zero_rows(S, mask):
    """A copy of S with the rows in ``mask`` set to 0 (sparse: their entries dropped)."""
    if sp.issparse(S):
        keep = np.repeat(~mask, np.diff(S.indptr))
        out = sp.coo_array(
            (
                S.data[keep],
                (np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))[keep], S.indices[keep]),
            ),
            shape=S.shape,
        )
        return out.tocsr()
    out = S.copy()
    out[mask] = 0
    return out


def select_rows(S, mask):
    """The rows of S where ``mask`` holds (S itself if it holds everywhere)."""
    return S if mask.all() else S[np.flatnonzero(mask)]


def select_columns(S, idx):
    """The columns ``idx`` of S (S itself for all columns in order)."""
    if idx.size == S.shape[1] and np.array_equal(idx, np.arange(S.shape[1])):
        return S
    return S[:, idx]


def scale_rows(S, v):
    """diag(v)·S; a sparse S stays sparse."""
    return sp.diags_array(v) @ S if sp.issparse(S) else S * v[:, None]


def scale_columns(S, v):
    """S·diag(v); a sparse S stays sparse."""
    return S @ sp.diags_array(v) if sp.issparse(S) else S * v


NARROW = 64  # a sparse part this narrow is multiplied in dense row chunks, not as sparse × sparse


def weighted_gram(S, c=None, chunk_rows=1 << 16):
    """Sᵀ·diag(c)·S. A narrow sparse S is a one-hot part with few column combinations (counted,
    see _one_hot_gram) or goes through BLAS a dense row chunk at a time: SciPy's sparse × sparse
    product of a tall narrow part costs several times more."""
    if not sp.issparse(S):
        return _dense_gram(S, c)
    if S.shape[1] > NARROW:
        return (S.T @ S) if c is None else S.T @ (sp.diags_array(c) @ S)
    S = as_csr(S)
    one_hot = one_hot_columns(S)
    gram = None if one_hot is None else _one_hot_gram(one_hot, S.shape[1], c)
    if gram is not None:
        return gram
    out = np.zeros((S.shape[1], S.shape[1]))
    for start in range(0, S.shape[0], chunk_rows):
        stop = start + chunk_rows
        out += _dense_gram(S[start:stop].toarray(), None if c is None else c[start:stop])
    return out


# Row chunks of the one-hot checks and counts: n-long temporaries would be fresh pages each call.
CHUNK_ROWS = 1 << 20


def _entries_per_row(S):
    """k if every row of the CSR S stores exactly k > 0 entries (as one-hot parts do), else 0."""
    k = S.nnz // max(S.shape[0], 1)
    if not k:
        return 0
    regular = np.arange(min(S.shape[0], CHUNK_ROWS) + 1) * k
    for start in range(0, S.shape[0], CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, S.shape[0])
        if not np.array_equal(S.indptr[start : stop + 1] - start * k, regular[: stop - start + 1]):
            return 0
    return k


def one_hot_columns(S):
    """The n × k column indices of a CSR whose every row stores k ones (a one-hot part), or None."""
    k = _entries_per_row(S)
    return S.indices.reshape(-1, k) if k and (S.data == 1).all() else None


def _one_hot_gram(columns, d, c):
    """Sᵀ·diag(c)·S of a one-hot part with few column combinations (d^k ≤ 2^22), or None.

    Each row is one of at most d^k combinations of columns: one bincount of the combinations'
    codes weighs each combination present, and the Gram is that of the few distinct rows.
    """
    k = columns.shape[1]
    if d**k > 1 << 22:
        return None
    weights = np.zeros(d**k)
    for start in range(0, columns.shape[0], CHUNK_ROWS):
        block = columns[start : start + CHUNK_ROWS]
        code = np.zeros(block.shape[0], dtype=np.intp)
        for a in range(k):
            code *= d
            code += block[:, a]
        weights += np.bincount(
            code, weights=None if c is None else c[start : start + CHUNK_ROWS], minlength=d**k
        )
    present = np.flatnonzero(weights)
    rows = np.zeros((present.size, d))
    for a in range(k):  # the digits of each code present, most significant first
        np.add.at(rows, (np.arange(present.size), present // d ** (k - 1 - a) % d), 1.0)
    return rows.T @ (weights[present, None] * rows)


def _dense_gram(S, c):
    """Sᵀ·diag(c)·S for dense S; for c ≥ 0 as XᵀX with X = sqrt(c)⊙S, which BLAS runs as a
    symmetric rank-k update."""
    if c is None:
        return S.T @ S
    if (c >= 0).all():
        X = S * np.sqrt(c)[:, None]
        return X.T @ X
    return (S * c[:, None]).T @ S


def pushed_sums(S, source, target, w=None, chunk_rows=1 << 23):
    """I_targetᵀ·diag(w)·I_source·S for a narrow S, as a dense target.n_source × d array:
    each target row i adds w_i·S[source row of i] into the row of ``target``'s source it takes.

    Linear in the entries of the rows taken, by bincounts over a chunk of target rows at a time,
    where SciPy's sparse product through the co-occurrence matrix sorts them.
    """
    if not sp.issparse(S) and source.is_identity:
        # The rows in order: scattered through Iᵀ's CSR (built once), faster than any bincount.
        return segment_sum(S if w is None else S * w[:, None], target)
    S = as_csr(S) if sp.issparse(S) else S
    n_out, n = target.n_source, target.n_rows
    out = np.zeros((n_out, S.shape[1]))
    for start in range(0, n, chunk_rows):
        stop = min(start + chunk_rows, n)
        into = target.rows[start:stop]
        rows = slice(start, stop) if source.is_identity else source.rows[start:stop]
        weights = None if w is None else w[start:stop]
        keep = (into >= 0) if source.is_identity else (into >= 0) & (rows >= 0)
        if not keep.all():
            keep = np.flatnonzero(keep)
            into = into[keep]
            rows = keep + start if source.is_identity else rows[keep]
            weights = None if weights is None else weights[keep]
        out += (_sparse_pushed if sp.issparse(S) else _dense_pushed)(S, rows, into, weights, n_out)
    return out


def _dense_pushed(S, rows, into, weights, n_out):
    """One chunk of pushed_sums for dense S: a bincount per column (no bucket array)."""
    values = S[rows] if weights is None else S[rows] * weights[:, None]
    return np.stack(
        [np.bincount(into, weights=values[:, j], minlength=n_out) for j in range(S.shape[1])],
        axis=1,
    )


def _sparse_pushed(S, rows, into, weights, n_out):
    """One chunk of pushed_sums for CSR S: its entries sent to (target row, column) buckets and
    summed by one bincount; one-hot parts (all stored values 1, no weights) are only counted."""
    d = S.shape[1]
    counted = weights is None and bool((S.data == 1).all())
    columns, values, counts = _row_entries(S, rows, values=not counted)
    if weights is not None:
        values = values * (weights[:, None] if counts is None else np.repeat(weights, counts))
    buckets = columns + ((into * d)[:, None] if counts is None else np.repeat(into * d, counts))
    sums = np.bincount(
        buckets.ravel(), weights=None if counted else values.ravel(), minlength=n_out * d
    )
    return sums.reshape(n_out, d)


def _row_entries(S, rows, values=True):
    """(columns, values, counts) of the stored entries of CSR S[rows] (rows: a slice or positions;
    values None unless asked for).

    Where every row holds the same number k of entries (a one-hot part), the entries come as
    len(rows) × k arrays and counts is None: plain 2-D gathers, no ragged index arithmetic.
    """
    k = _entries_per_row(S)
    if k:
        return (
            S.indices.reshape(-1, k)[rows],
            S.data.reshape(-1, k)[rows] if values else None,
            None,
        )
    if isinstance(rows, slice):
        entries = slice(S.indptr[rows.start], S.indptr[rows.stop])
        counts = np.diff(S.indptr[rows.start : rows.stop + 1])
    else:
        first = S.indptr[rows]
        counts = S.indptr[rows + 1] - first
        ends = np.cumsum(counts)  # a ragged arange: first[r] .. first[r] + counts[r] for each r
        entries = np.arange(ends[-1] if ends.size else 0) + np.repeat(
            first - (ends - counts), counts
        )
    return S.indices[entries], S.data[entries] if values else None, counts


class BlockAccumulator:
    """Sums d_p × d_q blocks into a d × d result at (rows, cols), dense or sparse.

    The sparse result is written straight into CSR arrays: each block is kept as a CSR of its
    rows, the output's rows are counted, and each block's entries are copied to their rows'
    places, blocks in the order of their first column. Where no two blocks share a cell and no
    block's columns interleave another's in a row (crossprod's blocks: the parts' columns), the
    rows come out sorted and without duplicates, and nothing else is done; otherwise SciPy sums
    the duplicates and sorts. Triplets concatenated and converted (COO → CSR, duplicates
    summed, indices sorted) took about half of a sparse crossprod's time and fresh arrays of
    several times its entries each call (benchmarks/RESULTS.md, "Operators").
    """

    def __init__(self, d, sparse):
        self.d, self.sparse = d, sparse
        self.blocks, self.leftover = ([], []) if sparse else (None, None)
        self.dense = None if sparse else np.zeros((d, d))

    def add(self, rows, cols, block):
        """Add ``block`` at target rows ``rows`` and columns ``cols``."""
        if self.sparse:
            block = sp.csr_array(block)  # a copy only where it is not a CSR already
            rows, cols = np.asarray(rows), np.asarray(cols)
            if not block.nnz:
                return
            if repeats(rows):
                self.add_leftover(rows, cols, block)
            else:
                if not block.has_sorted_indices:  # e.g. a transposed block, converted
                    block = block.sorted_indices()
                self.blocks.append((rows, cols, block))
        else:
            block = block.toarray() if sp.issparse(block) else block
            rows = np.asarray(rows)
            if repeats(rows):  # a row twice: each added
                np.add.at(self.dense, np.ix_(rows, cols), block)
            else:
                self.dense[np.ix_(rows, cols)] += block

    def add_leftover(self, rows, cols, block):
        """Keep a sparse block whose rows repeat a target row, for SciPy to sum into the result."""
        block = sp.coo_array(block)
        self.leftover.append((block.data, rows[block.row], cols[block.col]))

    def result(self):
        """The d × d sum: an ndarray, or CSR (canonical: sorted, no duplicates) for a sparse
        accumulator."""
        if not self.sparse:
            return self.dense
        blocks = sorted(self.blocks, key=first_column)
        indptr, indices, data = self.allocate(
            [(rows, np.diff(block.indptr)) for rows, _, block in blocks]
        )
        filled = indptr[:-1].copy()  # the next free place of each row
        for rows, cols, block in blocks:
            counts = np.diff(block.indptr)
            # entry e of local row r goes to filled[rows[r]] + (e - indptr[r])
            places = np.repeat(filled[rows] - block.indptr[:-1], counts)
            places += np.arange(block.nnz)
            indices[places] = cols[block.indices]
            data[places] = block.data
            filled[rows] += counts
        out = sp.csr_array((data, indices, indptr.astype(indices.dtype)), shape=(self.d, self.d))
        if not out.has_canonical_format:  # blocks sharing cells, or interleaved columns
            out.sum_duplicates()  # sorts each row's entries and sums the duplicates
        return self.with_leftover(out)

    def allocate(self, row_counts):
        """The result's indptr (int64) and empty indices and data, from (rows, entries per row)
        of each block."""
        per_row = np.zeros(self.d, dtype=np.int64)
        for rows, counts in row_counts:
            per_row[rows] += counts  # a block's rows are distinct (see add)
        indptr = np.zeros(self.d + 1, dtype=np.int64)
        np.cumsum(per_row, out=indptr[1:])
        nnz = int(indptr[-1])
        index = np.int32 if max(nnz, self.d) < np.iinfo(np.int32).max else np.int64
        return indptr, np.empty(nnz, dtype=index), np.empty(nnz)

    def with_leftover(self, out):
        """The CSR ``out`` plus the blocks kept by :meth:`add_leftover`, canonical."""
        if not self.leftover:
            return out
        data, r, c = (np.concatenate(x) for x in zip(*self.leftover))
        out = (out + sp.coo_array((data, (r, c)), shape=(self.d, self.d)).tocsr()).tocsr()
        out.sum_duplicates()
        return out


def repeats(rows):
    """Whether an index array holds a value twice."""
    return bool(rows.size) and np.bincount(rows).max() > 1


def first_column(block):
    """A (rows, cols, ...) block's first target column: blocks are copied in this order."""
    return int(block[1].min()) if block[1].size else 0


def map_source(S, f, scale, shift, cols):
    """The part of f(T) that S feeds: f(S·a_p + b_p) evaluated on stored values only.

    f(values, target_columns) is elementwise; for a sparse S only the stored entries are mapped, so
    the caller's f must send the value of an implicit zero (b_p) to 0.
    """
    if sp.issparse(S):
        j = S.indices
        data = f(S.data * scale[j] + shift[j], cols[j])
        return sp.csr_array((data, S.indices, S.indptr), shape=S.shape)
    return f(S * scale + shift, cols[None, :])


def row_min(S, scale, shift):
    """Per-row min of S·diag(a_p) + b_p over all d_p columns (implicit zeros count as b_p)."""
    if not sp.issparse(S):
        return (S * scale + shift).min(axis=1)
    n_rows, d = S.shape
    per_row = np.diff(S.indptr)
    out = np.full(n_rows, np.inf)
    filled = np.flatnonzero(per_row)
    if filled.size:
        values = S.data * scale[S.indices] + shift[S.indices]
        out[filled] = np.minimum.reduceat(values, S.indptr[filled])
    return np.minimum(out, _implicit_row_min(S, shift, per_row))


def square_excess(S, scale, shift, weights=None, chunk_rows=1 << 16):
    """Σ over the cells of a part of (a·s + b)² − b² = a·s·(a·s + 2b), per source row
    (weights=None) or per column with source row r counted weights[r] times.

    Dense sources are read in row chunks, so no copy of the source is ever made.
    """
    if sp.issparse(S):
        S = as_csr(S)
        v = S.data * scale[S.indices]
        excess = csr(v * (v + 2 * shift[S.indices]), S.indices, S.indptr, S.shape)  # S's pattern
        return excess @ np.ones(S.shape[1]) if weights is None else excess.T @ weights
    out = np.zeros(S.shape[0] if weights is None else S.shape[1])
    for start in range(0, S.shape[0], chunk_rows):
        v = S[start : start + chunk_rows] * scale
        excess = v * (v + 2 * shift)
        if weights is None:
            out[start : start + chunk_rows] = excess.sum(axis=1)
        else:
            out += weights[start : start + chunk_rows] @ excess
    return out


def _implicit_row_min(S, shift, per_row):
    """min of b_j over the columns j a row does not store (+inf for a full row)."""
    n_rows, d = S.shape
    if shift.min() == shift.max():
        return np.where(per_row < d, shift[0] if d else np.inf, np.inf)
    order = np.argsort(shift, kind="stable")
    rank = np.empty(d, dtype=np.int64)
    rank[order] = np.arange(d)
    entry_row = np.repeat(np.arange(n_rows), per_row)
    stored = np.sort(entry_row * d + rank[S.indices]) - entry_row * d
    position = np.arange(stored.size) - S.indptr[entry_row]
    # The smallest rank a row does not store is the first position where ranks skip one.
    first_gap = per_row.copy()
    gaps = np.flatnonzero(stored != position)
    if gaps.size:
        rows_with_gap, first = np.unique(entry_row[gaps], return_index=True)
        first_gap[rows_with_gap] = position[gaps[first]]
    return np.where(first_gap < d, shift[order[np.minimum(first_gap, d - 1)]], np.inf)


# ---------------------------------------------------------------------------------------------
# A table's numeric columns as one block (Table.to_matrix's dense parts).

# How much of the block dense_columns writes at a time (rows × columns × 8 bytes): a block that
# stays in cache while each of its columns is written into it.
DENSE_BLOCK_BYTES = 1 << 19


def dense_columns(columns, fills, out):
    """out[:, j] = columns[j], NaN replaced by fills[j] (out float64, (n, len(columns))). Written
    a block of rows at a time, each column into the block while it is in cache: column by column
    over all n rows, each column's pass would read and write every cache line of ``out``."""
    n, k = out.shape
    step = max(1, DENSE_BLOCK_BYTES // (8 * max(k, 1)))
    for start in range(0, n, step):
        block = out[start : start + step]
        for column, values in enumerate(columns):
            block[:, column] = values[start : start + step]
    for column, (values, fill) in enumerate(zip(columns, fills)):
        missing = np.isnan(values)
        if missing.any():
            out[missing, column] = fill
    return out


# ---------------------------------------------------------------------------------------------
# Materialization (only when a plan, a test or the user asks for the joined table).


def materialize_dense(parts, n, d, dtype):
    """The joined table T₀ as a dense n × d ndarray of ``dtype``."""
    out = np.zeros((n, d), dtype=dtype)
    for part in parts:
        S, ind = part.source, part.indicator
        if sp.issparse(S):
            block = (S if ind.is_identity else ind.tocsr() @ S).toarray()
        else:
            block = gather(S, ind)
        out[:, part.cols] += block
    return out


def materialize_sparse(parts, n, d):
    """The joined table T₀ as an n × d CSR array (a dense source's zeros are not stored)."""
    sources = [as_csr(p.source) if sp.issparse(p.source) else sp.csr_array(p.source) for p in parts]
    blocks = [
        S if part.indicator.is_identity else part.indicator.tocsr() @ S
        for part, S in zip(parts, sources)
    ]
    stacked = sp.hstack(blocks, format="csr")
    target = np.concatenate([part.cols for part in parts])
    index = (
        np.int32 if max(stacked.nnz, d) < 2**31 else np.int64
    )  # as SciPy picks: 4 bytes less per entry
    out = sp.csr_array(
        (stacked.data, target[stacked.indices].astype(index), stacked.indptr.astype(index)),
        shape=(n, d),
    )
    out.sort_indices()
    return out


# ---------------------------------------------------------------------------------------------
# The solvers' vector work (ilargi.models._solvers) on host vectors.


def two_loop(s, y, rho, order, g):
    """-H·g by the two-loop recursion (Nocedal & Wright, Alg. 7.4) over the pairs (s[i], y[i]), i
    in ``order`` newest first, ρ_i = 1 / s_iᵀy_i, H₀ = γI with γ = s_newᵀy_new / y_newᵀy_new.

    Dots and updates by one BLAS library (SciPy's ddot and daxpy: q += a·v in place, one pass
    where NumPy's a·v makes a temporary), so that the recursion never alternates two libraries'
    thread pools (NumPy's and SciPy's OpenBLAS in turn at 2 threads spin against each other, and a
    direction takes many times as long)."""
    q = np.negative(g, dtype=np.float64)
    alpha = {}
    for i in order:
        alpha[i] = rho[i] * ddot(s[i], q)
        q = daxpy(y[i], q, a=-alpha[i])
    if order:
        newest_y = y[order[0]]
        q *= 1.0 / (rho[order[0]] * ddot(newest_y, newest_y))
    for i in reversed(order):
        beta = rho[i] * ddot(y[i], q)
        q = daxpy(s[i], q, a=alpha[i] - beta)
    return q


def lbfgs_direction(s, y, rho, order, g):
    """-H·g by :func:`two_loop` with BLAS at every thread: beside the NumPy kernels no compiled
    pool waits for the cores, so this loop of BLAS calls alone may take them (a fit holds BLAS at
    one thread for the compiled kernels' sake; a wide multinomial fit's directions take about
    half the time at 2 threads). At one thread (a fit beside the background build of the compiled
    kernels), a long g runs :func:`blocked_two_loop`."""
    k = threads.get_num_threads()
    if k == 1 and g.shape[0] >= 2 * DIRECTION_BLOCK and order:
        with threads.threads(1):
            return blocked_two_loop(s, y, rho, order, g)
    with threads.threads(k):
        return two_loop(s, y, rho, order, g)


# Entries of q per block of blocked_two_loop: a block of q and of the two pair vectors it meets
# (3 × 128 KiB) stay in a core's L2 cache from one BLAS call to the next.
DIRECTION_BLOCK = 1 << 14


def blocked_two_loop(s, y, rho, order, g):
    """:func:`two_loop` with each step's update and the next step's dot in one pass over q, block
    by block (q's block is still in cache for the dot), as the compiled kernels fuse them: 2m + 1
    passes over q where the two-loop recursion makes 4m."""
    q = np.negative(g, dtype=np.float64)
    n = q.shape[0]
    blocks = [(lo, min(lo + DIRECTION_BLOCK, n)) for lo in range(0, n, DIRECTION_BLOCK)]

    def step(c, a, v, w):  # q = c·q + a·v; returns w·q
        dot = 0.0
        for lo, hi in blocks:
            part = q[lo:hi]
            if c != 1.0:
                part *= c
            if a != 0.0:
                daxpy(v[lo:hi], part, a=a)
            dot += ddot(w[lo:hi], part)
        return dot

    alpha = {}
    dot = ddot(s[order[0]], q)  # s_newest·q
    for t, i in enumerate(order):  # newest to oldest: α_i = ρ_i s_iᵀq, q -= α_i y_i
        alpha[i] = rho[i] * dot
        dot = step(1.0, -alpha[i], y[i], s[order[t + 1]] if t + 1 < len(order) else y[order[-1]])
    newest = order[0]
    gamma = 1.0 / (rho[newest] * ddot(y[newest], y[newest]))
    scale, dot = gamma, gamma * dot  # q ← γq folds into the next step; y_oldest·(γq)
    for t, i in enumerate(reversed(order)):  # oldest to newest: q += (α_i - ρ_i y_iᵀq) s_i
        beta = rho[i] * dot
        dot = step(scale, alpha[i] - beta, s[i], y[order[-t - 2]] if t + 1 < len(order) else s[i])
        scale = 1.0
    return q
