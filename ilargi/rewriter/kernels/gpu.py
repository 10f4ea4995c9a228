"""CuPy kernels behind the rewrite rules: the GPU twin of :mod:`.cpu`, function for function.

Gathers and segment sums run as CUDA kernels of ``cuda/ilargi.cu`` (one pass, float64
accumulation, no bounds checks: indices were validated once); products with the small sources go
to cuBLAS/cuSPARSE through CuPy. What does not change across iterations (int32 index vectors, the
segments of Iᵀ, the stacked index vectors of a fused pass, device copies of column mappings) is
built once and cached on the indicators, so a training loop pays for it once.

Two module flags choose between equivalent kernels (``benchmarks/gpu_check.py`` times them):

* ``SEGMENT_SUM`` (env ``ILARGI_GPU_SEGMENT_SUM``): ``"atomic"`` scatters with atomic adds,
  ``"sorted"`` sums each source row's segment in a fixed order (deterministic), ``"csr"`` multiplies
  by a cuSPARSE CSR of Iᵀ.
* ``FUSED_GRAMVEC`` (env ``ILARGI_GPU_FUSED_GRAMVEC``, default on): α·Tᵀ(v⊙(T·y)) + β·z as one
  pass over the target rows instead of the chain T·y, ⊙v, Tᵀ·.

Operations that would build an n × d or n × n dense table check the free device memory first and
raise :class:`DeviceMemoryError` (a MemoryError) naming the operation and the bytes, instead of a
raw out-of-memory error halfway through.
"""
import os
import weakref
from pathlib import Path

import numpy as np
import scipy.sparse as sp

import cupy as cp
import cupyx.scipy.sparse as csp

from .. import rules

xp = cp
name = "gpu"

SEGMENT_SUM = os.environ.get("ILARGI_GPU_SEGMENT_SUM", "atomic")
FUSED_GRAMVEC = os.environ.get("ILARGI_GPU_FUSED_GRAMVEC", "1") != "0"

_SOURCE_PATH = Path(__file__).with_name("cuda") / "ilargi.cu"
_BLOCK = 256
_INT32_LIMIT = 2 ** 31 - 1


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
_SM_COUNT = []


def _real(dtype):
    """The kernel element type for an array dtype: float32 stays, everything else is float64."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


FACT_MAX_WIDTH = 64  # widest fact table a row pass reads itself (see fused_fact)


def _width_bound(width):
    """The compile-time bound ILARGI_FACT_WIDTH for a fact table of ``width`` columns."""
    return max(8, -(-int(width) // 8) * 8)


def kernel(function, dtype=np.float64, width=0):
    """The compiled kernel ``function`` of cuda/ilargi.cu for REAL = float32 or float64.

    ``width``: the fact table's columns, for the row passes that read it (a compile-time bound,
    so their per-thread vectors stay in registers; one module per multiple of 8).
    """
    key = (_real(dtype), _width_bound(width))
    found = _FUNCTIONS.get(key + (function,))
    if found is None:
        module = _MODULES.get(key)
        if module is None:
            ctype = "float" if key[0] == np.float32 else "double"
            source = (f"#define REAL {ctype}\n#define ILARGI_FACT_WIDTH {key[1]}\n"
                      + _SOURCE_PATH.read_text())
            module = _MODULES[key] = cp.RawModule(code=source)
        found = _FUNCTIONS[key + (function,)] = module.get_function(function)
    return found


def launch(function, dtype, work, args, blocks=None, width=0):
    """Run a kernel: a grid-stride one over ``work`` items (none for no work), or ``blocks``."""
    if blocks is None:
        if work <= 0:
            return
        if not _SM_COUNT:
            _SM_COUNT.append(int(cp.cuda.Device().attributes["MultiProcessorCount"]))
        # Enough blocks to fill every SM (2048 threads each), never more than the work needs.
        blocks = max(1, min(-(-work // _BLOCK), _SM_COUNT[0] * (2048 // _BLOCK)))
    kernel(function, dtype, width)((int(blocks),), (_BLOCK,), args)


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
    """(indptr, order), int32: target rows order[indptr[j]:indptr[j+1]] take source row j."""
    def build():
        rows = cp.asarray(ind.rows)
        present = cp.flatnonzero(rows >= 0)
        order = present[cp.argsort(rows[present])]
        per_row = cp.bincount(rows[present], minlength=ind.n_source)
        indptr = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(per_row)])
        return indptr.astype(cp.int32), order.astype(cp.int32)
    return ind.cached("gpu_segments", build)


def transposed_indicator(ind):
    """Iᵀ as a cupyx CSR (n_source × n), data = 1: the cuSPARSE segment-sum operator."""
    def build():
        indptr, order = segments(ind)
        return csp.csr_matrix((cp.ones(order.size), order, indptr),
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
# The two primitives of every rule: gather g(Z, rows) and segment-sum s(Y, rows, n_p).

def gather(Z, ind, out=None):
    """g(Z, rows): row i of the result is Z[rows[i]], or 0 where rows[i] = -1."""
    if ind.is_identity:
        return Z
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
    m = _width(Y)
    if SEGMENT_SUM == "csr":
        out = transposed_indicator(ind) @ Y
    elif SEGMENT_SUM == "sorted":
        indptr, order = segments(ind)
        out = cp.empty(shape, dtype=cp.float64)
        launch("ilargi_segment_sum_sorted", Y.dtype, ind.n_source * m,
               (Y, order, indptr, np.int32(ind.n_source), np.int32(m), out))
    else:
        out = cp.zeros(shape, dtype=cp.float64)
        launch("ilargi_segment_sum_atomic", Y.dtype, ind.n_rows * m,
               (Y, rows32(ind), np.int64(ind.n_rows), np.int32(m), out))
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


def row_sums(S):
    """Per-row sums, accumulated in float64."""
    if csp.issparse(S):
        return S @ cp.ones(S.shape[1], dtype=cp.float64)
    return S.sum(axis=1, dtype=cp.float64)


def column_sums(S):
    """Per-column sums, accumulated in float64."""
    if csp.issparse(S):
        return S.T @ cp.ones(S.shape[0], dtype=cp.float64)
    return S.sum(axis=0, dtype=cp.float64)


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


def _sparse_product(A, B):
    A, B = A.tocsr(), B.tocsr()
    dtype = np.result_type(A.dtype, B.dtype)
    return (A if A.dtype == dtype else A.astype(dtype)) @ (B if B.dtype == dtype else B.astype(dtype))


def weighted_gram(S, c=None):
    """Sᵀ·diag(c)·S; for a dense S and c ≥ 0 as XᵀX with X = sqrt(c)⊙S (one symmetric GEMM)."""
    if csp.issparse(S):
        return _sparse_product(S.T, S if c is None else _scale_rows(S, c))
    if c is None:
        return S.T @ S
    if bool((c >= 0).all()):
        X = S * cp.sqrt(c)[:, None]
        return X.T @ X
    return (S * c[:, None]).T @ S


class BlockAccumulator:
    """Sums d_p × d_q blocks into a d × d result at (rows, cols), dense or sparse."""

    def __init__(self, d, sparse):
        self.d, self.sparse = d, sparse
        self.triplets = [] if sparse else None
        if not sparse:
            check_memory(d * d * 8, f"crossprod (a dense {d} × {d} result)")
        self.dense = None if sparse else cp.zeros((d, d))

    def add(self, rows, cols, block):
        rows, cols = device_index(rows), device_index(cols)
        if self.sparse:
            block = (block if csp.issparse(block) else csp.csr_matrix(block)).tocoo()
            self.triplets.append((block.data, rows[block.row], cols[block.col]))
        else:
            self.dense[cp.ix_(rows, cols)] += to_dense(block)

    def result(self):
        if not self.sparse:
            return self.dense
        data, r, c = (cp.concatenate(x) for x in zip(*self.triplets))
        return _coo_to_csr(data, r, c, (self.d, self.d))


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

    For a sparse S the implicit zeros of each column contribute (total − stored weight)·mean².
    """
    weights = cp.asarray(weights, dtype=cp.float64)
    mean = (S.T @ weights) / total
    if not csp.issparse(S):
        deviation = S - mean
        return mean, weights @ (deviation * deviation)
    entry_weight = weights[_entry_rows(S)]
    deviation = S.data - mean[S.indices]
    width = S.shape[1]
    stored = _scatter_add(entry_weight * deviation ** 2, S.indices, width)
    stored_weight = _scatter_add(entry_weight, S.indices, width)
    return mean, stored + (total - stored_weight) * mean ** 2


def row_moments(S, scale, shift):
    """Per-row mean and centred sum of squares of S·diag(a_p) + b_p (see cpu.row_moments).

    For a sparse S stored cells contribute (v − m)² directly; the implicit cells (value b_j)
    (d_p − k)·(b − m)² when b is constant, else Σ_all (b_j − m)² − Σ_stored (b_j − m)².
    """
    scale, shift = cp.asarray(scale, dtype=cp.float64), cp.asarray(shift, dtype=cp.float64)
    n_rows, d = S.shape
    if not csp.issparse(S):
        values = S * scale + shift
        mean = values.mean(axis=1)
        return mean, ((values - mean[:, None]) ** 2).sum(axis=1)
    entry_row, j = _entry_rows(S), S.indices
    values = S.data * scale[j] + shift[j]
    beta = shift.mean()
    stored_sum = _scatter_add(values, entry_row, n_rows)
    mean = (stored_sum + d * beta - _scatter_add(shift[j], entry_row, n_rows)) / d
    m_entry = mean[entry_row]
    stored = _scatter_add((values - m_entry) ** 2, entry_row, n_rows)
    if bool(shift.min() == shift.max()):
        implicit = (d - cp.diff(S.indptr)) * (beta - mean) ** 2
    else:
        everything = ((shift - beta) ** 2).sum() + d * (beta - mean) ** 2
        implicit = everything - _scatter_add((shift[j] - m_entry) ** 2, entry_row, n_rows)
    return mean, stored + cp.maximum(implicit, 0.0)


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
# The fused pattern α·Tᵀ(v⊙(T·y)) + β·z.

class RowPlan:
    """The parts' index vectors stacked for one pass over the target rows.

    ``R`` (P × n int32, identity parts spelled out as 0..n-1) and ``offsets``: part p's per-source-
    row values live at [offsets[p], offsets[p] + n_p) of a concatenated buffer of ``total`` rows.
    """

    def __init__(self, parts, n):
        if n > _INT32_LIMIT:
            raise ValueError(f"the GPU kernels index at most 2**31 - 1 rows, got {n}")
        sizes = [part.indicator.n_source for part in parts]
        self.offsets = [int(v) for v in np.concatenate([[0], np.cumsum(sizes)[:-1]])]
        self.total = int(sum(sizes))
        self.offsets_device = cp.asarray(np.array(self.offsets, dtype=np.int64))
        self.R = cp.empty((len(parts), n), dtype=cp.int32)
        for p, part in enumerate(parts):
            ind = part.indicator
            self.R[p] = cp.arange(n, dtype=cp.int32) if ind.is_identity else rows32(ind)


def row_plan(parts, n):
    """The RowPlan of these parts, cached on their indicators."""
    if not parts:
        return RowPlan(parts, n)
    return cached_for(tuple(part.indicator for part in parts), "gpu_row_plan",
                      lambda: RowPlan(parts, n))


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


def gramvec(nm, y, v=None, alpha=1.0, beta=0.0, z=None):
    """α·Tᵀ(v⊙(T·y)) + β·z reading each target row once, or None for the generic path.

    u_p = S_p·(a⊙y)[cols_p] for the dimension parts (one small product each), then one kernel over
    the target rows gathers q_i = F_i·(a⊙y)_F + Σ_p u_p[rows_p[i]] + bᵀy (F: the fact table, read
    in the pass), weights it by v_i and scatters w_i back: into per-part buffers, and as w_i·F_i
    into the result; then Σ_p M_p·S_pᵀ·buffer_p and the affine correction a⊙(·) + b·Σw. The generic
    path runs for a transposed view, a 2-D y, operands of the wrong shape, or FUSED_GRAMVEC off.
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
    result = np.result_type(nm.dtype, y.dtype, np.float32)
    parts, a, b = nm.parts, nm._scale, nm._shift
    f = fused_fact(parts)
    real = _real(result if f is None else parts[f].source.dtype)
    others = [part for p, part in enumerate(parts) if p != f]
    # Rows no target row takes are zeroed where they may hold NaN/inf (0·NaN must not leak).
    sources = [rules.summable(part) for part in others]
    plan = row_plan(others, n)
    X = cp.ascontiguousarray(y, dtype=cp.float64)
    scaled = (X if a is None else a * X).astype(real)
    U = cp.empty(plan.total, dtype=real)
    for part, source, offset in zip(others, sources, plan.offsets):
        U[offset:offset + part.indicator.n_source] = source @ scaled[device_index(part.cols)]
    if f is None:
        F, width, f_cols = U, 0, cp.zeros(1, dtype=cp.int32)
    else:
        F, width, f_cols = (contiguous_source(parts[f], real), parts[f].source.shape[1],
                            device_index(parts[f].cols))
    has_scale, scale = (0, cp.zeros(1)) if a is None else (1, cp.ascontiguousarray(a, cp.float64))
    c0 = (cp.zeros(1) if b is None else cp.dot(b, y).reshape(1)).astype(cp.float64)
    B = cp.zeros(plan.total, dtype=cp.float64)
    G = cp.zeros(d, dtype=cp.float64)
    total = cp.zeros(1, dtype=cp.float64)
    weights = U if v is None else _contiguous(v, real)
    launch("ilargi_gramvec_rows", real, n,
           (plan.R, np.int32(len(others)), np.int64(n), U, plan.offsets_device, F,
            np.int32(width), f_cols, X, scale, np.int32(has_scale), weights,
            np.int32(v is not None), c0, B, G, total), width=width)
    for part, source, offset in zip(others, sources, plan.offsets):
        buffer = B[offset:offset + part.indicator.n_source].astype(source.dtype)
        G[device_index(part.cols)] += source.T @ buffer
    if a is not None:
        G *= a
    if b is not None:
        G += b * total[0]
    if alpha != 1.0:
        G *= alpha
    if z is not None and beta != 0.0:
        G += beta * cp.asarray(z)
    return G.astype(result, copy=False)
