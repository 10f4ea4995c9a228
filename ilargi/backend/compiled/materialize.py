"""Materialization: the joined table T₀ written by the compiled kernels, dense or CSR.

Each value is written once, in parallel, where :func:`ilargi.backend.cpu.materialize_dense` builds
per-part temporaries; joins of many parts are written part by part in tiles of rows (the
package's ``PART_MAJOR_PARTS``, read at call time).
"""

import numpy as np
import scipy.sparse as sp

from .. import compiled
from .kernels import (
    DENSE_COLUMNS,
    dense_columns_kernel,
    dense_csr_kernel,
    dense_nonzeros_kernel,
    join_csr_kernel,
    join_csr_tiles_kernel,
    join_dense_csr_kernel,
    join_dense_kernel,
    join_lengths_kernel,
)
from .launch import NO_ROWS64, thread_count

_NO_VALUES = np.empty(0)

# ---------------------------------------------------------------------------------------------
# Materialization: each value written once, in parallel (cpu's builds per-part temporaries).


def materialize_dense(parts, n, d, dtype):
    """The joined table T₀ as a dense n × d ndarray of ``dtype``; as cpu.materialize_dense."""
    out = np.zeros((n, d), dtype=dtype)
    nb = min(thread_count(), max(n, 1))
    for part in parts:
        S, ind = part.source, part.indicator
        rows = NO_ROWS64 if ind.is_identity else ind.rows
        cols = np.asarray(part.cols, dtype=np.int64)
        if sp.issparse(S):
            S = S.tocsr()
            join_dense_csr_kernel(
                out, S.indptr, S.indices, S.data.astype(dtype, copy=False), rows, cols, nb
            )
        else:
            join_dense_kernel(out, np.ascontiguousarray(S, dtype=dtype), rows, cols, nb)
    return out


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
        R[g] = (
            np.arange(n) + starts[g]
            if ind.is_identity
            else np.where(ind.rows < 0, sink, ind.rows + starts[g])
        )
    nb = min(thread_count(), max(n, 1))
    out_indptr = np.zeros(n + 1, dtype=np.int64)
    join_lengths_kernel(lengths, R, out_indptr, nb)
    np.cumsum(out_indptr, out=out_indptr)
    nnz = int(out_indptr[-1])
    index = np.int32 if max(nnz, d) < 2**31 else np.int64  # as SciPy picks: 4 bytes less per entry
    indices = np.concatenate(
        [np.asarray(part.cols, dtype=index)[S.indices] for part, S in zip(parts, sources)]
    )
    data = np.concatenate([S.data.astype(dtype, copy=False) for S in sources])
    out_indices, out_data = np.empty(nnz, dtype=index), np.empty(nnz, dtype=dtype)
    unsorted = np.zeros(nb, dtype=np.int64)
    join = join_csr_tiles_kernel if len(parts) >= compiled.PART_MAJOR_PARTS else join_csr_kernel
    join(indptr, indices, data, R, out_indptr, out_indices, out_data, unsorted)
    out = sp.csr_array((out_data, out_indices, out_indptr.astype(index, copy=False)), shape=(n, d))
    if unsorted.any():
        out.sort_indices()
    else:
        out.has_sorted_indices = True
    return out


def _csr_of(S):
    """A source as CSR: a dense one in two parallel passes (SciPy's goes through COO, several
    times slower on a tall fact block)."""
    if sp.issparse(S):
        return S.tocsr()
    S = np.ascontiguousarray(S)
    nb = min(thread_count(), max(S.shape[0], 1))
    indptr = np.zeros(S.shape[0] + 1, dtype=np.int64)
    dense_nonzeros_kernel(S, indptr[1:], nb)
    np.cumsum(indptr, out=indptr)
    index = np.int32 if max(int(indptr[-1]), S.shape[1]) < 2**31 else np.int64
    indices, data = np.empty(int(indptr[-1]), dtype=index), np.empty(int(indptr[-1]), S.dtype)
    dense_csr_kernel(S, indptr, indices, data, nb)
    return sp.csr_array((data, indices, indptr), shape=S.shape)


def dense_columns(columns, fills, out):
    """out[:, j] = columns[j], NaN replaced by fills[j]; as
    :func:`ilargi.backend.cpu.dense_columns`."""
    usable = all(
        isinstance(c, np.ndarray) and c.dtype == np.float64 and c.ndim == 1 and c.flags.c_contiguous
        for c in columns
    )
    if not usable or out.dtype != np.float64 or not out.flags.c_contiguous:
        return compiled.cpu.dense_columns(columns, fills, out)
    fills = np.asarray(fills, dtype=np.float64)
    thread_count()
    for at in range(0, len(columns), DENSE_COLUMNS):
        # read-only views all (a Parquet read's columns are): one Numba type for every column
        some = [_read_only(c) for c in columns[at : at + DENSE_COLUMNS]]
        count = len(some)
        some += [_read_only(_NO_VALUES)] * (DENSE_COLUMNS - count)
        padded = np.zeros(DENSE_COLUMNS)
        padded[:count] = fills[at : at + count]
        dense_columns_kernel(out, at, count, padded, *some)
    return out


def _read_only(a):
    view = a.view()
    view.flags.writeable = False
    return view
