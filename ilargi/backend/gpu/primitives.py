"""The GPU twins of the kernels of :mod:`ilargi.backend.cpu`, one function each.

Gathers and segment sums run as CUDA kernels (float64 accumulation, no bounds checks: indices were
validated once); products with large dense sources go to cuBLAS, sparse ones to cuSPARSE.
"""

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np

from ..cpu import identity_gather
from . import flags
from .arrays import (
    as_csr,
    asnumpy,
    coo_to_csr,
    entry_rows,
    index_vector,
    indicator_csr,
    indicator_pieces,
    is_sparse,
    rows32,
    segments,
    to_dense,
    transposed_indicator,
)
from .device import check_memory, contiguous, device_index, launch, ones, width

# ---------------------------------------------------------------------------------------------
# The two primitives of every rule: gather g(Z, rows) and segment-sum s(Y, rows, n_p).


def gather(Z, ind, out=None):
    """g(Z, rows): row i of the result is Z[rows[i]], or 0 where rows[i] = -1 (into out if given)."""
    if ind.is_identity:
        return identity_gather(Z, out)
    Z = contiguous(Z)
    if out is None:
        out = cp.empty((ind.n_rows,) + Z.shape[1:], dtype=Z.dtype)
    if Z.shape[0] == 0:
        out.fill(0)
        return out
    m = width(Z)
    launch(
        "ilargi_gather",
        Z.dtype,
        ind.n_rows * m,
        (Z, rows32(ind), np.int64(ind.n_rows), np.int32(m), out, np.int32(0)),
    )
    return out


def gather_add(out, Z, ind):
    """out += g(Z, rows), allocating out on first use (out=None); returns the (new) out."""
    if out is None:
        return gather(Z, ind) if not ind.is_identity else Z
    if ind.is_identity:
        out += Z
        return out
    out = contiguous(out)
    Z = contiguous(Z, out.dtype)
    if Z.shape[0] == 0:
        return out
    m = width(Z)
    launch(
        "ilargi_gather",
        out.dtype,
        ind.n_rows * m,
        (Z, rows32(ind), np.int64(ind.n_rows), np.int32(m), out, np.int32(1)),
    )
    return out


def segment_sum(Y, ind):
    """s(Y, rows, n_p) = Iᵀ·Y, accumulated in float64 (float32 Y gives a float32 result)."""
    if ind.is_identity:
        return Y
    Y = contiguous(Y)
    shape = (ind.n_source,) + Y.shape[1:]
    method = flags.segment_sum_method()
    if method == "csr":
        out = transposed_indicator(ind) @ Y
    elif method == "atomic":
        out = cp.zeros(shape, dtype=cp.float64)
        launch(
            "ilargi_segment_sum_atomic",
            Y.dtype,
            ind.n_rows * width(Y),
            (Y, rows32(ind), np.int64(ind.n_rows), np.int32(width(Y)), out),
        )
    else:
        out = indicator_pieces(ind).run(
            contiguous(Y, np.float64), width(Y), cp.empty(shape, dtype=cp.float64)
        )
    return out.astype(Y.dtype, copy=False)


def _scatter_add(values, index, size):
    """bincount(index, weights=values, minlength=size) without bincount's device syncs."""
    out = cp.zeros(size, dtype=cp.float64)
    values = contiguous(values)
    index = cp.ascontiguousarray(index, dtype=cp.int32)
    launch(
        "ilargi_segment_sum_atomic",
        values.dtype,
        index.size,
        (values, index, np.int64(index.size), np.int32(1), out),
    )
    return out


def counts(ind):
    """cnt_p: how many target rows take each source row (float64)."""
    if ind.is_identity:
        return cp.ones(ind.n_rows)
    indptr, _ = segments(ind)
    return cp.diff(indptr).astype(cp.float64)


def cooccurrence(first, second, w=None):
    """C = I_pᵀ·diag(w)·I_q as cupyx CSR (n_p × n_q), or None if no target row takes both.

    The pattern is built once per pair of indicators; each call scatters the weights into it.
    """
    both, inverse, indices, indptr, pattern_ones = first.cached(
        "gpu_cooccurrence", lambda: _cooccurrence_pattern(first, second), owner=second
    )
    if both is None:
        return None
    data = pattern_ones if w is None else _scatter_add(cp.asarray(w)[both], inverse, indices.size)
    return csp.csr_matrix((data, indices, indptr), shape=(first.n_source, second.n_source))


def _cooccurrence_pattern(first, second):
    rows_p = index_vector(first).astype(cp.int64)
    rows_q = index_vector(second).astype(cp.int64)
    both = cp.flatnonzero((rows_p >= 0) & (rows_q >= 0))
    if both.size == 0:
        return None, None, None, None, None
    keys, inverse = cp.unique(rows_p[both] * second.n_source + rows_q[both], return_inverse=True)
    inverse = inverse.ravel().astype(cp.int32)
    row, col = keys // second.n_source, keys % second.n_source
    indptr = cp.concatenate(
        [cp.zeros(1, dtype=cp.int64), cp.cumsum(cp.bincount(row, minlength=first.n_source))]
    )
    pattern_ones = _scatter_add(cp.ones(both.size), inverse, keys.size)
    return both, inverse, col.astype(cp.int32), indptr.astype(cp.int32), pattern_ones


# ---------------------------------------------------------------------------------------------
# Small helpers on sources (dense CuPy array or cupyx CSR).


def _csr_parts(S):
    """(indptr, indices) of a CSR as int32, the form the kernels read."""
    return S.indptr.astype(cp.int32, copy=False), S.indices.astype(cp.int32, copy=False)


def row_sums(S):
    """Per-row sums as S·1 (a GEMV/SpMV, faster than CuPy's sum over the rows of a C-order
    matrix), accumulated in float64."""
    if csp.issparse(S):
        return S @ ones(S.shape[1], np.float64)
    if S.dtype != np.float64:
        return S.sum(axis=1, dtype=cp.float64)  # float32: accumulate in float64
    return S @ ones(S.shape[1], np.float64)


def column_sums(S):
    """Per-column sums as Sᵀ·1 (a GEMV/SpMV), accumulated in float64."""
    if csp.issparse(S):
        return S.T @ ones(S.shape[0], np.float64)
    if S.dtype != np.float64:
        return S.sum(axis=0, dtype=cp.float64)
    return S.T @ ones(S.shape[0], np.float64)


def column_min_max(S):
    """Per-column (min, max) of S, implicit zeros of a sparse S included."""
    if not csp.issparse(S):
        return S.min(axis=0), S.max(axis=0)
    columns = S.T.tocsr()  # the columns of S as rows
    indptr, _ = _csr_parts(columns)
    n_columns, n_rows = columns.shape
    low, high = cp.empty(n_columns), cp.empty(n_columns)
    launch(
        "ilargi_csr_row_extrema",
        np.float64,
        n_columns,
        (
            indptr,
            contiguous(columns.data, np.float64),
            np.int32(n_columns),
            np.int32(n_rows),
            low,
            high,
        ),
    )
    return low, high


def zero_rows(S, mask):
    """A copy of S with the rows in ``mask`` set to 0 (sparse: their entries dropped)."""
    mask = cp.asarray(mask)
    if csp.issparse(S):
        row = entry_rows(S)
        kept = cp.flatnonzero(~mask[row])
        return coo_to_csr(S.data[kept], row[kept], S.indices[kept], S.shape)
    out = S.copy()
    out[mask] = 0
    return out


def select_rows(S, mask):
    """The rows of S where ``mask`` holds (S itself if it holds everywhere)."""
    mask = cp.asarray(mask)
    return S if bool(mask.all()) else S[cp.flatnonzero(mask)]


def select_columns(S, idx):
    """The columns ``idx`` of S (S itself for all columns in order)."""
    idx = np.asarray(asnumpy(idx))
    if idx.size == S.shape[1] and np.array_equal(idx, np.arange(S.shape[1])):
        return S
    return S[:, cp.asarray(idx)]


def _with_data(S, data):
    return csp.csr_matrix((data, S.indices, S.indptr), shape=S.shape)


def scale_columns(S, v):
    """S·diag(v); a sparse S stays sparse (CSR)."""
    v = cp.asarray(v)
    if csp.issparse(S):
        S = S.tocsr()
        return _with_data(S, S.data * v[S.indices])
    return S * v


def _scale_rows(S, c):
    """diag(c)·S for a CSR S."""
    return _with_data(S, S.data * c[entry_rows(S)])


def product(S, X, out=None):
    """S·X for a source S and a dense operand X (cuBLAS or cuSPARSE), into out if given."""
    if out is None:
        return S @ X
    out[...] = S @ X
    return out


def transposed_product(S, Y):
    """Sᵀ·Y for a source S and a dense Y of its rows (cuBLAS or cuSPARSE)."""
    return S.T @ Y


def scale_rows(S, v):
    """diag(v)·S; a sparse S stays sparse (CSR)."""
    v = cp.asarray(v)
    return _scale_rows(as_csr(S), v) if is_sparse(S) else S * v[:, None]


def sparse_product(A, B):
    """A·B of two sparse matrices as CSR, in their common dtype."""
    A, B = A.tocsr(), B.tocsr()
    dtype = np.result_type(A.dtype, B.dtype)
    return (A if A.dtype == dtype else A.astype(dtype)) @ (
        B if B.dtype == dtype else B.astype(dtype)
    )


def weighted_gram(S, c=None):
    """Sᵀ·diag(c)·S (no test of c's sign: that would synchronize the device)."""
    if csp.issparse(S):
        return sparse_product(S.T, S if c is None else _scale_rows(S, c))
    if c is None:
        return S.T @ S
    return (S * c.astype(S.dtype, copy=False)[:, None]).T @ S


class BlockAccumulator:
    """Sums d_p × d_q blocks into a d × d result at (rows, cols), dense or sparse."""

    def __init__(self, d, sparse):
        self.d, self.sparse = d, sparse
        self.triplets = [] if sparse else None
        if not sparse:
            check_memory(d * d * 8, f"crossprod (a dense {d} × {d} result)")
        self.dense = None if sparse else cp.zeros((d, d))

    def add(self, rows, cols, block):
        """Add ``block`` at target rows ``rows`` and columns ``cols`` (host index vectors)."""
        if self.sparse:
            rows, cols = device_index(rows), device_index(cols)
            block = (block if csp.issparse(block) else csp.csr_matrix(block)).tocoo()
            self.triplets.append((block.data, rows[block.row], cols[block.col]))
            return
        rows, cols = _as_slice(rows), _as_slice(cols)
        if isinstance(rows, slice) and isinstance(cols, slice):
            self.dense[rows, cols] += to_dense(block)  # a view: one launch, no gather/scatter
        else:
            self.dense[cp.ix_(_as_index(rows), _as_index(cols))] += to_dense(block)

    def result(self):
        """The d × d sum: a CuPy array, or cupyx CSR for a sparse accumulator."""
        if not self.sparse:
            return self.dense
        data, r, c = (cp.concatenate(x) for x in zip(*self.triplets))
        return coo_to_csr(data, r, c, (self.d, self.d))


def _as_slice(cols):
    """A host column mapping as a slice when its columns are contiguous, else as given."""
    cols = np.asarray(cols)
    if cols.size and cols[-1] - cols[0] == cols.size - 1 and bool((np.diff(cols) == 1).all()):
        return slice(int(cols[0]), int(cols[-1]) + 1)
    return cols


def _as_index(cols):
    return cp.arange(cols.start, cols.stop) if isinstance(cols, slice) else device_index(cols)


def map_source(S, f, scale, shift, cols):
    """The part of f(T) that S feeds: f(S·a_p + b_p) on stored values only (see cpu.map_source)."""
    cols = device_index(cols)
    if csp.issparse(S):
        j = S.indices
        return _with_data(S, f(S.data * scale[j] + shift[j], cols[j]))
    return f(S * scale + shift, cols[None, :])


def row_min(S, scale, shift):
    """Per-row min of S·diag(a_p) + b_p over all d_p columns (implicit zeros count as b_p)."""
    scale, shift = cp.asarray(scale, dtype=cp.float64), cp.asarray(shift, dtype=cp.float64)
    if not csp.issparse(S):
        return (S * scale + shift).min(axis=1)
    n_rows, n_columns = S.shape
    indptr, indices = _csr_parts(S)
    out = cp.empty(n_rows)
    launch(
        "ilargi_csr_row_min_affine",
        np.float64,
        n_rows,
        (
            indptr,
            indices,
            contiguous(S.data, np.float64),
            contiguous(scale),
            contiguous(shift),
            cp.argsort(shift).astype(cp.int32),
            np.int32(n_rows),
            np.int32(n_columns),
            out,
        ),
    )
    return out


def square_excess(S, scale, shift, weights=None, chunk_cells=2**24):
    """Σ over the cells of a part of (a·s + b)² − b² = a·s·(a·s + 2b), per source row
    (weights=None) or per column with source row r counted weights[r] times (see cpu).

    Dense sources are read in row chunks, so no copy of the whole source is made.
    """
    scale, shift = cp.asarray(scale, dtype=cp.float64), cp.asarray(shift, dtype=cp.float64)
    if csp.issparse(S):
        row, j = entry_rows(S), S.indices
        v = S.data * scale[j]
        excess = v * (v + 2 * shift[j])
        if weights is None:
            return _scatter_add(excess, row, S.shape[0])
        return _scatter_add(excess * cp.asarray(weights)[row], j, S.shape[1])
    out = cp.zeros(S.shape[0] if weights is None else S.shape[1])
    step = max(1, chunk_cells // max(S.shape[1], 1))
    for start in range(0, S.shape[0], step):
        v = S[start : start + step] * scale
        excess = v * (v + 2 * shift)
        if weights is None:
            out[start : start + step] = excess.sum(axis=1)
        else:
            out += cp.asarray(weights, dtype=cp.float64)[start : start + step] @ excess
    return out


# ---------------------------------------------------------------------------------------------
# Materialization (only when a plan, a test or the user asks for the joined table).


def materialize_dense(parts, n, d, dtype):
    """The joined table T₀ as a dense n × d CuPy array (memory checked first)."""
    check_memory(n * d * np.dtype(dtype).itemsize, f"materializing a dense {n} × {d} table")
    out = cp.zeros((n, d), dtype=dtype)
    for part in parts:
        S, ind = part.source, part.indicator
        if csp.issparse(S):
            block = (S if ind.is_identity else indicator_csr(ind) @ S).toarray()
        else:
            block = gather(S, ind)
        out[:, device_index(part.cols)] += block
    return out


def materialize_sparse(parts, n, d):
    """The joined table T₀ as an n × d cupyx CSR (a dense source's zeros are not stored; memory
    checked first)."""
    sources = [S if csp.issparse(S) else csp.csr_matrix(S) for S in (p.source for p in parts)]
    # Each present target row copies its source row: nnz(S_p) · n_present / n_p entries on average.
    entries = sum(
        S.nnz * part.indicator.n_present / max(S.shape[0], 1) for part, S in zip(parts, sources)
    )
    check_memory(int(entries * 16 + n * 4) * 2, f"materializing a sparse {n} × {d} table")
    data, rows, cols = [], [], []
    for part, S in zip(parts, sources):
        ind = part.indicator
        block = (S if ind.is_identity else indicator_csr(ind) @ S).tocoo()
        data.append(block.data)
        rows.append(block.row)
        cols.append(device_index(part.cols)[block.col])
    return coo_to_csr(cp.concatenate(data), cp.concatenate(rows), cp.concatenate(cols), (n, d))
