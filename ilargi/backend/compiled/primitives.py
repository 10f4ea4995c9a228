"""The two primitives of every rule, gather and segment-sum, and the pushes and cross blocks of
crossprod, on one indicator at a time.

:func:`gather` runs the plan kernel with one table and no fact block; :func:`segment_sum` and
:func:`pushed_sums` take block partials or the cached CSR of Iᵀ (:func:`transposed_order`),
whichever :func:`.launch.use_partials` picks; :func:`direct_cross` sums a cross block row by row.
:func:`stacked_rows` stacks several indicators' rows into the (G × n) index array that a
:class:`~.passes.PassPlan` and crossprod's fact pass (:func:`.products.gram_pushes`) share.
:class:`BlockAccumulator` assembles crossprod's sparse result from its blocks.
"""

import numpy as np
import scipy.sparse as sp

from .. import compiled, cpu
from ..cpu import bucket_rows, identity_gather
from .kernels import (
    buckets_kernel,
    buckets_sparse_kernel,
    counting_sort,
    cross_kernel,
    partials_kernel,
    pushed_partials_kernel,
    pushed_partials_sparse_kernel,
    scatter_block_kernel,
    scatter_block_rows,
    scatter_transposed_kernel,
    scores_kernel,
)
from .launch import (
    EMPTY_F,
    EMPTY_I,
    EMPTY_V,
    NO_FACT,
    block_bounds,
    c_float,
    csr_blocks,
    run_blocks,
    scratch,
    thread_count,
    use_partials,
)


def transposed_order(ind):
    """(indptr, order) of Iᵀ, cached on the indicator: the target rows order[indptr[j]:indptr[j+1]]
    take source row j, in increasing order (a counting sort, O(n))."""
    return ind.cached(
        "compiled_order", lambda: counting_sort(np.asarray(ind.rows, dtype=np.int64), ind.n_source)
    )


def _one_table(ind):
    """(R, Z-extension needed) of one indicator for the plan kernels: its rows as a (1, n) view;
    with absent rows, bucket rows (absent → n_source, the sink row appended to Z)."""
    if ind.n_absent:
        return bucket_rows(ind)[None, :], True
    return np.asarray(ind.rows)[None, :], False


def gather(Z, ind, out=None):
    """g(Z, rows): row i is Z[rows[i]], 0 where rows[i] = -1 (into out if given); as cpu.gather."""
    if ind.is_identity:
        return identity_gather(Z, out)
    return _gather_one(Z, ind, out, accumulate=False)


def gather_add(out, Z, ind):
    """out += g(Z, rows), allocating out on first use (out=None); as cpu.gather_add."""
    if out is None:
        return gather(Z, ind)
    if ind.is_identity:
        out += Z
        return out
    return _gather_one(Z, ind, out, accumulate=True)


def _gather_one(Z, ind, out, accumulate):
    R, sink = _one_table(ind)
    dtype = Z.dtype if out is None else out.dtype
    Z = np.ascontiguousarray(Z, dtype=dtype)
    if sink:
        Z = np.concatenate([Z, np.zeros((1,) + Z.shape[1:], dtype=dtype)])
    if out is None:
        out = np.empty((ind.n_rows,) + Z.shape[1:], dtype=dtype)
    target = out
    if not out.flags.c_contiguous:
        target = np.ascontiguousarray(out)
    if Z.ndim == 2 and Z.shape[1] == 1:  # the 1-D loops vectorize, the 2-D ones do not
        Z, target = Z.reshape(-1), target.reshape(-1)
    width = Z.shape[1:]
    nothing = np.zeros((0,) + width)  # the plan kernel with one table, no fact block, c = 0
    scores_kernel(
        target,
        Z,
        R,
        NO_FACT,
        nothing,
        nothing,
        np.zeros(width or (1,)),
        min(thread_count(), max(ind.n_rows, 1)),
        accumulate,
    )
    if target.base is not out and target is not out:
        out[...] = target.reshape(out.shape)
    return out


def segment_sum(Y, ind):
    """s(Y, rows, n_p) = Iᵀ·Y (float64): row j sums the rows i of Y with rows[i] = j; as
    cpu.segment_sum. Block partials or the cached CSR of Iᵀ, whichever use_partials picks."""
    if ind.is_identity:
        return Y
    Y = np.ascontiguousarray(Y)
    if Y.ndim == 2 and Y.shape[1] == 1:
        return segment_sum(Y.reshape(-1), ind).reshape(-1, 1)
    nb = min(thread_count(), max(ind.n_rows, 1))
    out = np.empty((ind.n_source,) + Y.shape[1:])
    if use_partials(nb, ind.n_source, ind.n_rows, 1, int(np.prod(Y.shape[1:]))):
        parts = scratch((nb, ind.n_source + 1) + Y.shape[1:])
        partials_kernel(Y, bucket_rows(ind)[None, :], parts, out)
    else:
        indptr, order = transposed_order(ind)
        buckets_kernel(Y, EMPTY_I, EMPTY_V, indptr, order, block_bounds(indptr, nb), out)
    return out


def pushed_sums(S, source, target, w=None):
    """I_targetᵀ·diag(w)·I_source·S as a dense target.n_source × d float64 array (the cross blocks
    of crossprod, see cpu.pushed_sums): the target rows in order into block partials, or, where
    those would be large, the target's buckets in parallel through the CSR of I_targetᵀ."""
    src = EMPTY_I if source.is_identity else np.asarray(source.rows)
    w = EMPTY_V if w is None else c_float(w)
    nb = min(thread_count(), max(target.n_rows, 1))
    d = S.shape[1]
    out = np.empty((target.n_source, d))
    sparse = sp.issparse(S)
    if sparse:
        S = sp.csr_array(S)
        S = (S.indptr.astype(np.int64, copy=False), S.indices, np.asarray(S.data, dtype=np.float64))
    else:
        S = (np.ascontiguousarray(S),)
    if use_partials(nb, target.n_source, target.n_rows, 1, d):
        parts = scratch((nb, target.n_source + 1, d))
        kernel = pushed_partials_sparse_kernel if sparse else pushed_partials_kernel
        kernel(*S, src, w, bucket_rows(target), parts, out)
    else:
        indptr, order = transposed_order(target)
        kernel = buckets_sparse_kernel if sparse else buckets_kernel
        kernel(*S, src, w, indptr, order, block_bounds(indptr, nb), out)
    return out


_NO_PTR, _NO_COLUMNS = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)


def _side(S):
    """A source as cross_kernel reads it: (dense, indptr, indices, data), the unused half empty."""
    if sp.issparse(S):
        S = sp.csr_array(S)
        return (
            EMPTY_F,
            S.indptr.astype(np.int64, copy=False),
            S.indices.astype(np.int32, copy=False),
            c_float(S.data),
        )
    return np.ascontiguousarray(S, dtype=np.float64), _NO_PTR, _NO_COLUMNS, EMPTY_V


def direct_cross(S_p, rows_p, S_q, rows_q, w=None, n=None):
    """Σ_i w_i·S_p[rows_p[i]]ᵀ·S_q[rows_q[i]] (d_p × d_q, float64) over n pass rows: a cross
    block of crossprod, S_pᵀ·I_pᵀ·diag(w)·I_q·S_q, summed row by row (rows None: row i itself;
    -1: absent, skipped). Each row block keeps its own small d_p × d_q partial, so narrow rows
    cost n·(entries of a row of S_p)·(entries of a row of S_q) and no n_q-long scratch."""
    rows_p = EMPTY_I if rows_p is None else np.asarray(rows_p, dtype=np.intp)
    rows_q = EMPTY_I if rows_q is None else np.asarray(rows_q, dtype=np.intp)
    n = max(rows_p.shape[0], rows_q.shape[0]) if n is None else n
    w = EMPTY_V if w is None else c_float(w)
    nb = min(thread_count(), max(n // compiled.CROSS_ROWS, 1))
    out = np.empty((S_p.shape[1], S_q.shape[1]))
    cross_kernel(_side(S_p), rows_p, _side(S_q), rows_q, w, n, np.empty((nb,) + out.shape), out)
    return out


def stacked_rows(targets):
    """(R, offsets): the targets' bucket rows stacked (G × n, table g's rows offset by offsets[g],
    absent rows → the sink row offsets[-1]), built once per tuple of indicators (crossprod's
    fact pass and a matrix's PassPlan share it: G × 8 bytes per target row)."""
    if len(targets) == 1:
        return bucket_rows(targets[0])[None, :], [0, targets[0].n_source]

    def build():
        offsets = [0] + np.cumsum([ind.n_source for ind in targets], dtype=np.int64).tolist()
        R = np.empty((len(targets), targets[0].n_rows), dtype=np.intp)
        for g, ind in enumerate(targets):
            rows = np.asarray(ind.rows)
            np.add(rows, offsets[g], out=R[g])
            if ind.n_absent:
                R[g][rows < 0] = offsets[-1]
        return R, offsets

    return targets[0].cached("compiled_stacked", build, owner=tuple(targets[1:]))


class BlockAccumulator(cpu.BlockAccumulator):
    """As :class:`ilargi.backend.cpu.BlockAccumulator`, the sparse result assembled by compiled
    kernels: a block with unsorted rows (SciPy's products leave them so) sorted by
    :func:`sort_rows`, each block's rows copied in parallel (one thread for a small block), and a
    transposed block (CSC, as crossprod's mirrored blocks and SciPy's Grams are) copied from the
    CSR it transposes, never converted. The entries are the same as cpu's; NumPy's scatters and
    SciPy's conversions and sorts of the blocks, all on one thread, were about half of a sparse
    crossprod's time."""

    def add(self, rows, cols, block):
        """Add ``block`` at target rows ``rows`` and columns ``cols``."""
        if not self.sparse:
            return super().add(rows, cols, block)
        transposed = sp.issparse(block) and block.format == "csc"
        csr = sp.csr_array(block.T if transposed else block)  # CSC.T is a CSR: no copy
        if not csr.nnz:
            return None
        # fresh copies: read-only index arrays (a part's columns) would be kernel types of their own
        rows, cols = np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)
        if cpu.repeats(rows):
            self.add_leftover(rows, cols, block)
            return None
        csr = csr.astype(np.float64, copy=False)
        if not transposed and not csr.has_sorted_indices:  # a transposed one's rows come sorted
            csr = sort_rows(csr.copy())  # the block may be a caller's
        self.blocks.append((rows, cols, csr, transposed))
        return None

    def result(self):
        """The d × d sum: an ndarray, or CSR (canonical) for a sparse accumulator."""
        if not self.sparse:
            return self.dense
        blocks = sorted(self.blocks, key=cpu.first_column)
        # entries per target row of each block: a transposed block's are its columns' counts
        counts = [
            np.bincount(csr.indices, minlength=rows.size) if t else np.diff(csr.indptr)
            for rows, _, csr, t in blocks
        ]
        indptr, indices, data = self.allocate(
            [(rows, count) for (rows, *_), count in zip(blocks, counts)]
        )
        filled = indptr[:-1].copy()  # the next free place of each row
        for (rows, cols, csr, transposed), count in zip(blocks, counts):
            arrays = (csr.indptr, csr.indices, csr.data, rows, cols, filled, indices, data)
            if csr.nnz < compiled.SMALL_CSR:
                if transposed:
                    scatter_transposed_kernel(*arrays, np.array([0, rows.size]))
                else:
                    scatter_block_rows(*arrays, 0, csr.shape[0])
            elif transposed:
                scatter_transposed_kernel(*arrays, _count_bounds(count))
            else:
                scatter_block_kernel(*arrays, csr_blocks(csr))
        out = sp.csr_array((data, indices, indptr.astype(indices.dtype)), shape=(self.d, self.d))
        if not out.has_canonical_format:  # blocks sharing cells, or interleaved columns
            out.sum_duplicates()
        return self.with_leftover(out)


def _count_bounds(count):
    """Bounds of the thread count's ranges of ``count``'s positions, about equal in its sum."""
    indptr = np.zeros(count.size + 1, dtype=np.int64)
    np.cumsum(count, out=indptr[1:])
    return block_bounds(indptr, min(thread_count(), max(count.size, 1)))


def sort_rows(S):
    """The CSR S with each row's entries sorted by column, in place: SciPy's sort on views of
    blocks of rows of about equal entries, one a Python thread (it releases the GIL; a compiled
    sort of each row measured several times slower than SciPy's)."""
    if S.nnz >= compiled.SMALL_CSR:
        bounds = csr_blocks(S)
        run_blocks(
            lambda lo, hi: _rows_view(S, lo, hi).sort_indices(), list(zip(bounds[:-1], bounds[1:]))
        )
    S.sort_indices()  # a check only where the blocks were sorted
    return S


def _rows_view(S, lo, hi):
    """The rows lo:hi of a CSR S as a CSR sharing S's indices and values (set as attributes:
    SciPy's constructor may convert the index arrays, copying them)."""
    a, b = S.indptr[lo], S.indptr[hi]
    view = sp.csr_array((hi - lo, S.shape[1]), dtype=S.dtype)
    view.indptr = (S.indptr[lo : hi + 1] - a).astype(S.indices.dtype)
    view.indices, view.data = S.indices[a:b], S.data[a:b]
    return view
