"""Moving arrays to and from the device, CSR helpers, and the structures derived from indicators.

What the kernels read of an indicator (an int32 index vector, the segments of Iᵀ, its pieces,
CSR forms) never changes, so each is built once and cached on the indicator
(``Indicator.cached``), where every operator and every training iteration reuses it.
"""

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np
import scipy.sparse as sp

from .device import INT32_LIMIT
from .pieces import Pieces

# ---------------------------------------------------------------------------------------------
# Arrays and sources.


def is_sparse(x):
    """Whether x is a sparse matrix (cupyx or SciPy)."""
    return csp.issparse(x) or sp.issparse(x)


def csr_to_device(S):
    """A cupyx CSR copy of a host sparse matrix (int32 indices where they fit)."""
    S = sp.csr_matrix(S)
    index = np.int32 if S.nnz <= INT32_LIMIT else np.int64
    return csp.csr_matrix(
        (
            cp.asarray(S.data),
            cp.asarray(S.indices.astype(index)),
            cp.asarray(S.indptr.astype(index)),
        ),
        shape=S.shape,
    )


def as_csr(x, dtype=None):
    """A cupyx CSR view of x (copying only when the format or dtype must change)."""
    out = csr_to_device(x) if sp.issparse(x) else (x if x.format == "csr" else x.tocsr())
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    return out


def csr(data, indices, indptr, shape):
    """A cupyx CSR matrix from its three arrays."""
    return csp.csr_matrix((data, indices, indptr), shape=shape)


def to_dense(x):
    """x as a dense CuPy array."""
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


def entry_rows(S):
    """The row of every stored entry of a CSR S, int32."""
    return cp.searchsorted(
        S.indptr[1:], cp.arange(S.nnz, dtype=S.indptr.dtype), side="right"
    ).astype(cp.int32)


def coo_to_csr(data, rows, cols, shape):
    """CSR from triplets, duplicates summed."""
    coo = csp.coo_matrix((data, (rows.astype(cp.int32), cols.astype(cp.int32))), shape=shape)
    coo.sum_duplicates()
    return coo.tocsr()


# ---------------------------------------------------------------------------------------------
# Indicator structures, built once per indicator and cached on it.


def rows32(ind):
    """The index vector as int32 (-1 = absent), the form the kernels read."""

    def build():
        if ind.n_source > INT32_LIMIT or ind.n_rows > INT32_LIMIT:
            raise ValueError(
                f"the GPU kernels index at most 2**31 - 1 rows, got an indicator "
                f"{ind.n_rows} × {ind.n_source}"
            )
        return cp.asarray(ind.rows, dtype=cp.int32)

    return ind.cached("gpu_rows32", build)


def index_vector(ind):
    """The index vector on the device, the identity spelled out as 0..n-1 (not cached)."""
    return cp.arange(ind.n_rows) if ind.is_identity else cp.asarray(ind.rows)


def safe_rows(ind):
    """Row indices with absent (-1) entries replaced by 0."""

    def build():
        rows = cp.asarray(ind.rows)
        return cp.where(rows < 0, 0, rows) if ind.n_absent else rows

    return ind.cached("gpu_safe_rows", build)


def absent_positions(ind):
    """Target rows where this source is absent."""
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
    """Iᵀ (n_source × n, entries 1) as :class:`~.pieces.Pieces`: segment sums in one launch."""

    def build():
        indptr, order = segments(ind)
        return Pieces(indptr, order, None, cp.arange(ind.n_source, dtype=cp.int32))

    return ind.cached("gpu_pieces", build)


def transposed_indicator(ind):
    """Iᵀ as a cupyx CSR (n_source × n), data = 1: the cuSPARSE segment-sum operator."""

    def build():
        indptr, order = segments(ind)
        return csp.csr_matrix(
            (cp.ones(order.size), order, indptr.astype(cp.int32)), shape=(ind.n_source, ind.n_rows)
        )

    return ind.cached("gpu_csr_t", build)


def indicator_csr(ind):
    """I as a cupyx CSR (n × n_source): one entry per present target row."""

    def build():
        rows = cp.asarray(ind.rows)
        present = rows >= 0
        indptr = cp.concatenate([cp.zeros(1, dtype=cp.int64), cp.cumsum(present.astype(cp.int64))])
        columns = rows[cp.flatnonzero(present)]
        return csp.csr_matrix(
            (cp.ones(columns.size), columns.astype(cp.int32), indptr.astype(cp.int32)),
            shape=(ind.n_rows, ind.n_source),
        )

    return ind.cached("gpu_csr", build)
