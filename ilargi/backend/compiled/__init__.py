"""Compiled, multi-core CPU kernels (Numba) for the factorized passes over the target rows.

The factorized work is gathers g(U, rows) and segment-sums s(Y, rows, n_p) over the n target rows
(``docs/design.rst``, "Performance principles"); NumPy runs each on one core and one operator at a time. Here every pass is a
``prange`` over B static, contiguous row blocks (B = the thread count, :mod:`.threads`):

* **Stacked tables** (:class:`PassPlan`, built once per matrix): the G gathered tables' per-row
  values live in one array U of ``total + 1`` rows (table g at ``offsets[g]``), and one (G, n)
  index array R says which row of U each target row takes, ``total`` (a zero *sink* row) where the
  table is absent. So a pass has no branch and no Python loop: Σ_g U[R[g, i]] gathers every table,
  B[R[g, i]] += r_i segment-sums into all of them (the sink row collects the absent rows' values).
* **Segment sums without atomics**: each block adds into a private partial (``partials``); the
  partials are then summed in block order. Where B partials would cost more than the pass (many
  threads, large tables: B·(n_out + 1) > PARTIALS_RATIO·G·n, or over PARTIALS_BYTES), the cached
  CSR of Iᵀ is used instead (``buckets``): output rows in parallel, the target rows of each in
  increasing order.
* **Fused passes** read each fact row once per training iteration: scores from the gathered
  tables, the fact block(s) and a constant; a link (logistic, softmax, linear weights for
  ``gramvec``, k-means assignment) gives the residual; its segment-sums into every table, the
  fact blocks' transposed products and the residual's sum come out of the same pass.
* **Determinism**: blocks depend only on (n, B) and partials are summed in block order, so a
  fixed thread count gives bit-identical results; other thread counts agree to rounding (the
  ``buckets`` route is bit-identical across thread counts too).

The per-row work sits in small serial ``@njit`` routines that the parallel drivers call per block:
Numba compiles a ``prange`` body 2-3x slower than the same loop in a function of its own, and a
1-D loop over rows vectorizes where a 2-D loop with an inner column loop of length 1 does not
(5x), so each routine has a 1-D body (m = 1) and a 2-D body (pruned at compile time on ``ndim``).

The jitted code is in :mod:`.kernels` (one file, see there why); kernels are compiled on first use
and cached on disk (``cache=True``): in ``__pycache__`` next to ``kernels.py``, or, where the
package folder is read-only, in the user's cache folder (~/.cache/numba), or in
``NUMBA_CACHE_DIR`` if set. The OpenMP threading layer (GNU) kills a forked child that runs a
parallel kernel after its parent did; :func:`usable` says False in such a child, where callers use
the NumPy kernels of :mod:`.cpu`.
"""
import os
import threading
from collections import namedtuple
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .. import cpu, links, threads
from . import build
from ..cpu import bucket_rows
from .kernels import (CHUNK, WIDE, blas_product_kernel, blas_transposed_kernel, buckets_kernel,
                      buckets_sparse_kernel, combine_dot_kernel, counting_sort, cross_kernel,
                      csr_product_kernel, csr_product_rows, csr_square_excess_kernel,
                      csr_square_excess_rows, csr_transposed_kernel, csr_transposed_rows,
                      dense_csr_kernel, dense_nonzeros_kernel, gram_kernel, gram_pushes_kernel,
                      gram_pushes_owned_kernel, gramvec_kernel, join_csr_kernel,
                      join_csr_tiles_kernel, join_dense_csr_kernel, join_dense_kernel,
                      join_lengths_kernel, kmeans_kernel, logistic_kernel, logistic_link_kernel,
                      partials_kernel, product_kernel, pushed_partials_kernel,
                      pushed_partials_sparse_kernel, reduce_blocks, scores_kernel, softmax_kernel,
                      softmax_link_kernel, transposed_kernel, transposed_product_kernel)

__all__ = ["PassPlan", "gather", "gather_add", "segment_sum", "transposed_order", "pushed_sums",
           "product", "transposed_product", "column_sums", "square_excess", "weighted_gram",
           "gram_pushes", "direct_cross", "logistic_pass", "softmax_pass", "gramvec_pass",
           "kmeans_pass", "BinaryLink", "MultinomialLink", "lbfgs_direction", "materialize_dense",
           "materialize_sparse", "one_pool", "usable",
           "PARTIALS_RATIO", "CHUNK"]

# The backend seam hands this module out for NumPy arrays (ilargi.backend.backend_of): it is the
# CPU backend, and every kernel it does not compile is the NumPy/SciPy one of :mod:`..cpu`.
name = cpu.name
xp = np


def __getattr__(attr):
    return getattr(cpu, attr)


# Block partials while B·(n_out + 1) <= PARTIALS_RATIO·G·n (and they fit in PARTIALS_BYTES), else
# buckets: per thread, zeroing and reducing the partials streams ~2·n_out values, while the pass
# adds G·n / B values at random places (several times dearer each), and the buckets route is a
# second random pass over the residuals.
PARTIALS_RATIO = 2.0
PARTIALS_BYTES = 1 << 28
CROSS_ROWS = 1 << 14  # pass rows per thread of direct_cross at least (a launch costs ~10-50 us)
_EMPTY_F = np.empty((0, 0))
_EMPTY_I = np.empty(0, dtype=np.intp)
_EMPTY_V = np.empty(0)

# ---------------------------------------------------------------------------------------------
# Fork safety (see the module docstring).

_launched_in = None  # pid of the process whose parallel kernels started the OpenMP threads


def _forked():
    global _launched_in
    if _launched_in is None:
        _launched_in = os.getpid()
    return _launched_in != os.getpid()


def usable():
    """False in a forked child whose parent already ran parallel kernels on GNU OpenMP."""
    if _launched_in is None or _launched_in == os.getpid():
        return True
    from numba import threading_layer
    try:
        return threading_layer() != "omp"
    except ValueError:  # no parallel launch yet in this process
        return True


def one_pool():
    """The context a whole operator or fit runs in: BLAS held at one thread, so that its calls
    (on the calling thread, or one per row block on the kernels' threads) never wake OpenBLAS's
    own pool between the compiled kernels' launches (see :mod:`ilargi.backend.threads`)."""
    return threads.blas_held()


def _threads():
    """The thread count (= blocks) for the next launch, applied to this Python thread's Numba."""
    if _forked() and not usable():
        raise RuntimeError("compiled kernels cannot run in a process forked after its parent used "
                           "the OpenMP threading layer; use the 'spawn' or 'forkserver' start method "
                           "or the NumPy backend")
    return threads.apply()


# ---------------------------------------------------------------------------------------------
# Python side: structures built once, scratch reused, and the calls the rules make.

_SCRATCH = threading.local()


def _scratch(shape):
    """A per-thread float64 buffer for block partials (zeroed by the kernels): a fresh one in
    every iteration would be page-faulted in each time."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.shape != shape:
        buffer = _SCRATCH.buffer = np.empty(shape)
    return buffer


def _partials(nb, n_out, n, groups=1, width=1):
    """Block partials (else buckets) for segment-sums of n rows (``width`` columns) into ``groups``
    tables of n_out stacked rows, with nb blocks."""
    size = nb * (n_out + 1)
    return nb == 1 or (size <= PARTIALS_RATIO * groups * n and 8 * size * width <= PARTIALS_BYTES)


def _bounds(indptr, nb):
    """Row ranges (nb + 1 bounds) of nb blocks of a CSR (the buckets route's Iᵀ, a source) holding
    about equal numbers of entries."""
    n_out = indptr.shape[0] - 1
    bounds = np.searchsorted(indptr, np.arange(nb + 1) * (int(indptr[-1]) // nb), side="left")
    bounds[0], bounds[-1] = 0, n_out  # trailing empty output rows belong to the last block
    return np.maximum.accumulate(np.minimum(bounds, n_out)).astype(np.int64)


def _csr_blocks(S):
    """Row blocks of a CSR S for the threads, about equal in entries (S stacked from tables of
    different densities would load one thread with most of them if split by rows)."""
    return _bounds(S.indptr, min(_threads(), max(S.shape[0], 1)))


def _c_float(a):
    return np.ascontiguousarray(a, dtype=np.float64)


def _up4(k):
    return (k + 3) // 4 * 4


def _grad_parts(nb, d, width):
    """Block partials of Fᵀ·r for a dense block of d columns and an r of ``width`` (nb × d [× m])."""
    return np.empty((nb, d) + width)


def _grad_sum(parts):
    """Fᵀ·r (d [× m]) from its block partials, summed in block order."""
    return np.add.reduce(parts, axis=0)


def transposed_order(ind):
    """(indptr, order) of Iᵀ, cached on the indicator: the target rows order[indptr[j]:indptr[j+1]]
    take source row j, in increasing order (a counting sort, O(n))."""
    return ind.cached("compiled_order",
                      lambda: counting_sort(np.asarray(ind.rows, dtype=np.int64), ind.n_source))


def _one_table(ind):
    """(R, Z-extension needed) of one indicator for the plan kernels: its rows as a (1, n) view;
    with absent rows, bucket rows (absent → n_source, the sink row appended to Z)."""
    if ind.n_absent:
        return bucket_rows(ind)[None, :], True
    return np.asarray(ind.rows)[None, :], False


_NO_ROWS = np.empty(0, np.int32)
_NO_ROWS64 = np.empty(0, np.int64)
_NO_FACT = (_EMPTY_F, np.empty(0, np.int64), np.empty(0, np.int64), _EMPTY_V, _NO_ROWS)
# A CSR fact block of at most this many entries a row on average, rows of varying length, is read
# entry by entry (each entry's row kept, int32): a loop per row would mispredict its branch on
# most rows (Hamlet Flights' fact block, 66k rows of 0-7 entries, 55k entries: 0.39 → 0.07 ms).
ENTRY_BY_ENTRY = 2


def gather(Z, ind, out=None):
    """g(Z, rows): row i is Z[rows[i]], 0 where rows[i] = -1 (into out if given); as cpu.gather."""
    if ind.is_identity:
        if out is None:
            return Z
        out[...] = Z
        return out
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
    scores_kernel(target, Z, R, _NO_FACT, nothing, nothing, np.zeros(width or (1,)),
                   min(_threads(), max(ind.n_rows, 1)), accumulate)
    if target.base is not out and target is not out:
        out[...] = target.reshape(out.shape)
    return out


def segment_sum(Y, ind):
    """s(Y, rows, n_p) = Iᵀ·Y (float64): row j sums the rows i of Y with rows[i] = j; as
    cpu.segment_sum. Block partials or the cached CSR of Iᵀ, whichever _partials picks."""
    if ind.is_identity:
        return Y
    Y = np.ascontiguousarray(Y)
    if Y.ndim == 2 and Y.shape[1] == 1:
        return segment_sum(Y.reshape(-1), ind).reshape(-1, 1)
    nb = min(_threads(), max(ind.n_rows, 1))
    out = np.empty((ind.n_source,) + Y.shape[1:])
    if _partials(nb, ind.n_source, ind.n_rows, 1, int(np.prod(Y.shape[1:]))):
        parts = _scratch((nb, ind.n_source + 1) + Y.shape[1:])
        partials_kernel(Y, bucket_rows(ind)[None, :], parts, out)
    else:
        indptr, order = transposed_order(ind)
        buckets_kernel(Y, _EMPTY_I, _EMPTY_V, indptr, order, _bounds(indptr, nb), out)
    return out


def pushed_sums(S, source, target, w=None):
    """I_targetᵀ·diag(w)·I_source·S as a dense target.n_source × d float64 array (the cross blocks
    of crossprod, see cpu.pushed_sums): the target rows in order into block partials, or, where
    those would be large, the target's buckets in parallel through the CSR of I_targetᵀ."""
    src = _EMPTY_I if source.is_identity else np.asarray(source.rows)
    w = _EMPTY_V if w is None else _c_float(w)
    nb = min(_threads(), max(target.n_rows, 1))
    d = S.shape[1]
    out = np.empty((target.n_source, d))
    sparse = sp.issparse(S)
    if sparse:
        S = sp.csr_array(S)
        S = (S.indptr.astype(np.int64, copy=False), S.indices, np.asarray(S.data, dtype=np.float64))
    else:
        S = (np.ascontiguousarray(S),)
    if _partials(nb, target.n_source, target.n_rows, 1, d):
        parts = _scratch((nb, target.n_source + 1, d))
        kernel = pushed_partials_sparse_kernel if sparse else pushed_partials_kernel
        kernel(*S, src, w, bucket_rows(target), parts, out)
    else:
        indptr, order = transposed_order(target)
        kernel = buckets_sparse_kernel if sparse else buckets_kernel
        kernel(*S, src, w, indptr, order, _bounds(indptr, nb), out)
    return out


_NO_PTR, _NO_COLUMNS = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)


def _side(S):
    """A source as cross_kernel reads it: (dense, indptr, indices, data), the unused half empty."""
    if sp.issparse(S):
        S = sp.csr_array(S)
        return (_EMPTY_F, S.indptr.astype(np.int64, copy=False),
                S.indices.astype(np.int32, copy=False), _c_float(S.data))
    return np.ascontiguousarray(S, dtype=np.float64), _NO_PTR, _NO_COLUMNS, _EMPTY_V


def direct_cross(S_p, rows_p, S_q, rows_q, w=None, n=None):
    """Σ_i w_i·S_p[rows_p[i]]ᵀ·S_q[rows_q[i]] (d_p × d_q, float64) over n pass rows: a cross
    block of crossprod, S_pᵀ·I_pᵀ·diag(w)·I_q·S_q, summed row by row (rows None: row i itself;
    -1: absent, skipped). Each row block keeps its own small d_p × d_q partial, so narrow rows
    cost n·(entries of a row of S_p)·(entries of a row of S_q) and no n_q-long scratch."""
    rows_p = _EMPTY_I if rows_p is None else np.asarray(rows_p, dtype=np.intp)
    rows_q = _EMPTY_I if rows_q is None else np.asarray(rows_q, dtype=np.intp)
    n = max(rows_p.shape[0], rows_q.shape[0]) if n is None else n
    w = _EMPTY_V if w is None else _c_float(w)
    nb = min(_threads(), max(n // CROSS_ROWS, 1))
    out = np.empty((S_p.shape[1], S_q.shape[1]))
    cross_kernel(_side(S_p), rows_p, _side(S_q), rows_q, w, n,
                 np.empty((nb,) + out.shape), out)
    return out


# ---------------------------------------------------------------------------------------------
# Dense products of one source: compiled where a tall, narrow source meets a narrow operand (BLAS
# at one thread does not scale, and at several its idle workers cost the compiled passes around
# it, see threads.py); BLAS where it is wide or small.

# The widest operand (m) of the compiled S·X: one column. At m = 1 the products are memory-bound
# and the compiled ones win (2e6 x 20: S·x 10.0 ms vs BLAS 18.9 ms at 1 thread); from m = 4
# BLAS's register blocking wins everywhere measured, even at one thread against two compiled ones
# (2e6 x 20, m = 8: BLAS 46 ms at 1 thread, compiled 91 ms at 1 and 61 ms at 2).
PRODUCT_WIDE = 1
# The widest operand of the compiled Sᵀ·Y, whose rows of S are scaled into accumulator rows. Up to
# 8 columns it is as fast as BLAS at one thread or faster (2e6 x 20: 27.5 ms vs 35.7; 1e5 x 80:
# 7.7 vs 7.0) and scales where BLAS, held at one thread between compiled kernels, cannot (1e5 x
# 80 at 2 threads: 3.9 vs 7.0); at 16 columns BLAS is faster at one thread (9.4 vs 11.7 ms).
TRANSPOSED_WIDE = 8
GRAM_WIDE = 128     # the widest source for the compiled Sᵀ·Y and the tiled Sᵀ·diag(c)·S
SMALL = 1 << 15     # sources with fewer values than this go to BLAS (a parallel launch costs more)


# A BLAS product of a tall source too wide for the compiled ones runs in row blocks, one per thread,
# each a BLAS call at one thread (held, see threads.blas_held) on a thread of the compiled
# kernels: OpenBLAS splits the output, a few hundred values here, so it does not scale on a tall,
# narrow product. 1e5 x 80 by 20 columns at 2 threads: one call 20 ms, two row blocks 11 (on a
# pool of Python threads 16.5, right after a compiled kernel: its idle thread still held a core).
# Blocks only from BLAS_SPLIT multiply-adds a block (a launch costs ~20-50 us).
BLAS_SPLIT = 1 << 22


def _blas_blocks(S, Y, width, out=None):
    """Row blocks for a BLAS product of S with Y (``width`` columns, results into ``out`` if
    given): the thread count, fewer where a block would hold under BLAS_SPLIT multiply-adds; 1
    where the kernels cannot call BLAS on them (mixed dtypes: NumPy's BLAS call converts)."""
    if S.dtype != Y.dtype or (out is not None and out.dtype != S.dtype):
        return 1
    return max(1, min(_threads(), S.shape[0] * S.shape[1] * width // BLAS_SPLIT))


def _tall(S):
    """Whether the compiled dense products take S: a C-ordered float array, not small."""
    return (isinstance(S, np.ndarray) and S.ndim == 2 and S.dtype in (np.float32, np.float64)
            and S.flags.c_contiguous and S.size >= SMALL)


def _float_operand(Y):
    """Y as the kernels read it: C-ordered float32/float64 (copied only when it is not)."""
    return np.ascontiguousarray(Y, dtype=Y.dtype if Y.dtype in (np.float32, np.float64) else np.float64)


def product(S, X, out=None):
    """S·X (into out if given), as cpu.product: compiled for a tall dense S and an X of at most
    PRODUCT_WIDE columns (row blocks; each row's dot in vector lanes), a float64 CSR S and a 1-D x
    compiled too (SciPy's csr_matvec is one thread and costs ~20 us a call before it starts; one
    thread under SMALL_CSR entries), a tall dense S and a wider X by BLAS in row blocks (see
    BLAS_SPLIT), else BLAS/SciPy."""
    if _csr64(S) and isinstance(X, np.ndarray) and X.shape == S.shape[1:] \
            and X.dtype.kind in "fiub" and (out is None or (out.dtype == np.float64
                                                           and out.flags.c_contiguous)):
        target = out if out is not None else np.empty(S.shape[0])
        if S.nnz < SMALL_CSR:
            csr_product_rows(target, S.indptr, S.indices, S.data, _c_float(X), 0, S.shape[0])
        else:
            csr_product_kernel(S.indptr, S.indices, S.data, _c_float(X), _csr_blocks(S), target)
        return target
    if not _tall(S) or sp.issparse(X) or np.ndim(X) not in (1, 2) or \
            (out is not None and not (out.dtype == np.float64 and out.flags.c_contiguous)):
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.product(S, X, out)
    if np.ndim(X) == 2 and X.shape[1] > PRODUCT_WIDE:
        with threads.blas_held() as single:
            nb = _blas_blocks(S, X, X.shape[1], out) if single else 1
            if nb == 1:
                return cpu.product(S, X, out)
            if out is None:
                out = np.empty((S.shape[0], X.shape[1]), dtype=S.dtype)
            blas_product_kernel(S, np.ascontiguousarray(X), out, nb)
            return out
    dtype = np.result_type(S.dtype, X.dtype)
    target = out if out is not None else np.empty((S.shape[0],) + X.shape[1:])
    product_kernel(S, _c_float(X), target, min(_threads(), S.shape[0]))
    return target if out is not None or dtype == np.float64 else target.astype(dtype)


def transposed_product(S, Y):
    """Sᵀ·Y (d_p [× m]) for a source S and a dense Y of its rows, as cpu.transposed_product:
    compiled for a tall dense S of at most GRAM_WIDE columns and a Y of at most TRANSPOSED_WIDE
    columns (block partials summed in block order), a float64 CSR S and a 1-D Y compiled too, a
    tall dense S and a wider Y by BLAS in row blocks (summed in block order, see BLAS_SPLIT), else
    BLAS/SciPy."""
    if _csr64(S) and isinstance(Y, np.ndarray) and Y.shape == S.shape[:1] and Y.dtype.kind in "fiub":
        return _csr_transposed(S, Y)
    if not _tall(S) or sp.issparse(Y) or np.ndim(Y) not in (1, 2):
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.transposed_product(S, Y)
    if S.shape[1] > GRAM_WIDE or (np.ndim(Y) == 2 and Y.shape[1] > TRANSPOSED_WIDE):
        with threads.blas_held() as single:
            nb = _blas_blocks(S, Y, Y.shape[1] if np.ndim(Y) == 2 else 1) if single else 1
            if nb == 1:
                return cpu.transposed_product(S, Y)
            parts = np.empty((nb, S.shape[1]) + Y.shape[1:], dtype=S.dtype)
            blas_transposed_kernel(S, np.ascontiguousarray(Y), parts)
            return np.add.reduce(parts, axis=0)
    dtype = np.result_type(S.dtype, Y.dtype)
    Y = _float_operand(Y)
    nb = min(_threads(), S.shape[0])
    d, width = S.shape[1], Y.shape[1:]
    parts = _grad_parts(nb, d, width)
    transposed_product_kernel(S, Y, parts)
    out = _grad_sum(parts)
    return out if dtype == np.float64 else out.astype(dtype)


def column_sums(S):
    """Per-column sums, as cpu.column_sums: a tall dense S of at least WIDE columns as Sᵀ·1
    compiled (row blocks in parallel), a float64 CSR compiled; else NumPy's 1ᵀ·S with BLAS held,
    as between compiled kernels (a narrow S: its compiled loop reads with a runtime stride)."""
    if _csr64(S):
        return _csr_transposed(S, None)
    if _tall(S) and WIDE <= S.shape[1] <= GRAM_WIDE:
        return transposed_product(S, np.ones(S.shape[0], dtype=S.dtype))
    with threads.blas_held():
        return cpu.column_sums(S)


# A CSR with fewer entries than this is summed by one thread: a parallel launch costs more (SciPy's
# Sᵀ·y or NumPy's bincount cost 10-25 us of overhead a call, the serial loop ~1 ns an entry).
SMALL_CSR = 1 << 16


def _csr64(S):
    return sp.issparse(S) and S.format == "csr" and S.dtype == np.float64


def _csr_transposed(S, y):
    """Sᵀ·y (float64) for a float64 CSR S and a 1-D y of its rows (None: ones, the column sums):
    row blocks into partials of d values, summed in block order; one thread for a small S, or
    where the partials would outweigh its entries."""
    ones, y = y is None, _EMPTY_V if y is None else _c_float(y)
    n, d = S.shape
    nb = min(_threads(), max(n, 1))
    if nb > 1 and S.nnz >= SMALL_CSR and nb * d <= S.nnz:
        parts = np.empty((nb, d))
        csr_transposed_kernel(S.indptr, S.indices, S.data, y, ones, _bounds(S.indptr, nb), parts)
        return np.add.reduce(parts, axis=0)
    out = np.empty(d)
    csr_transposed_rows(out, S.indptr, S.indices, S.data, y, ones, 0, n)
    return out


def square_excess(S, scale, shift, weights=None):
    """As cpu.square_excess; per source row of a float64 CSR compiled (one read of each entry,
    blocks of rows in parallel, one thread under SMALL_CSR entries)."""
    if weights is not None or not _csr64(S):
        return cpu.square_excess(S, scale, shift, weights)
    out, scale, shift = np.empty(S.shape[0]), _c_float(scale), _c_float(shift)
    if S.nnz < SMALL_CSR:
        csr_square_excess_rows(out, S.indptr, S.indices, S.data, scale, shift, 0, S.shape[0])
    else:
        csr_square_excess_kernel(S.indptr, S.indices, S.data, scale, shift, _csr_blocks(S), out)
    return out


def _mirror(tiles, d):
    """The symmetric d × d matrix whose upper triangle is that of ``tiles`` (padded)."""
    upper = np.triu(tiles[:d, :d])
    return upper + np.triu(upper, 1).T


def weighted_gram(S, c=None):
    """Sᵀ·diag(c)·S (Sᵀ·S for c=None), as cpu.weighted_gram: compiled for a tall dense S of at
    most GRAM_WIDE columns (upper 4 × 4 tiles per row block, S read once; partials summed in
    block order, then mirrored), else cpu's (BLAS, sparse routes)."""
    if not _tall(S) or S.shape[1] > GRAM_WIDE:
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.weighted_gram(S, c)
    nb = min(_threads(), S.shape[0])
    parts = np.empty((nb, _up4(S.shape[1]), _up4(S.shape[1])))
    gram_kernel(S, _EMPTY_V if c is None else _c_float(c), parts)
    return _mirror(np.add.reduce(parts, axis=0), S.shape[1])



def _stacked_rows(targets):
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


def _owned_rows(ind, nb):
    """(order, starts, bounds) of the owned route with nb threads, built once per indicator and nb:
    bounds split the n_source + 1 buckets (the sink last) into nb ranges taking about n / nb
    target rows each; thread t takes the target rows order[starts[t]:starts[t+1]], those whose
    bucket it owns, in increasing order."""
    def build():
        T = bucket_rows(ind)
        taken = np.zeros(ind.n_source + 2, dtype=np.int64)
        np.cumsum(np.bincount(T, minlength=ind.n_source + 1), out=taken[1:])
        bounds = np.searchsorted(taken, np.arange(nb + 1) * (ind.n_rows / nb), side="left")
        bounds[0], bounds[-1] = 0, ind.n_source + 1
        bounds = np.maximum.accumulate(np.minimum(bounds, ind.n_source + 1)).astype(np.int64)
        owner = np.searchsorted(bounds, T, side="right") - 1
        starts, order = counting_sort(owner, nb)
        return order, starts, bounds
    return ind.cached(("compiled_owned", nb), build)


def gram_pushes(S, targets, w=None):
    """(Sᵀ·diag(w)·S, [I_gᵀ·diag(w)·S for each g in targets]) for a dense fact block S (identity
    indicator; targets: indicators of the tables it crosses in crossprod), reading S once where
    it can: its Gram and its pushes into the tables with small partials in one pass over row
    blocks; a table with large partials in a pass whose threads own output rows (with the Gram if
    it comes first). None where the compiled kernels do not take S."""
    if not _tall(S) or S.shape[1] > GRAM_WIDE or any(ind.is_identity for ind in targets):
        return None
    nb = min(_threads(), S.shape[0])
    d, d4 = S.shape[1], _up4(S.shape[1])
    w = _EMPTY_V if w is None else _c_float(w)
    # Block partials as for a segment-sum: each thread then streams its own rows of S. The owned
    # route reads S in bucket order, every thread over all of S, so it is kept for partials too
    # large for the pass (2e6 x 20 into 1e5 rows at 2 threads: partials 69 ms, owned 125 ms).
    large = [not _partials(nb, ind.n_source, S.shape[0], 1, d) for ind in targets]
    small = [ind for ind, big in zip(targets, large) if not big]
    sums, gram = {}, None
    if small or not targets:
        R, offsets = _stacked_rows(small) if small else (np.empty((0, S.shape[0]), np.intp), [0])
        parts = _scratch((nb, offsets[-1] + 1, d))
        grams = np.empty((nb, d4, d4))
        gram_pushes_kernel(S, w, R, parts, grams)
        stacked = np.empty((offsets[-1], d))
        reduce_blocks(parts, stacked)
        gram = np.add.reduce(grams, axis=0)
        for g, ind in enumerate(small):
            sums[id(ind)] = stacked[offsets[g]:offsets[g + 1]]
    for ind in (ind for ind, big in zip(targets, large) if big):
        order, starts, bounds = _owned_rows(ind, nb)
        out = np.empty((ind.n_source + 1, d))
        grams = np.empty((nb, d4, d4) if gram is None else (nb, 0, 0))
        gram_pushes_owned_kernel(S, w, bucket_rows(ind)[None, :], order, starts, bounds, out, grams)
        if gram is None:
            gram = np.add.reduce(grams, axis=0)
        sums[id(ind)] = out[:-1]
    return _mirror(gram, d), [sums[id(ind)] for ind in targets]


Pass = namedtuple("Pass", "loss tables fact csr total")
Pass.__doc__ = """What a fused pass returns, r its residual (or Y for PassPlan.transposed):
loss (float; None for gramvec and transposed), tables = the stacked Iᵀ·r (total[, m]; table g at
plan.table(tables, g)), fact = Fᵀ·r and csr = F_cᵀ·r (None without that block), total = Σ_i r_i."""

Assignment = namedtuple("Assignment", "labels closest inertia counts tables fact csr")
Assignment.__doc__ = """What kmeans returns: labels (n, intp), closest (squared distance to the
label's center), inertia (their sum), counts (per cluster), and the cluster sums through each
table (tables: stacked Iᵀ·onehot, total × k), the dense fact block (d_f × k) and the CSR one."""


class PassPlan:
    """The tables of one matrix as the fused passes read them; build it once per matrix.

    ``indicators``: one Indicator per gathered table (``.rows``, -1 = absent, and ``.n_source``;
    not the identity), parts sharing an indicator share it. ``fact``: the dense fact block (n × d_f,
    identity indicator), or None; ``fact_csr``: a CSR fact block (n × d_c), or None (a one-hot
    block, k ones in every row, is kept as its column indices: indptr [k] and no values, 40 % fewer
    bytes per pass; a block of short rows, at most ENTRY_BY_ENTRY entries a row on average, keeps
    each entry's row too and is read entry by entry). ``n``: the number of target rows (needed
    only without indicators).

    ``R`` (G × n, intp) holds offset_g + rows_g[i], or ``total`` (the sink) where table g is absent;
    per-table values are stacked in U (``buffer``): table g at rows offsets[g]..offsets[g+1]-1 and
    a zero sink row last. Tables folded into a host (``rules.folds``) stay out of the plan: the
    caller adds g(U_c, F) into the host's U before a pass and segment-sums B_c = s(B_h, F) after.
    """

    def __init__(self, indicators=(), fact=None, fact_csr=None, n=None):
        indicators = list(indicators)
        if any(ind.rows is None for ind in indicators):
            raise ValueError("identity indicators are fact blocks: pass them as fact / fact_csr")
        lengths = {ind.n_rows for ind in indicators}
        for block in (fact, fact_csr):
            if block is not None:
                lengths.add(block.shape[0])
        if n is not None:
            lengths.add(int(n))
        if len(lengths) != 1:
            raise ValueError(f"the plan's blocks disagree on the number of target rows: {lengths}")
        self.n = lengths.pop()
        self.sizes = [ind.n_source for ind in indicators]
        if indicators:  # built once per tuple of indicators (one table: its bucket rows)
            self.R, self.offsets = _stacked_rows(indicators)
        else:
            self.R, self.offsets = np.empty((0, self.n), dtype=np.intp), [0]
        self.total = self.offsets[-1]
        F = _EMPTY_F if fact is None else np.ascontiguousarray(fact)
        if F.dtype not in (np.float32, np.float64):
            F = F.astype(np.float64)
        if fact_csr is None:
            self.fact = (F,) + _NO_FACT[1:]
        else:
            C = sp.csr_array(fact_csr)
            indices = C.indices.astype(np.int64, copy=False)
            indptr = C.indptr.astype(np.int64, copy=False)
            if cpu.one_hot_columns(C) is not None:  # k ones per row: indptr [k], no values read
                self.fact = (F, np.array([C.nnz // C.shape[0]], dtype=np.int64), indices, _EMPTY_V,
                             _NO_ROWS)
            else:
                short = C.nnz <= ENTRY_BY_ENTRY * C.shape[0] < 2 ** 31
                rows = (np.repeat(np.arange(C.shape[0], dtype=np.int32), np.diff(indptr)) if short
                        else _NO_ROWS)
                self.fact = (F, indptr, indices, np.asarray(C.data, dtype=np.float64), rows)
        self.d_fact = 0 if fact is None else F.shape[1]
        self.d_csr = 0 if fact_csr is None else fact_csr.shape[1]
        self._scratch = threading.local()

    @property
    def G(self):
        return self.R.shape[0]

    def buffer(self, m=None):
        """A zeroed U (total + 1 [× m], float64): write table g's values into table(U, g); the
        last (sink) row must stay 0."""
        return np.zeros((self.total + 1,) if m is None else (self.total + 1, m))

    def workspace(self, m=None):
        """A U for the next pass of this Python thread, reused across calls (a fresh one would be
        page-faulted in every iteration): the sink row is 0, the tables' rows are stale, so the
        caller writes every table(U, g) before the pass."""
        shape = (self.total + 1,) if m is None else (self.total + 1, m)
        U = getattr(self._scratch, "U", None)
        if U is None or U.shape != shape:
            U = self._scratch.U = np.empty(shape)
        U[self.total] = 0.0
        return U

    def table(self, A, g):
        """Table g's rows of a stacked array (U, or a pass's tables)."""
        return A[self.offsets[g]:self.offsets[g + 1]]

    @cached_property
    def buckets(self):
        """(indptr, order) of the stacked Iᵀ (total × n): the buckets route of the segment-sums."""
        indptr, order = counting_sort(self.R.reshape(-1), self.total)
        if self.G > 1:
            order %= self.n  # positions in the flattened R are g·n + i
        return indptr, order

    def _parts(self, nb, width):
        """Block partials for the tables (nb × (total + 1) × width), or an empty one (nb × 0 …)
        where the buckets route is cheaper."""
        if not _partials(nb, self.total, self.n, self.G, int(np.prod(width))):
            return np.empty((nb, 0) + width)
        shape = (nb, self.total + 1) + width
        buffer = getattr(self._scratch, "parts", None)
        if buffer is None or buffer.shape != shape:
            buffer = self._scratch.parts = np.empty(shape)
        return buffer

    def _operands(self, U, xf, xc, c):
        """Checked float64 operands of a pass and the fact tuple (blocks without x skipped)."""
        U = _c_float(U)
        if U.shape[0] != self.total + 1 or U.ndim > 2:
            raise ValueError(f"U must have {self.total + 1} rows (plan.buffer), got {U.shape}")
        width = U.shape[1:]
        F, *csr = self.fact
        if xf is None or not self.d_fact:
            F, xf = _EMPTY_F.astype(F.dtype), np.zeros((0,) + width)
        if xc is None or not self.d_csr:
            csr, xc = _NO_FACT[1:], np.zeros((0,) + width)
        c = (np.full(width or (1,), c, dtype=np.float64) if isinstance(c, (int, float))
             else np.broadcast_to(_c_float(c), width or (1,)).copy())  # full: 0.5 us, not 4
        fact = (F, *csr)
        return U, width, fact, _c_float(xf).reshape((-1,) + width), _c_float(xc).reshape((-1,) + width), c

    def _finish(self, nb, parts, r, gf, gc, fact, width):
        """The tables' sums (partials in block order, or buckets over r) and the fact gradients."""
        tables = np.empty((self.total,) + parts.shape[2:] if parts.shape[1] else
                          (self.total,) + r.shape[1:])
        if parts.shape[1]:
            reduce_blocks(parts, tables)
        else:
            indptr, order = self.buckets
            buckets_kernel(r, _EMPTY_I, _EMPTY_V, indptr, order, _bounds(indptr, nb), tables)
        d = fact[0].shape[1]
        return (tables, _grad_sum(gf) if d else None,
                np.add.reduce(gc, axis=0) if fact[1].shape[0] else None)

    def _run(self, kernel, U, xf, xc, c, args, width_stats, outs=()):
        """Launch a fused kernel (U, R, fact, xf, xc, c, *args, parts, gf, gc, stats, r, *outs);
        returns (stats summed in block order, tables, Fᵀr, F_cᵀr)."""
        nb = min(_threads(), max(self.n, 1))
        U, width, fact, xf, xc, c = self._operands(U, xf, xc, c)
        parts = self._parts(nb, width)
        r = np.empty((0,) + width) if parts.shape[1] else np.empty((self.n,) + width)
        gf = _grad_parts(nb, fact[0].shape[1], width)
        gc = np.empty((nb, self.d_csr if fact[1].shape[0] else 0) + width)
        stats = np.empty((nb, width_stats))
        kernel(U, self.R, fact, xf, xc, c, *args, parts, gf, gc, stats, r, *outs)
        tables, f, g = self._finish(nb, parts, r, gf, gc, fact, width)
        return np.add.reduce(stats, axis=0), tables, f, g

    def scores(self, U, xf=None, xc=None, c=0.0, out=None, accumulate=False):
        """z = Σ_g U_g[rows_g] + F·xf + F_c·xc + c (n [× m]); into out (+= if accumulate):
        T₀·x given the tables' products U (lmm), or the stacked gather-add (no fact, c = 0)."""
        U, width, fact, xf, xc, c = self._operands(U, xf, xc, c)
        if out is None:
            out = np.empty((self.n,) + width)
            accumulate = False
        scores_kernel(out, U, self.R, fact, xf, xc, c, min(_threads(), max(self.n, 1)), accumulate)
        return out

    def transposed(self, Y, fact=True):
        """T₀ᵀ·Y pieces for Y (n [× m]): Pass(None, stacked Iᵀ·Y, Fᵀ·Y, F_cᵀ·Y, Σ_i Y_i) (tmm)."""
        nb = min(_threads(), max(self.n, 1))
        Y = _c_float(Y)
        if not Y.flags.writeable:  # the kernel types a slice of Y as a scratch it may write
            Y = Y.copy()
        width = Y.shape[1:]
        fact_t = self.fact if fact else (_EMPTY_F.astype(self.fact[0].dtype), *_NO_FACT[1:])
        parts = self._parts(nb, width)
        gf = _grad_parts(nb, fact_t[0].shape[1], width)
        gc = np.empty((nb, self.d_csr if fact_t[1].shape[0] else 0) + width)
        stats = np.empty((nb,) + (width or (1,)))
        transposed_kernel(Y, self.R, fact_t, parts, gf, gc, stats)
        tables, f, g = self._finish(nb, parts, Y, gf, gc, fact_t, width)
        total = np.add.reduce(stats, axis=0)
        return Pass(None, tables, f, g, float(total[0]) if not width else total)


def logistic_pass(plan, U, y, sw=None, xf=None, xc=None, c=0.0):
    """The binary log-loss pass: z = scores (see PassPlan.scores; U: total + 1 values), loss =
    Σ s(log(1 + e^z) - y z), r = s(σ(z) - y); returns Pass(loss, Iᵀr stacked, Fᵀr, F_cᵀr, Σr)."""
    sw = _EMPTY_V if sw is None else _c_float(sw)
    stats, tables, f, g = plan._run(logistic_kernel, U, xf, xc, c, (_c_float(y), sw), 2)
    return Pass(float(stats[0]), tables, f, g, float(stats[1]))


def softmax_pass(plan, U, labels, sw=None, xf=None, xc=None, c=0.0):
    """The multinomial log-loss pass over k = U.shape[1] classes: Z = scores, loss = Σ s(logsumexp(Z_i)
    - Z_i,y_i), R = s(softmax(Z) - onehot(y)); returns Pass(loss, IᵀR, FᵀR, F_cᵀR, Σ_i R_i)."""
    sw = _EMPTY_V if sw is None else _c_float(sw)
    labels = np.ascontiguousarray(labels, dtype=np.intp)
    k = np.shape(U)[1]
    stats, tables, f, g = plan._run(softmax_kernel, U, xf, xc, c, (labels, sw), 1 + k)
    return Pass(float(stats[0]), tables, f, g, stats[1:])


def gramvec_pass(plan, U, v=None, xf=None, xc=None, c=0.0):
    """The pass of α·Tᵀ(v⊙(T·y)) + β·z: q = scores (T₀·y pieces), w = v⊙q; returns Pass(None, Iᵀw,
    Fᵀw, F_cᵀw, Σw). The caller applies the affine map, α, β·z and the tables' Sᵀ."""
    v = _EMPTY_V if v is None else _c_float(v)
    m = np.shape(U)[1] if np.ndim(U) == 2 else 1
    stats, tables, f, g = plan._run(gramvec_kernel, U, xf, xc, c, (v,), m)
    return Pass(None, tables, f, g, float(stats[0]) if np.ndim(U) == 1 else stats)


def kmeans_pass(plan, U, x_sq, c_sq, rounding, xf=None, xc=None, c=0.0):
    """Lloyd's assignment pass: Z = scores (U: the tables' S_g·C_gᵀ, total + 1 × k), squared
    distances (‖x‖² + ‖c‖²) - 2Z with models/kmeans.py's rounding rule (``rounding`` = its
    links.rounding(centers)); returns Assignment (labels, closest, inertia, counts, cluster sums)."""
    k = np.shape(U)[1]
    labels, closest = np.empty(plan.n, dtype=np.intp), np.empty(plan.n)
    args = (_c_float(x_sq), _c_float(c_sq), float(rounding))
    stats, tables, f, g = plan._run(kmeans_kernel, U, xf, xc, c, args, 1 + k, (labels, closest))
    return Assignment(labels, closest, float(stats[0]), stats[1:], tables, f, g)


# ---------------------------------------------------------------------------------------------
# Materialization: each value written once, in parallel (cpu's builds per-part temporaries).

def materialize_dense(parts, n, d, dtype):
    """The joined table T₀ as a dense n × d ndarray of ``dtype``; as cpu.materialize_dense."""
    out = np.zeros((n, d), dtype=dtype)
    nb = min(_threads(), max(n, 1))
    for part in parts:
        S, ind = part.source, part.indicator
        rows = _NO_ROWS64 if ind.is_identity else ind.rows
        cols = np.asarray(part.cols, dtype=np.int64)
        if sp.issparse(S):
            S = S.tocsr()
            join_dense_csr_kernel(out, S.indptr, S.indices, S.data.astype(dtype, copy=False),
                                  rows, cols, nb)
        else:
            join_dense_kernel(out, np.ascontiguousarray(S, dtype=dtype), rows, cols, nb)
    return out


# Joins of at least this many parts are written part by part in tiles of rows. Row by row, TPC-H
# sf=0.1's seven narrow parts took 105 ms at 1 thread, in tiles 50 ms; with 2-4 parts (Hamlet,
# Santoku, synthetic stars of 1e6 rows) the row loop measured 0-30 % faster.
PART_MAJOR_PARTS = 5


def materialize_sparse(parts, n, d):
    """The joined table T₀ as an n × d CSR array; as cpu.materialize_sparse: a row's entries in
    part order, sorted by column where a part's columns interleave another's (overlapping
    columns stay as entries that add up). A dense source's zeros are not stored."""
    dtype = np.result_type(*(part.source.dtype for part in parts))
    sources = [_csr_of(part.source) for part in parts]
    starts = np.cumsum([0] + [S.shape[0] for S in sources])
    sink = int(starts[-1])  # an empty row after the stacked sources, for absent rows
    lengths = np.concatenate([np.diff(S.indptr) for S in sources] + [np.zeros(1, np.int64)])
    indptr = np.zeros(sink + 2, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    R = np.empty((len(parts), n), dtype=np.int32 if sink < 2**31 else np.int64)
    for g, part in enumerate(parts):
        ind = part.indicator
        R[g] = (np.arange(n) + starts[g] if ind.is_identity else
                np.where(ind.rows < 0, sink, ind.rows + starts[g]))
    nb = min(_threads(), max(n, 1))
    out_indptr = np.zeros(n + 1, dtype=np.int64)
    join_lengths_kernel(lengths, R, out_indptr, nb)
    np.cumsum(out_indptr, out=out_indptr)
    nnz = int(out_indptr[-1])
    index = np.int32 if max(nnz, d) < 2**31 else np.int64  # as SciPy picks: 4 bytes less per entry
    indices = np.concatenate([np.asarray(part.cols, dtype=index)[S.indices]
                              for part, S in zip(parts, sources)])
    data = np.concatenate([S.data.astype(dtype, copy=False) for S in sources])
    out_indices, out_data = np.empty(nnz, dtype=index), np.empty(nnz, dtype=dtype)
    unsorted = np.zeros(nb, dtype=np.int64)
    join = join_csr_tiles_kernel if len(parts) >= PART_MAJOR_PARTS else join_csr_kernel
    join(indptr, indices, data, R, out_indptr, out_indices, out_data, unsorted)
    out = sp.csr_array((out_data, out_indices, out_indptr.astype(index, copy=False)),
                       shape=(n, d))
    if unsorted.any():
        out.sort_indices()
    else:
        out.has_sorted_indices = True
    return out


def _csr_of(S):
    """A source as CSR: a dense one in two parallel passes (SciPy's goes through COO: 35 ms
    against ~5 for TPC-H sf=0.1's 600,572 × 3 fact block)."""
    if sp.issparse(S):
        return S.tocsr()
    S = np.ascontiguousarray(S)
    nb = min(_threads(), max(S.shape[0], 1))
    indptr = np.zeros(S.shape[0] + 1, dtype=np.int64)
    dense_nonzeros_kernel(S, indptr[1:], nb)
    np.cumsum(indptr, out=indptr)
    index = np.int32 if max(int(indptr[-1]), S.shape[1]) < 2**31 else np.int64
    indices, data = np.empty(int(indptr[-1]), dtype=index), np.empty(int(indptr[-1]), S.dtype)
    dense_csr_kernel(S, indptr, indices, data, nb)
    return sp.csr_array((data, indices, indptr), shape=S.shape)


class BinaryLink(links.BinaryLink):
    """The binary log-loss link of :class:`ilargi.backend.links.BinaryLink` as one parallel pass
    (the materialized plan's scores; a factorized table fuses it into :func:`logistic_pass`)."""

    def __call__(self, z):
        z = _c_float(z)
        nb = min(_threads(), max(z.shape[0], 1))
        stats = np.empty((nb, 2))
        sw = _EMPTY_V if self.sw is None else self.sw
        logistic_link_kernel(z, self.y, sw, self.grad, stats)
        return float(np.add.reduce(stats[:, 0])), self.grad


class MultinomialLink(links.MultinomialLink):
    """The softmax link of :class:`ilargi.backend.links.MultinomialLink` as one parallel pass."""

    def __init__(self, labels, n_classes, sw=None):
        super().__init__(labels, n_classes, sw)
        self.codes = np.ascontiguousarray(labels, dtype=np.intp)

    def __call__(self, Z):
        Z = _c_float(Z)
        nb = min(_threads(), max(Z.shape[0], 1))
        stats = np.empty((nb, 1 + Z.shape[1]))
        sw = _EMPTY_V if self.sw is None else self.sw
        softmax_link_kernel(Z, self.codes, sw, self.grad, stats)
        return float(np.add.reduce(stats[:, 0])), self.grad


# Vectors shorter than this take the NumPy/BLAS two-loop recursion (a launch costs ~20-50 us).
SMALL_DIRECTION = 1 << 15


def lbfgs_direction(s, y, rho, order, g):
    """-H·g by L-BFGS's two-loop recursion over the curvature pairs (s[i], y[i]), i in ``order``
    (newest first; ρ_i = 1 / s_iᵀy_i), the scale γ = s_newᵀy_new / y_newᵀy_new, as
    :func:`ilargi.backend.cpu.two_loop`; None for a short g (the caller's NumPy).

    Each step's axpy and the next step's dot are one parallel pass (the dot in row blocks, summed
    in block order), 2m + 1 passes over q where BLAS, single-threaded inside a fit, makes 4m."""
    if g.shape[0] < SMALL_DIRECTION or not order:
        return None
    parts = np.empty(min(_threads(), g.shape[0]))

    def step(c, a, v, w):  # q = c·q + a·v; returns w·q
        combine_dot_kernel(q, c, a, v, w, parts)
        return float(np.add.reduce(parts))

    q = np.negative(g, dtype=np.float64)
    alpha = {}
    dot = step(1.0, 0.0, s[order[0]], s[order[0]])  # s_newest·q
    for t, i in enumerate(order):  # newest to oldest: α_i = ρ_i s_iᵀq, q -= α_i y_i
        alpha[i] = rho[i] * dot
        dot = step(1.0, -alpha[i], y[i], s[order[t + 1]] if t + 1 < len(order) else y[order[-1]])
    newest = order[0]
    gamma = 1.0 / (rho[newest] * float(y[newest] @ y[newest]))
    scale, dot = gamma, gamma * dot  # q ← γq folds into the next step; y_oldest·(γq)
    for t, i in enumerate(reversed(order)):  # oldest to newest: q += (α_i - ρ_i y_iᵀq) s_i
        beta = rho[i] * dot
        dot = step(scale, alpha[i] - beta, s[i], y[order[-t - 2]] if t + 1 < len(order) else s[i])
        scale = 1.0
    return q
