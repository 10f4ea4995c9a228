"""CuPy kernels behind the rewrite rules: the GPU twin of :mod:`.cpu`, plus stacked passes.

Gathers and segment sums run as CUDA kernels of ``cuda/ilargi.cu`` (float64 accumulation, no
bounds checks: indices were validated once); products with large dense sources go to cuBLAS.

The rules run part by part; on the GPU that costs a few launches per part, and a launch costs
more than the work of a small part. So T·X, Tᵀ·Y, row and column sums and the gram-vector pattern
run as *stacked passes* over all parts at once (:class:`RowPlan`, built once per matrix):

* forward: U = Z·(a⊙x), one sparse product over every part's source rows stacked (Z: sparse
  sources and small dense ones, columns mapped to target columns); large dense sources by cuBLAS;
* one pass over the target rows (``ilargi_rows``): q_i = F_i·x_F + Σ_p U_p[rows_p[i]], with the
  fact table F (dense, ≤ 64 columns) read in that pass; for the gram-vector pattern it also
  forms w_i = v_i·q_i and Fᵀw, so F is read once for both products;
* backward: B = Iᵀ·w for every part at once (one sparse product with the stacked Iᵀ), then
  G += Zᵀ·B (one product) and the large dense sources' Sᵀ·B by cuBLAS.

The sparse products run on *pieces* (:class:`Pieces`): CSR rows cut to at most PIECE entries, a
group of lanes per piece, so a 45-row dimension taken by 400k rows spreads over the GPU like a
uniform one. What does not change across iterations (the stacked matrices, int32 index vectors,
segments of Iᵀ, device copies of column mappings) is built once and cached, so a training loop pays
for it once; the hot paths call no host synchronization.

Module flags (``benchmarks/gpu_check.py`` times the alternatives):

* ``STACKED`` (env ``ILARGI_GPU_STACKED``, default on): the stacked passes; off, the rules run
  part by part (the generic path, also used where an index exceeds int32).
* ``FUSED_GRAMVEC`` (env ``ILARGI_GPU_FUSED_GRAMVEC``, default on): α·Tᵀ(v⊙(T·y)) + β·z in one
  stacked pass instead of the operator chain T·y, ⊙v, Tᵀ·. The fused pass does a subset of the
  chain's work (the same forward products, one row pass instead of two reads of F, no n-vector
  temporaries, fewer launches), so it is taken whenever it applies (a 1-D y on T itself).
* ``SEGMENT_SUM`` (env ``ILARGI_GPU_SEGMENT_SUM``): the single-indicator segment sum s(Y, rows):
  ``"pieces"`` (default; deterministic unless a row is cut), ``"atomic"`` (scatter with atomic
  adds) or ``"csr"`` (cuSPARSE with a CSR of Iᵀ).

Operations that would build an n × d or n × n dense table check the free device memory first and
raise :class:`DeviceMemoryError` (a MemoryError) naming the operation and the bytes, instead of a
raw out-of-memory error halfway through.
"""
import os
import weakref
from functools import cached_property
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import cupy as cp
import cupyx.scipy.sparse as csp

from .. import rules

xp = cp
name = "gpu"

STACKED = os.environ.get("ILARGI_GPU_STACKED", "1") != "0"
FUSED_GRAMVEC = os.environ.get("ILARGI_GPU_FUSED_GRAMVEC", "1") != "0"
SEGMENT_SUM = os.environ.get("ILARGI_GPU_SEGMENT_SUM", "pieces")

_SOURCE_PATH = Path(__file__).with_name("cuda") / "ilargi.cu"
_BLOCK = 256
_INT32_LIMIT = 2 ** 31 - 1
PIECE = 128  # most entries of a CSR row one lane group sums; longer rows are cut into pieces
SMALL_DENSE = 2 ** 17  # dense sources up to this many cells join the stacked sparse product
FACT_MAX_WIDTH = 64  # widest dense fact table the row pass reads itself


class DeviceMemoryError(MemoryError):
    """A GPU operation needs more device memory than is free (raised before it allocates)."""


def free_memory():
    """Bytes a new allocation can use: free device memory plus blocks cached by CuPy's pool."""
    free, _ = cp.cuda.Device().mem_info
    return int(free) + int(cp.get_default_memory_pool().free_bytes())


def check_memory(nbytes, what):
    """Raise DeviceMemoryError if ``what`` needs more than the free device memory."""
    available = free_memory()
    if nbytes > available:
        raise DeviceMemoryError(
            f"{what} needs {nbytes / 2 ** 30:.2f} GiB of GPU memory, but only "
            f"{available / 2 ** 30:.2f} GiB is free; use the factorized operators, a row "
            "selection, or the CPU (nm.to('cpu'))")


# ---------------------------------------------------------------------------------------------
# Compiling and launching the CUDA kernels.

_MODULES = {}
_FUNCTIONS = {}
_DEVICE = {}


def _real(dtype):
    """The kernel element type for an array dtype: float32 stays, everything else is float64."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


def kernel(function, dtype=np.float64):
    """The compiled kernel ``function`` of cuda/ilargi.cu for REAL = float32 or float64."""
    real = _real(dtype)
    found = _FUNCTIONS.get((real, function))
    if found is None:
        module = _MODULES.get(real)
        if module is None:
            ctype = "float" if real == np.float32 else "double"
            module = _MODULES[real] = cp.RawModule(
                code=f"#define REAL {ctype}\n" + _SOURCE_PATH.read_text())
        found = _FUNCTIONS[(real, function)] = module.get_function(function)
    return found


def _sm_count():
    if "sm" not in _DEVICE:
        _DEVICE["sm"] = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    return _DEVICE["sm"]


def launch(function, dtype, work, args, blocks=None, threads=_BLOCK, shared=0):
    """Run a kernel: a grid-stride one over ``work`` items (none for no work), or ``blocks``."""
    if blocks is None:
        if work <= 0:
            return
        # Enough blocks to fill every SM (2048 threads each), never more than the work needs.
        blocks = max(1, min(-(-work // threads), _sm_count() * (2048 // threads)))
    kernel(function, dtype)((int(blocks),), (int(threads),), args, shared_mem=int(shared))


def _dummy(dtype):
    """A one-element device array for pointer arguments a kernel does not read."""
    key = ("dummy", np.dtype(dtype))
    if key not in _DEVICE:
        _DEVICE[key] = cp.zeros(1, dtype=dtype)
    return _DEVICE[key]


def _fill_zero(x):
    launch("ilargi_fill_zero", np.float64, x.size, (x, np.int64(x.size)))


def _contiguous(x, dtype=None):
    """x as a C-contiguous float32/float64 device array (kernels ignore strides)."""
    x = cp.asarray(x)
    return cp.ascontiguousarray(x, dtype=_real(x.dtype if dtype is None else dtype))


def _width(x):
    return 1 if x.ndim == 1 else int(x.shape[1])


_DEVICE_INDEX = {}


def device_index(values):
    """An int32 device copy of a host index vector (a column mapping), cached while it lives."""
    if not isinstance(values, np.ndarray):
        return cp.asarray(values, dtype=cp.int32)
    key = id(values)
    entry = _DEVICE_INDEX.get(key)
    if entry is None or entry[0]() is not values:
        entry = (weakref.ref(values, lambda _, key=key: _DEVICE_INDEX.pop(key, None)),
                 cp.asarray(values.astype(np.int32)))
        _DEVICE_INDEX[key] = entry
    return entry[1]


def _target(part):
    """Where a part's columns sit in a target-indexed device array: a slice when contiguous."""
    return part.target if isinstance(part.target, slice) else device_index(part.cols)


# ---------------------------------------------------------------------------------------------
# Arrays and sources.

def is_sparse(x):
    return csp.issparse(x) or sp.issparse(x)


def _csr_to_device(S):
    S = sp.csr_matrix(S)
    index = np.int32 if S.nnz <= _INT32_LIMIT else np.int64
    return csp.csr_matrix((cp.asarray(S.data), cp.asarray(S.indices.astype(index)),
                           cp.asarray(S.indptr.astype(index))), shape=S.shape)


def as_csr(x, dtype=None):
    """A cupyx CSR view of x (copying only when the format or dtype must change)."""
    out = _csr_to_device(x) if sp.issparse(x) else (x if x.format == "csr" else x.tocsr())
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return out


def csr(data, indices, indptr, shape):
    return csp.csr_matrix((data, indices, indptr), shape=shape)


def to_dense(x):
    return x.toarray() if csp.issparse(x) else cp.asarray(x)


def asnumpy(x):
    """A host copy: NumPy for dense arrays and scalars, SciPy CSR for sparse matrices."""
    if csp.issparse(x):
        return x.get()
    return cp.asnumpy(x)


def move_array(x):
    """A device (CuPy) copy of a host array; device arrays pass through."""
    return cp.asarray(x)


def move_source(S):
    """A source on the device: CuPy array or cupyx CSR (from NumPy/SciPy or device input)."""
    if sp.issparse(S) or csp.issparse(S):
        return as_csr(S)
    return cp.asarray(S)


# ---------------------------------------------------------------------------------------------
# Indicator structures, built once per indicator and cached on it (see Indicator.cached).

def rows32(ind):
    """The index vector as int32 (-1 = absent), the form the kernels read."""
    def build():
        if ind.n_source > _INT32_LIMIT or ind.n_rows > _INT32_LIMIT:
            raise ValueError(f"the GPU kernels index at most 2**31 - 1 rows, got an indicator "
                             f"{ind.n_rows} × {ind.n_source}")
        return cp.asarray(ind.rows, dtype=cp.int32)
    return ind.cached("gpu_rows32", build)


def _index_vector(ind):
    return cp.arange(ind.n_rows) if ind.is_identity else cp.asarray(ind.rows)


def safe_rows(ind):
    """Row indices with absent (-1) entries replaced by 0."""
    def build():
        rows = cp.asarray(ind.rows)
        return cp.where(rows < 0, 0, rows) if ind.n_absent else rows
    return ind.cached("gpu_safe_rows", build)


def absent_positions(ind):
    return ind.cached("gpu_absent", lambda: cp.flatnonzero(cp.asarray(ind.rows) < 0))


def bucket_rows(ind):
    """Rows with absent entries sent to an extra bucket n_source."""
    def build():
        rows = cp.asarray(ind.rows)
        return cp.where(rows < 0, ind.n_source, rows) if ind.n_absent else rows
    return ind.cached("gpu_bucket_rows", build)


def segments(ind):
    """(indptr int64, order int32) of Iᵀ: target rows order[indptr[j]:indptr[j+1]] take row j."""
    def build():
        if ind.is_identity:
            return cp.arange(ind.n_rows + 1, dtype=cp.int64), cp.arange(ind.n_rows, dtype=cp.int32)
        rows = cp.asarray(ind.rows)
        present = cp.flatnonzero(rows >= 0)
        order = present[cp.argsort(rows[present])]
        per_row = cp.bincount(rows[present], minlength=ind.n_source)
        indptr = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(per_row)])
        return indptr.astype(cp.int64), order.astype(cp.int32)
    return ind.cached("gpu_segments", build)


def indicator_pieces(ind):
    """Iᵀ (n_source × n, entries 1) as :class:`Pieces`: segment sums in one launch."""
    def build():
        indptr, order = segments(ind)
        return Pieces(indptr, order, None, cp.arange(ind.n_source, dtype=cp.int32))
    return ind.cached("gpu_pieces", build)


def transposed_indicator(ind):
    """Iᵀ as a cupyx CSR (n_source × n), data = 1: the cuSPARSE segment-sum operator."""
    def build():
        indptr, order = segments(ind)
        return csp.csr_matrix((cp.ones(order.size), order, indptr.astype(cp.int32)),
                              shape=(ind.n_source, ind.n_rows))
    return ind.cached("gpu_csr_t", build)


def _indicator_csr(ind):
    """I as a cupyx CSR (n × n_source): one entry per present target row."""
    def build():
        rows = cp.asarray(ind.rows)
        present = rows >= 0
        indptr = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(present.astype(cp.int64))])
        columns = rows[cp.flatnonzero(present)]
        return csp.csr_matrix((cp.ones(columns.size), columns.astype(cp.int32),
                               indptr.astype(cp.int32)), shape=(ind.n_rows, ind.n_source))
    return ind.cached("gpu_csr", build)


def cached_for(indicators, tag, build):
    """A structure derived from several indicators, cached on the first one.

    Entries hold the indicators themselves, so an id reused by a new object never hits a stale one.
    """
    key = (tag,) + tuple(id(ind) for ind in indicators)
    entry = indicators[0]._cache.get(key)
    if entry is None or any(a is not b for a, b in zip(entry[0], indicators)):
        entry = indicators[0]._cache[key] = (tuple(indicators), build())
    return entry[1]


# ---------------------------------------------------------------------------------------------
# Sparse products on pieces (ilargi_csr_mm).

class Pieces:
    """A CSR matrix with rows cut into pieces of at most PIECE entries, as ilargi_csr_mm reads it.

    Built from ``indptr`` (int64, one row per output row ``out_rows[r]``), ``indices`` and
    ``data`` (None: every entry is 1). A row longer than PIECE becomes several pieces that add
    into its output row atomically; otherwise each output row is written by one piece (plain
    stores, deterministic). ``group``: lanes per piece, a power of two ≤ 32 at least the mean
    piece length and an eighth of the longest, so short rows do not idle a warp and no lane
    walks more than 8 entries of a piece (the kernel's time is its longest lane's chain of loads).
    """

    def __init__(self, indptr, indices, data, out_rows):
        n_rows = int(indptr.size) - 1
        nnz = int(indptr[-1]) if n_rows > 0 else 0
        if nnz > _INT32_LIMIT:
            raise ValueError(f"a stacked sparse product holds {nnz} entries, above the int32 "
                             "indices of the GPU kernels")
        per_row = cp.maximum(1, -(-cp.diff(indptr) // PIECE))
        ends = cp.cumsum(per_row)
        self.n_pieces = int(ends[-1]) if n_rows > 0 else 0
        self.atomic = self.n_pieces > n_rows
        if self.atomic:
            row = cp.searchsorted(ends, cp.arange(self.n_pieces), side="right")
            starts = indptr[row] + (cp.arange(self.n_pieces) - (ends - per_row)[row]) * PIECE
            indptr = cp.concatenate([starts, indptr[-1:]])
            out_rows = out_rows[row]
        longest = int(cp.diff(indptr).max()) if self.n_pieces else 0
        lanes = max(nnz / max(self.n_pieces, 1), longest / 8, 1.0)
        self.group = int(min(32, 2 ** int(np.ceil(np.log2(lanes)))))
        self.indptr = cp.ascontiguousarray(indptr, dtype=cp.int32)
        self.indices = cp.ascontiguousarray(indices, dtype=cp.int32)
        self.data = None if data is None else _contiguous(data)
        self.real = np.dtype(np.float64) if data is None else self.data.dtype
        self.out_rows = cp.ascontiguousarray(out_rows, dtype=cp.int32)

    def run(self, X, m, out, accumulate=False, weight=None, labels=None):
        """out[out_rows] (=, or += with ``accumulate``) this · (diag(weight) X): X rows × m float64.

        ``labels``: X is the one-hot matrix of these int32 labels (m columns), not read.
        """
        if self.atomic and not accumulate:
            _fill_zero(out)
        if self.n_pieces == 0:
            return out
        mode = 2 if self.atomic else int(bool(accumulate))
        # With m columns, the m pairs of a piece already spread it over lanes (reading each entry's
        # row of X in one transaction): fewer lanes per pair.
        group = max(1, self.group >> (int(m).bit_length() - 1))
        args = (self.indptr, self.indices,
                _dummy(self.real) if self.data is None else self.data, np.int32(self.data is not None),
                _dummy(np.float64) if weight is None else weight, np.int32(weight is not None),
                _dummy(np.float64) if X is None else X,
                _dummy(np.int32) if labels is None else labels, np.int32(labels is not None),
                np.int32(m), np.int32(self.n_pieces), self.out_rows, np.int32(group),
                np.int32(mode), out)
        launch("ilargi_csr_mm", self.real, self.n_pieces * m * group, args)
        return out


def _pieces_from_entries(rows, cols, data, n_rows):
    """Pieces of the n_rows-row matrix with entries (rows, cols, data) (any order)."""
    order = cp.argsort(rows)
    indptr = cp.zeros(n_rows + 1, dtype=cp.int64)
    if rows.size:
        indptr[1:] = cp.cumsum(cp.bincount(rows, minlength=n_rows))
    return Pieces(indptr, cols[order], data[order], cp.arange(n_rows, dtype=cp.int32))


# ---------------------------------------------------------------------------------------------
# The two primitives of every rule: gather g(Z, rows) and segment-sum s(Y, rows, n_p).

def gather(Z, ind, out=None):
    """g(Z, rows): row i of the result is Z[rows[i]], or 0 where rows[i] = -1 (into out if given)."""
    if ind.is_identity:
        if out is None:
            return Z
        out[...] = Z
        return out
    Z = _contiguous(Z)
    if out is None:
        out = cp.empty((ind.n_rows,) + Z.shape[1:], dtype=Z.dtype)
    if Z.shape[0] == 0:
        out.fill(0)
        return out
    m = _width(Z)
    launch("ilargi_gather", Z.dtype, ind.n_rows * m,
           (Z, rows32(ind), np.int64(ind.n_rows), np.int32(m), out, np.int32(0)))
    return out


def gather_add(out, Z, ind):
    """out += g(Z, rows), allocating out on first use (out=None); returns the (new) out."""
    if out is None:
        return gather(Z, ind) if not ind.is_identity else Z
    if ind.is_identity:
        out += Z
        return out
    out = _contiguous(out)
    Z = _contiguous(Z, out.dtype)
    if Z.shape[0] == 0:
        return out
    m = _width(Z)
    launch("ilargi_gather", out.dtype, ind.n_rows * m,
           (Z, rows32(ind), np.int64(ind.n_rows), np.int32(m), out, np.int32(1)))
    return out


def segment_sum(Y, ind):
    """s(Y, rows, n_p) = Iᵀ·Y, accumulated in float64 (float32 Y gives a float32 result)."""
    if ind.is_identity:
        return Y
    Y = _contiguous(Y)
    shape = (ind.n_source,) + Y.shape[1:]
    if SEGMENT_SUM == "csr":
        out = transposed_indicator(ind) @ Y
    elif SEGMENT_SUM == "atomic":
        out = cp.zeros(shape, dtype=cp.float64)
        launch("ilargi_segment_sum_atomic", Y.dtype, ind.n_rows * _width(Y),
               (Y, rows32(ind), np.int64(ind.n_rows), np.int32(_width(Y)), out))
    else:
        out = indicator_pieces(ind).run(_contiguous(Y, np.float64), _width(Y),
                                        cp.empty(shape, dtype=cp.float64))
    return out.astype(Y.dtype, copy=False)


def _scatter_add(values, index, size):
    """bincount(index, weights=values, minlength=size) without bincount's device syncs."""
    out = cp.zeros(size, dtype=cp.float64)
    values = _contiguous(values)
    index = cp.ascontiguousarray(index, dtype=cp.int32)
    launch("ilargi_segment_sum_atomic", values.dtype, index.size,
           (values, index, np.int64(index.size), np.int32(1), out))
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
    both, inverse, indices, indptr, ones = cached_for(
        (first, second), "gpu_cooccurrence", lambda: _cooccurrence_pattern(first, second))
    if both is None:
        return None
    data = ones if w is None else _scatter_add(cp.asarray(w)[both], inverse, indices.size)
    return csp.csr_matrix((data, indices, indptr), shape=(first.n_source, second.n_source))


def _cooccurrence_pattern(first, second):
    rows_p = _index_vector(first).astype(cp.int64)
    rows_q = _index_vector(second).astype(cp.int64)
    both = cp.flatnonzero((rows_p >= 0) & (rows_q >= 0))
    if both.size == 0:
        return None, None, None, None, None
    keys, inverse = cp.unique(rows_p[both] * second.n_source + rows_q[both], return_inverse=True)
    inverse = inverse.ravel().astype(cp.int32)
    row, col = keys // second.n_source, keys % second.n_source
    indptr = cp.concatenate([cp.zeros(1, dtype=cp.int64),
                             cp.cumsum(cp.bincount(row, minlength=first.n_source))])
    ones = _scatter_add(cp.ones(both.size), inverse, keys.size)
    return both, inverse, col.astype(cp.int32), indptr.astype(cp.int32), ones


# ---------------------------------------------------------------------------------------------
# Small helpers on sources (dense CuPy array or cupyx CSR).

def _entry_rows(S):
    """The row of every stored entry of a CSR S, int32."""
    return cp.searchsorted(S.indptr[1:], cp.arange(S.nnz, dtype=S.indptr.dtype),
                           side="right").astype(cp.int32)


def _csr_parts(S):
    """(indptr, indices) of a CSR as int32, the form the kernels read."""
    return S.indptr.astype(cp.int32, copy=False), S.indices.astype(cp.int32, copy=False)


_ONES = {}


def _ones(size, dtype):
    """A device vector of ones (never written), the last few sizes cached."""
    key = (int(size), np.dtype(dtype))
    if key not in _ONES:
        if len(_ONES) >= 4:
            _ONES.pop(next(iter(_ONES)))
        _ONES[key] = cp.ones(int(size), dtype=dtype)
    return _ONES[key]


def row_sums(S):
    """Per-row sums as S·1 (a GEMV/SpMV; CuPy's sum over the rows of a C-order matrix is far
    slower), accumulated in float64."""
    if csp.issparse(S):
        return S @ _ones(S.shape[1], np.float64)
    if S.dtype != np.float64:
        return S.sum(axis=1, dtype=cp.float64)  # float32: accumulate in float64
    return S @ _ones(S.shape[1], np.float64)


def column_sums(S):
    """Per-column sums as Sᵀ·1 (a GEMV/SpMV), accumulated in float64."""
    if csp.issparse(S):
        return S.T @ _ones(S.shape[0], np.float64)
    if S.dtype != np.float64:
        return S.sum(axis=0, dtype=cp.float64)
    return S.T @ _ones(S.shape[0], np.float64)


def column_min_max(S):
    """Per-column (min, max) of S, implicit zeros of a sparse S included."""
    if not csp.issparse(S):
        return S.min(axis=0), S.max(axis=0)
    columns = S.T.tocsr()  # the columns of S as rows
    indptr, _ = _csr_parts(columns)
    n_columns, width = columns.shape
    low, high = cp.empty(n_columns), cp.empty(n_columns)
    launch("ilargi_csr_row_extrema", np.float64, n_columns,
           (indptr, _contiguous(columns.data, np.float64), np.int32(n_columns), np.int32(width),
            low, high))
    return low, high


def zero_rows(S, mask):
    """A copy of S with the rows in ``mask`` set to 0 (sparse: their entries dropped)."""
    mask = cp.asarray(mask)
    if csp.issparse(S):
        entry_row = _entry_rows(S)
        kept = cp.flatnonzero(~mask[entry_row])
        return _coo_to_csr(S.data[kept], entry_row[kept], S.indices[kept], S.shape)
    out = S.copy()
    out[mask] = 0
    return out


def select_rows(S, mask):
    mask = cp.asarray(mask)
    return S if bool(mask.all()) else S[cp.flatnonzero(mask)]


def select_columns(S, idx):
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
    return _with_data(S, S.data * c[_entry_rows(S)])


def product(S, X, out=None):
    """S·X for a source S and a dense operand X (cuBLAS or cuSPARSE), into out if given."""
    if out is None:
        return S @ X
    out[...] = S @ X
    return out


def scale_rows(S, v):
    """diag(v)·S; a sparse S stays sparse (CSR)."""
    v = cp.asarray(v)
    return _scale_rows(as_csr(S), v) if is_sparse(S) else S * v[:, None]


def _sparse_product(A, B):
    A, B = A.tocsr(), B.tocsr()
    dtype = np.result_type(A.dtype, B.dtype)
    return (A if A.dtype == dtype else A.astype(dtype)) @ (B if B.dtype == dtype else B.astype(dtype))


def weighted_gram(S, c=None):
    """Sᵀ·diag(c)·S (no test of c's sign: that would synchronize the device)."""
    if csp.issparse(S):
        return _sparse_product(S.T, S if c is None else _scale_rows(S, c))
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
        if not self.sparse:
            return self.dense
        data, r, c = (cp.concatenate(x) for x in zip(*self.triplets))
        return _coo_to_csr(data, r, c, (self.d, self.d))


def _as_slice(cols):
    """A host column mapping as a slice when its columns are contiguous, else as given."""
    cols = np.asarray(cols)
    if cols.size and cols[-1] - cols[0] == cols.size - 1 and bool((np.diff(cols) == 1).all()):
        return slice(int(cols[0]), int(cols[-1]) + 1)
    return cols


def _as_index(cols):
    return cp.arange(cols.start, cols.stop) if isinstance(cols, slice) else device_index(cols)


def _coo_to_csr(data, rows, cols, shape):
    """CSR from triplets, duplicates summed."""
    coo = csp.coo_matrix((data, (rows.astype(cp.int32), cols.astype(cp.int32))), shape=shape)
    coo.sum_duplicates()
    return coo.tocsr()


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
    n_rows, width = S.shape
    indptr, indices = _csr_parts(S)
    out = cp.empty(n_rows)
    launch("ilargi_csr_row_min_affine", np.float64, n_rows,
           (indptr, indices, _contiguous(S.data, np.float64), _contiguous(scale),
            _contiguous(shift), cp.argsort(shift).astype(cp.int32), np.int32(n_rows),
            np.int32(width), out))
    return out


def column_moments(S, weights, total):
    """Per-column weighted mean and centred sum of squares of S (row r counted weights[r] times).

    As cpu.column_moments: values relative to one used row, so a constant column gives exactly
    its value and 0; for a sparse S the implicit zeros add (total − stored weight)·(0 − mean)².
    """
    weights = cp.asarray(weights, dtype=cp.float64)
    reference = S[int(cp.flatnonzero(weights)[0])]
    reference = reference.toarray().ravel() if csp.issparse(reference) else reference
    if not csp.issparse(S):
        deviation = S - reference
        offset = (weights @ deviation) / total
        deviation -= offset
        return reference + offset, weights @ (deviation * deviation)
    entry_weight = weights[_entry_rows(S)]
    width = S.shape[1]
    stored_weight = _scatter_add(entry_weight, S.indices, width)
    from_reference = S.data - reference[S.indices]
    offset = (_scatter_add(entry_weight * from_reference, S.indices, width)
              - (total - stored_weight) * reference) / total
    mean = reference + offset
    deviation = from_reference - offset[S.indices]
    stored = _scatter_add(entry_weight * deviation ** 2, S.indices, width)
    return mean, stored + (total - stored_weight) * mean ** 2


def square_excess(S, scale, shift, weights=None, chunk_cells=2 ** 24):
    """Σ over the cells of a part of (a·s + b)² − b² = a·s·(a·s + 2b), per source row
    (weights=None) or per column with source row r counted weights[r] times (see cpu).

    Dense sources are read in row chunks, so no copy of the whole source is made.
    """
    scale, shift = cp.asarray(scale, dtype=cp.float64), cp.asarray(shift, dtype=cp.float64)
    if csp.issparse(S):
        entry_row, j = _entry_rows(S), S.indices
        v = S.data * scale[j]
        excess = v * (v + 2 * shift[j])
        if weights is None:
            return _scatter_add(excess, entry_row, S.shape[0])
        return _scatter_add(excess * cp.asarray(weights)[entry_row], j, S.shape[1])
    out = cp.zeros(S.shape[0] if weights is None else S.shape[1])
    step = max(1, chunk_cells // max(S.shape[1], 1))
    for start in range(0, S.shape[0], step):
        v = S[start:start + step] * scale
        excess = v * (v + 2 * shift)
        if weights is None:
            out[start:start + step] = excess.sum(axis=1)
        else:
            out += cp.asarray(weights, dtype=cp.float64)[start:start + step] @ excess
    return out


def row_moments(S, scale, shift, chunk_cells=2 ** 24):
    """Per-row mean and centred sum of squares of S·diag(a_p) + b_p over its d_p columns.

    As cpu.row_moments: a sparse S with one shift value b is done on the stored cells (the
    implicit cells add (d_p − k)·(b − m)²); otherwise rows are expanded in dense chunks (a
    complement sum over varying b would cancel), O(n_p·d_p) work on the source only.
    """
    scale, shift = cp.asarray(scale, dtype=cp.float64), cp.asarray(shift, dtype=cp.float64)
    n_rows, d = S.shape
    if csp.issparse(S) and bool(shift.min() == shift.max()):
        entry_row, j = _entry_rows(S), S.indices
        per_row = cp.diff(S.indptr)
        values = S.data * scale[j] + shift[j]
        b = shift[0]
        mean = (_scatter_add(values, entry_row, n_rows) + (d - per_row) * b) / d
        stored = _scatter_add((values - mean[entry_row]) ** 2, entry_row, n_rows)
        return mean, stored + (d - per_row) * (b - mean) ** 2
    step = max(1, chunk_cells // max(d, 1))
    means, sums = [], []
    for start in range(0, n_rows, step):
        block = S[start:start + step]
        values = (block.toarray() if csp.issparse(block) else block) * scale + shift
        mean = values.mean(axis=1)
        means.append(mean)
        sums.append(((values - mean[:, None]) ** 2).sum(axis=1))
    return cp.concatenate(means), cp.concatenate(sums)


# ---------------------------------------------------------------------------------------------
# Materialization (only when a plan, a test or the user asks for the joined table).

def materialize_dense(parts, n, d, dtype):
    check_memory(n * d * np.dtype(dtype).itemsize, f"materializing a dense {n} × {d} table")
    out = cp.zeros((n, d), dtype=dtype)
    for part in parts:
        S, ind = part.source, part.indicator
        if csp.issparse(S):
            block = (S if ind.is_identity else _indicator_csr(ind) @ S).toarray()
        else:
            block = gather(S, ind)
        out[:, device_index(part.cols)] += block
    return out


def materialize_sparse(parts, n, d):
    # Each present target row copies its source row: nnz(S_p) · n_present / n_p entries on average.
    entries = sum(part.source.nnz * part.indicator.n_present / max(part.source.shape[0], 1)
                  for part in parts)
    check_memory(int(entries * 16 + n * 4) * 2, f"materializing a sparse {n} × {d} table")
    data, rows, cols = [], [], []
    for part in parts:
        S, ind = part.source, part.indicator
        block = (S if ind.is_identity else _indicator_csr(ind) @ S).tocoo()
        data.append(block.data)
        rows.append(block.row)
        cols.append(device_index(part.cols)[block.col])
    return _coo_to_csr(cp.concatenate(data), cp.concatenate(rows), cp.concatenate(cols), (n, d))


# ---------------------------------------------------------------------------------------------
# Stacked passes: every part of T₀ in a few launches (module docstring).

def fused_fact(parts):
    """The part a row pass reads itself (an identity part, dense, ≤ FACT_MAX_WIDTH columns).

    Reading the fact table's rows in the pass that gathers the dimensions, for both T·y and
    Tᵀ·w, reads the largest source once instead of twice. None if there is no such part.
    """
    for p, part in enumerate(parts):
        if (part.indicator.is_identity and not is_sparse(part.source)
                and part.source.shape[1] <= FACT_MAX_WIDTH):
            return p
    return None


def contiguous_source(part, dtype):
    """The part's dense source as a C-contiguous ``dtype`` array (a copy cached if one is needed)."""
    source, real = part.source, _real(dtype)
    if source.dtype == real and source.flags.c_contiguous:
        return source
    return part.indicator.cached(("gpu_contiguous", id(source), real.char),
                                 lambda: cp.ascontiguousarray(source, dtype=real))


def _cached_on_parts(parts, tag, build):
    """A structure derived from these parts, cached on the first one while they live.

    Parts are immutable (source, indicator, mapping), so the structure stays valid; entries hold
    the parts themselves, so an id reused by a new object never hits a stale entry.
    """
    cache = parts[0].__dict__.setdefault("_gpu_cache", {})
    key = (tag,) + tuple(id(part) for part in parts)
    entry = cache.get(key)
    if entry is None or any(a is not b for a, b in zip(entry[0], parts)):
        entry = cache[key] = (tuple(parts), build())
    return entry[1]


def _entries(S):
    """(rows int64, columns, values) of S's stored entries; a dense S stores every cell."""
    if is_sparse(S):
        S = as_csr(S)
        return _entry_rows(S).astype(cp.int64), S.indices, S.data
    n_rows, width = S.shape
    return (cp.repeat(cp.arange(n_rows, dtype=cp.int64), width),
            cp.tile(cp.arange(width, dtype=cp.int32), n_rows), cp.ascontiguousarray(S).ravel())


def _pieces_from_entries(rows, cols, data, n_rows, out_rows):
    """Pieces of the matrix with entries (rows, cols, data) in any order; row r writes out_rows[r]."""
    order = cp.argsort(rows)
    indptr = cp.zeros(n_rows + 1, dtype=cp.int64)
    if rows.size:
        indptr[1:] = cp.cumsum(cp.bincount(rows, minlength=n_rows))
    return Pieces(indptr, cols[order], data[order], out_rows)


def _product_into(out, A, B):
    """out[...] = A·B through cuBLAS, without converting A (out: a C-contiguous float64 view)."""
    if A.dtype == np.float64:
        cp.dot(A, B, out=out)
    else:
        out[...] = A @ B.astype(A.dtype)


def _zero():
    """A device scalar 0 (never written): the c0 of passes without a shift."""
    key = ("zero", np.dtype(np.float64))
    if key not in _DEVICE:
        _DEVICE[key] = cp.zeros(1)
    return _DEVICE[key]


class RowPlan:
    """The parts of T₀ in the form the stacked passes read, built once per tuple of parts.

    ``fact``: the part the row pass reads itself (:func:`fused_fact`; ``separate_fact``), or None.
    Every other part is *gathered* into a slot: parts that share an indicator (a table split into
    numeric and one-hot parts) share one, so the table is gathered and segment-summed once. A
    slot's per-source-row values live at [offset, offset + n_p) of stacked buffers of ``total``
    rows (U forward, B backward); ``R`` (P slots × n int32, identity spelled out as 0..n-1) says
    which row of each slot every target row takes. Slots go through the stacked sparse products
    ``z`` (Z: rows = stacked source rows, columns = target columns) and ``zt`` (Zᵀ of the sources
    with unreferenced non-finite rows zeroed), except a large dense part when ``cublas``
    (``dense``: cuBLAS multiplies it, in a slot of its own; graph capture cannot call cuBLAS).
    ``segment_pieces``: the stacked Iᵀ, a segment sum of every slot in one launch. Components are
    built on first use.
    """

    def __init__(self, parts, n, separate_fact=True, cublas=True):
        self.n = int(n)
        self.d = 1 + max(int(part.cols.max()) for part in parts)
        f = fused_fact(parts) if separate_fact else None
        self.fact = None if f is None else parts[f]
        slots = {}
        for p, part in enumerate(parts):
            if p == f:
                continue
            big = cublas and not is_sparse(part.source) and part.source.size > SMALL_DENSE
            slots.setdefault(("cublas", id(part)) if big else id(part.indicator), []).append(part)
        self.indicators = [group[0].indicator for group in slots.values()]
        self.P = len(self.indicators)
        starts = np.concatenate([[0], np.cumsum([ind.n_source for ind in self.indicators],
                                                dtype=np.int64)])
        self.offsets = [int(v) for v in starts[:-1]]
        self.total = int(starts[-1])
        self.offsets_device = (cp.asarray(starts[:-1].astype(np.int64)) if self.P
                               else _dummy(np.int64))
        self.dense, self.stacked = [], []
        for offset, (key, group) in zip(self.offsets, slots.items()):
            if isinstance(key, tuple):
                self.dense.append((offset, group[0]))
            else:
                self.stacked.append((offset, group))

    @property
    def row_real(self):
        """The element type ilargi_rows reads: the fact table's, else float64 (v, y in it)."""
        return np.dtype(np.float64) if self.fact is None else _real(self.fact.source.dtype)

    def build(self):
        """Build every component now (a graph capture cannot allocate)."""
        return self.R, self.z, self.zt, self.segment_pieces, self._row_pass

    @cached_property
    def R(self):
        R = cp.empty((max(self.P, 1), self.n), dtype=cp.int32)
        for p, ind in enumerate(self.indicators):
            R[p] = cp.arange(self.n, dtype=cp.int32) if ind.is_identity else rows32(ind)
        return R

    @cached_property
    def z(self):
        return self._stacked_sources(transposed=False)

    @cached_property
    def zt(self):
        return self._stacked_sources(transposed=True)

    def _stacked_sources(self, transposed):
        """Pieces of Z (forward, the sources) or Zᵀ (backward, the summable sources)."""
        if not self.stacked:
            return None
        rows, cols, data, out_rows = [], [], [], []
        local = 0
        for offset, group in self.stacked:
            n_source = group[0].indicator.n_source
            for part in group:  # parts of one slot add into the same stacked rows
                S = rules.summable(part) if transposed else part.source
                entry_rows, entry_cols, values = _entries(S)
                rows.append(entry_rows + (offset if transposed else local))
                cols.append(device_index(part.cols)[entry_cols].astype(cp.int64))
                data.append(values)
            out_rows.append(cp.arange(offset, offset + n_source, dtype=cp.int32))
            local += n_source
        real = _real(np.result_type(*(x.dtype for x in data)))
        rows, cols = cp.concatenate(rows), cp.concatenate(cols)
        data = cp.concatenate([x.astype(real, copy=False) for x in data])
        if transposed:  # rows: target columns; entries: stacked source rows of B
            return _pieces_from_entries(cols, rows, data, self.d,
                                        cp.arange(self.d, dtype=cp.int32))
        return _pieces_from_entries(rows, cols, data, local, cp.concatenate(out_rows))

    @cached_property
    def segment_pieces(self):
        """The stacked Iᵀ (total × n): B_p = I_pᵀ·Y for every gathered part in one launch."""
        if not self.P:
            return None
        indptrs, orders, done = [], [], 0
        for ind in self.indicators:
            indptr, order = segments(ind)
            indptrs.append(indptr[:-1] + done)
            orders.append(order)
            done += int(order.size)
        indptr = cp.concatenate(indptrs + [cp.full(1, done, dtype=cp.int64)])
        return Pieces(indptr, cp.concatenate(orders), None,
                      cp.arange(self.total, dtype=cp.int32))

    @cached_property
    def counts(self):
        """cnt of every slot, stacked (column sums are Zᵀ·cnt)."""
        return cp.concatenate([ind.counts() for ind in self.indicators])

    def forward(self, x, m, scale=None):
        """U (total·m, float64): U_p = S_p·(scale⊙x)[cols_p] for every gathered part.

        x: d × m (or d) float64, C-contiguous; ``scale`` (the graphed steps) needs no dense parts.
        """
        U = cp.empty(self.total * m)
        if self.z is not None:
            self.z.run(x, m, U, weight=scale)
        rows = U if m == 1 else U.reshape(self.total, m)
        for offset, part in self.dense:
            _product_into(rows[offset:offset + part.source.shape[0]], part.source,
                          x[_target(part)])
        return U

    def segment(self, Y, m, zeros=None):
        """B (total·m, float64) = the stacked Iᵀ·Y (Y: n × m float64, C-contiguous), into
        ``zeros`` (a zeroed buffer, which saves a fill where rows were cut) or a new array."""
        if zeros is None:
            return self.segment_pieces.run(Y, m, cp.empty(self.total * m))
        return self.segment_pieces.run(Y, m, zeros, accumulate=True)

    def backward(self, B, m, G):
        """G (d × m or d, float64, C-contiguous) += Σ_p M_p·S_pᵀ·B_p over the gathered parts."""
        if self.zt is not None:
            self.zt.run(B, m, G, accumulate=True)
        rows = B if m == 1 else B.reshape(self.total, m)
        for offset, part in self.dense:
            S = rules.summable(part)
            G[_target(part)] += S.T @ rows[offset:offset + S.shape[0]].astype(S.dtype, copy=False)

    def fact_product(self, x):
        """F·x[cols_F] (n × m, float64) for the fact table, or None without one."""
        if self.fact is None:
            return None
        F = self.fact.source
        out = F @ x[_target(self.fact)].astype(F.dtype, copy=False)
        return cp.ascontiguousarray(out, dtype=cp.float64)

    @cached_property
    def _row_pass(self):
        """(F, W, f_cols, blocks, threads, shared bytes) of ilargi_rows for this plan.

        A block holds as many warps (≤ 8) as 48 KiB of shared memory allow for the fact's tiles;
        the grid is as many blocks as fit on the GPU at once (each warp then loops over tiles).
        """
        if self.fact is None:
            F, W, f_cols = _dummy(np.float64), 0, _dummy(np.int32)
        else:
            F, W = contiguous_source(self.fact, self.row_real), self.fact.source.shape[1]
            f_cols = device_index(self.fact.cols)
        tiles = -(-self.n // 32)
        per_warp = 8 * (33 * W + 32)
        warps = max(1, min(8, (49152 - 8 * W) // per_warp, tiles))
        shared = 8 * W + warps * per_warp
        resident = max(1, min(64 // warps, 32, 233472 // (shared + 1024),
                              65536 // (64 * 32 * warps)))
        blocks = max(1, min(-(-tiles // warps), _sm_count() * resident))
        return F, W, f_cols, blocks, 32 * warps, shared

    def rows(self, x, U, mode, out, c0, v=None, y=None, inv_total=0.0, G=None, total=None):
        """Launch ilargi_rows (modes 0/1/2 as in the CUDA source) over the n target rows."""
        if self.n == 0:
            return
        real = self.row_real
        F, W, f_cols, blocks, threads, shared = self._row_pass
        args = (F, np.int32(W), f_cols, x, self.R, np.int32(self.P), np.int64(self.n),
                _dummy(np.float64) if U is None else U, self.offsets_device, c0, np.int32(mode),
                _dummy(real) if v is None else _contiguous(v, real), np.int32(v is not None),
                _dummy(real) if y is None else _contiguous(y, real), np.float64(inv_total), out,
                _dummy(np.float64) if G is None else G,
                _dummy(np.float64) if total is None else total)
        launch("ilargi_rows", real, 0, args, blocks=blocks, threads=threads, shared=shared)


def row_plan(parts, n, separate_fact=True, cublas=True):
    """The :class:`RowPlan` of these parts (cached on them), or None where the kernels' int32
    indices cannot hold it (then the rules run part by part)."""
    if not parts:
        return None
    stacked = sum(int(part.source.nnz) if is_sparse(part.source) else int(part.source.size)
                  for part in parts)
    if max(n, len(parts) * n, stacked) > _INT32_LIMIT:
        return None
    return _cached_on_parts(parts, ("gpu_row_plan", separate_fact, cublas),
                            lambda: RowPlan(parts, n, separate_fact, cublas))


def _stacked_plan(parts, n):
    return row_plan(parts, n) if STACKED else None


def _result_dtype(parts, operand):
    return np.result_type(operand.dtype, *(part.source.dtype for part in parts))


def fused_lmm(parts, n, X):
    """T₀·X (rules.lmm) in stacked passes: forward U, then one pass over the target rows."""
    plan = _stacked_plan(parts, n)
    if plan is None:
        return None
    m = _width(X)
    x = cp.ascontiguousarray(X, dtype=cp.float64)
    U = plan.forward(x, m) if plan.P else None
    if X.ndim == 1:
        out = cp.empty(n)
        plan.rows(x, U, 0, out, _zero())
    else:
        out = plan.fact_product(x)
        if plan.P:
            accumulate = out is not None
            out = cp.empty((n, m)) if out is None else out
            launch("ilargi_gather_parts", np.float64, n * m,
                   (plan.R, np.int32(plan.P), np.int64(n), U, plan.offsets_device,
                    np.int32(m), np.int32(accumulate), out))
    return out.astype(_result_dtype(parts, X), copy=False)


def fused_rowsums(parts, n):
    """rowSums(T₀) (rules.rowsums) as T₀·1 in stacked passes."""
    plan = _stacked_plan(parts, n)
    return None if plan is None else fused_lmm(parts, n, _ones(plan.d, np.float64))


def fused_tmm(parts, d, Y):
    """T₀ᵀ·Y (rules.tmm): B = Iᵀ·Y for every part in one launch, then G = Zᵀ·B (+ cuBLAS)."""
    plan = _stacked_plan(parts, Y.shape[0])
    if plan is None:
        return None
    m = _width(Y)
    y = cp.ascontiguousarray(Y, dtype=cp.float64)
    zeros = cp.zeros(plan.total * m + d * m)  # B and G, zeroed in one launch
    B, G = zeros[:plan.total * m], zeros[plan.total * m:].reshape((d, m) if Y.ndim == 2 else d)
    if plan.P:
        plan.backward(plan.segment(y, m, B), m, G)
    if plan.fact is not None:
        F = rules.summable(plan.fact)
        G[_target(plan.fact)] += F.T @ y.astype(F.dtype, copy=False)
    return G.astype(_result_dtype(parts, Y), copy=False)


def fused_colsums(parts, d):
    """colSums(T₀) (rules.colsums) = Zᵀ·cnt (stacked counts, built once) + Fᵀ·1."""
    plan = _stacked_plan(parts, parts[0].indicator.n_rows) if parts else None
    if plan is None:
        return None
    G = cp.zeros(d)
    if plan.P:
        plan.backward(plan.counts, 1, G)
    if plan.fact is not None:
        G[_target(plan.fact)] += column_sums(plan.fact.source)
    return G


def fused_cross_block(first, second, w):
    """S_pᵀ·C_pq·S_q (rules._cross_block) without a co-occurrence matrix where one is not needed.

    Two parts of one table (one indicator): C = diag(s(w, rows)), a row scaling. An identity part
    p, dense: C_pq = diag(w)·I_q, so Cᵀ·S_p = s(w⊙S_p, rows_q), one segment-sum launch over the
    fact rows (no transposed sparse product). None otherwise (the rule's co-occurrence path).
    """
    if not STACKED:
        return None
    if first.indicator is second.indicator:
        ind = first.indicator
        c = (ind.counts() if w is None else segment_sum(cp.asarray(w, dtype=cp.float64), ind))
        S_p, S_q = rules.summable(first), rules.summable(second)
        scaled = scale_rows(S_q, c)
        if is_sparse(scaled):
            return _sparse_product(S_p.T, scaled) if is_sparse(S_p) else (scaled.T @ S_p).T
        return S_p.T @ scaled
    for fact, other, flip in ((first, second, False), (second, first, True)):
        if fact.indicator.is_identity and not is_sparse(fact.source):
            S = cp.ascontiguousarray(rules.summable(fact), dtype=cp.float64)
            weight = None if w is None else cp.ascontiguousarray(w, dtype=cp.float64)
            ind = other.indicator
            A = indicator_pieces(ind).run(S, S.shape[1], cp.empty((ind.n_source, S.shape[1])),
                                          weight=weight)
            S_other = rules.summable(other)
            block = (S_other.T @ A).T if is_sparse(S_other) else A.T @ S_other
            return block.T if flip else block
    return None


def gramvec(nm, y, v=None, alpha=1.0, beta=0.0, z=None):
    """α·Tᵀ(v⊙(T·y)) + β·z in one stacked pass, or None for the operator chain.

    x = a⊙y; U = Z·x (+ cuBLAS for large dense parts); one row pass forms q_i = F_i·x_F +
    Σ_p U_p[rows_p[i]] + bᵀy and w_i = v_i·q_i, adds Fᵀw (F read once for both products) and
    Σw; then B = Iᵀw for every part in one launch, G += Zᵀ·B; finally a⊙G + b·Σw. The chain runs
    for a transposed view, a 2-D y, operands of the wrong shape, or FUSED_GRAMVEC off.
    """
    n, d = nm.shape
    if not FUSED_GRAMVEC or nm._transposed or not nm.parts:
        return None
    y = cp.asarray(y)
    if y.shape != (d,) or y.dtype.kind not in "biuf":
        return None
    if v is not None:
        v = cp.asarray(v)
        if v.shape != (n,) or v.dtype.kind not in "biuf":
            return None
    plan = _stacked_plan(nm.parts, n)
    if plan is None:
        return None
    result = np.result_type(nm.dtype, y.dtype, np.float32)
    a, b = nm._scale, nm._shift
    x = cp.ascontiguousarray(y, dtype=cp.float64)
    if a is not None:
        x = cp.ascontiguousarray(a * x, dtype=cp.float64)
    c0 = _zero() if b is None else cp.dot(b.astype(cp.float64, copy=False),
                                          cp.asarray(y, dtype=cp.float64)).reshape(1)
    U = plan.forward(x, 1) if plan.P else None
    zeros = cp.zeros(plan.total + d + 1)  # B, G and Σw, zeroed in one launch
    B, G, total = zeros[:plan.total], zeros[plan.total:-1], zeros[-1:]
    w = cp.empty(n)
    plan.rows(x, U, 1, w, c0, v=v, G=G, total=total)
    if plan.P:
        plan.backward(plan.segment(w, 1, B), 1, G)
    if a is not None:
        G *= a
    if b is not None:
        G += b * total[0]
    if alpha != 1.0:
        G *= alpha
    if z is not None and beta != 0.0:
        G += beta * cp.asarray(z)
    return G.astype(result, copy=False)
