"""Products of one source: S·X, Sᵀ·Y, column sums, Grams, and crossprod's fact pass.

Each function takes the compiled route where it pays and hands the rest to the NumPy/SciPy
kernel of :mod:`ilargi.backend.cpu` (BLAS held at one thread, as between compiled kernels): a tall,
narrow dense source (``_tall``: at least ``SMALL`` values) meets a narrow operand (up to
``PRODUCT_WIDE`` / ``TRANSPOSED_WIDE`` columns, ``GRAM_WIDE`` for the source), wider operands go to
BLAS in row blocks (``BLAS_SPLIT``), and a float64 CSR source is compiled too (one thread under
``SMALL_CSR`` entries). The cut-offs are attributes of the package (:mod:`ilargi.backend.compiled`),
read at call time.
"""

import numpy as np
import scipy.sparse as sp

from .. import compiled, cpu, threads
from ..cpu import bucket_rows
from .kernels import (
    WIDE,
    blas_product_kernel,
    blas_transposed_kernel,
    counting_sort,
    csr_product_kernel,
    csr_product_matrix_kernel,
    csr_product_matrix_rows,
    csr_product_rows,
    csr_square_excess_kernel,
    csr_square_excess_rows,
    csr_transposed_kernel,
    csr_transposed_matrix_kernel,
    csr_transposed_matrix_rows,
    csr_transposed_rows,
    gram_kernel,
    gram_pushes_kernel,
    gram_pushes_owned_kernel,
    product_kernel,
    reduce_blocks,
    square_excess_kernel,
    transposed_product_kernel,
    weighted_square_excess_kernel,
)
from .launch import (
    EMPTY_V,
    block_bounds,
    c_float,
    csr_blocks,
    grad_parts,
    grad_sum,
    padded_partials,
    run_blocks,
    scratch,
    thread_count,
    up4,
    use_partials,
)
from .primitives import stacked_rows

# ---------------------------------------------------------------------------------------------
# Dense products of one source: compiled where a tall, narrow source meets a narrow operand (BLAS
# at one thread does not scale, and at several its idle workers cost the compiled passes around
# it, see threads.py); BLAS where it is wide or small.


def _blas_blocks(S, Y, width, out=None):
    """Row blocks for a BLAS product of S with Y (``width`` columns, results into ``out`` if
    given): the thread count, fewer where a block would hold under BLAS_SPLIT multiply-adds; 1
    where the kernels cannot call BLAS on them (mixed dtypes: NumPy's BLAS call converts)."""
    if S.dtype != Y.dtype or (out is not None and out.dtype != S.dtype):
        return 1
    return max(1, min(thread_count(), S.shape[0] * S.shape[1] * width // compiled.BLAS_SPLIT))


def _tall(S):
    """Whether the compiled dense products take S: a C-ordered float array, not small."""
    return (
        isinstance(S, np.ndarray)
        and S.ndim == 2
        and S.dtype in (np.float32, np.float64)
        and S.flags.c_contiguous
        and S.size >= compiled.SMALL
    )


def _float_operand(Y):
    """Y as the kernels read it: C-ordered float32/float64 (copied only when it is not)."""
    return np.ascontiguousarray(
        Y, dtype=Y.dtype if Y.dtype in (np.float32, np.float64) else np.float64
    )


def product(S, X, out=None):
    """S·X (into out if given), as cpu.product: compiled for a tall dense S and an X of at most
    PRODUCT_WIDE columns (row blocks; each row's dot in vector lanes), a float64 CSR S and a dense x
    or X compiled too (SciPy's csr_matvec(s) is one thread and has a fixed cost a call before it
    starts; one thread under SMALL_CSR entries), a tall dense S and a wider X by BLAS in row blocks (see
    BLAS_SPLIT), else BLAS/SciPy."""
    if (
        _csr64(S)
        and isinstance(X, np.ndarray)
        and X.shape == S.shape[1:]
        and X.dtype.kind in "fiub"
        and (out is None or (out.dtype == np.float64 and out.flags.c_contiguous))
    ):
        target = out if out is not None else np.empty(S.shape[0])
        if S.nnz < compiled.SMALL_CSR:
            csr_product_rows(target, S.indptr, S.indices, S.data, c_float(X), 0, S.shape[0])
        else:
            csr_product_kernel(S.indptr, S.indices, S.data, c_float(X), csr_blocks(S), target)
        return target
    if _csr64(S) and _dense_2d(X, S.shape[1]) and _float64_out(out, (S.shape[0], X.shape[1])):
        return _csr_product_matrix(S, c_float(X), out)
    if (
        not _tall(S)
        or sp.issparse(X)
        or np.ndim(X) not in (1, 2)
        or (out is not None and not (out.dtype == np.float64 and out.flags.c_contiguous))
    ):
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.product(S, X, out)
    if np.ndim(X) == 2 and X.shape[1] > compiled.PRODUCT_WIDE:
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
    product_kernel(S, c_float(X), target, min(thread_count(), S.shape[0]))
    return target if out is not None or dtype == np.float64 else target.astype(dtype)


def transposed_product(S, Y):
    """Sᵀ·Y (d_p [× m]) for a source S and a dense Y of its rows, as cpu.transposed_product:
    compiled for a tall dense S of at most GRAM_WIDE columns and a Y of at most TRANSPOSED_WIDE
    columns (block partials summed in block order), a float64 CSR S and a dense Y compiled too, a
    tall dense S and a wider Y by BLAS in row blocks (summed in block order, see BLAS_SPLIT), else
    BLAS/SciPy."""
    if (
        _csr64(S)
        and isinstance(Y, np.ndarray)
        and Y.shape == S.shape[:1]
        and Y.dtype.kind in "fiub"
    ):
        return _csr_transposed(S, Y)
    if _csr64(S) and _dense_2d(Y, S.shape[0]):
        if Y.shape[1] == 1:  # X·T of one row (rmm): the 1-D route
            return _csr_transposed(S, Y[:, 0])[:, None]
        return _csr_transposed_matrix(S, c_float(Y))
    if not _tall(S) or sp.issparse(Y) or np.ndim(Y) not in (1, 2):
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.transposed_product(S, Y)
    if S.shape[1] > compiled.GRAM_WIDE or (
        np.ndim(Y) == 2 and Y.shape[1] > compiled.TRANSPOSED_WIDE
    ):
        with threads.blas_held() as single:
            nb = _blas_blocks(S, Y, Y.shape[1] if np.ndim(Y) == 2 else 1) if single else 1
            if nb == 1:
                return cpu.transposed_product(S, Y)
            parts = np.empty((nb, S.shape[1]) + Y.shape[1:], dtype=S.dtype)
            blas_transposed_kernel(S, np.ascontiguousarray(Y), parts)
            return np.add.reduce(parts, axis=0)
    dtype = np.result_type(S.dtype, Y.dtype)
    Y = _float_operand(Y)
    nb = min(thread_count(), S.shape[0])
    d, width = S.shape[1], Y.shape[1:]
    parts = grad_parts(nb, d, width)
    transposed_product_kernel(S, Y, parts)
    out = grad_sum(parts)
    return out if dtype == np.float64 else out.astype(dtype)


def column_sums(S):
    """Per-column sums, as cpu.column_sums: a tall dense S of at least WIDE columns as Sᵀ·1
    compiled (row blocks in parallel), a float64 CSR compiled; else NumPy's 1ᵀ·S with BLAS held,
    as between compiled kernels (a narrow S: its compiled loop reads with a runtime stride)."""
    if _csr64(S):
        return _csr_transposed(S, None)
    if _tall(S) and WIDE <= S.shape[1] <= compiled.GRAM_WIDE:
        return transposed_product(S, np.ones(S.shape[0], dtype=S.dtype))
    with threads.blas_held():
        return cpu.column_sums(S)


def row_sums(S):
    """Per-row sums, as cpu.row_sums (a dense S: BLAS's S·1, held at one thread, as between
    compiled kernels)."""
    if sp.issparse(S):
        return cpu.row_sums(S)
    with threads.blas_held():
        return cpu.row_sums(S)


def _csr64(S):
    return sp.issparse(S) and S.format == "csr" and S.dtype == np.float64


def _csr_transposed(S, y):
    """Sᵀ·y (float64) for a float64 CSR S and a 1-D y of its rows (None: ones, the column sums):
    row blocks into partials of d values, summed in block order; one thread for a small S, or
    where the partials would outweigh its entries."""
    ones, y = y is None, EMPTY_V if y is None else c_float(y)
    n, d = S.shape
    # The size first: a small S runs on one thread without asking for the count, so that an
    # operator of small sources leaves BLAS as it is (threads.blas_held_on_demand).
    nb = min(thread_count(), max(n, 1)) if S.nnz >= compiled.SMALL_CSR else 1
    if nb > 1 and nb * d <= S.nnz:
        parts = padded_partials(nb, d)
        csr_transposed_kernel(
            S.indptr, S.indices, S.data, y, ones, block_bounds(S.indptr, nb), parts
        )
        return np.add.reduce(parts[:, :d], axis=0)
    out = np.empty(d)
    csr_transposed_rows(out, S.indptr, S.indices, S.data, y, ones, 0, n)
    return out


def _dense_2d(X, rows):
    """Whether X is a dense 2-D numeric operand of ``rows`` rows, which the CSR kernels take."""
    return (
        isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[0] == rows and X.dtype.kind in "fiub"
    )


def _float64_out(out, shape):
    return out is None or (
        out.shape == shape and out.dtype == np.float64 and out.flags.c_contiguous
    )


def _csr_product_matrix(S, X, out=None):
    """S·X (n × m, float64) for a float64 CSR S and a C-ordered float64 X: row blocks in parallel
    (SciPy's csr_matvecs is one thread); one thread under SMALL_CSR entries."""
    target = out if out is not None else np.empty((S.shape[0], X.shape[1]))
    if S.nnz < compiled.SMALL_CSR:
        csr_product_matrix_rows(target, S.indptr, S.indices, S.data, X, 0, S.shape[0])
    else:
        csr_product_matrix_kernel(S.indptr, S.indices, S.data, X, csr_blocks(S), target)
    return target


def _csr_transposed_matrix(S, Y):
    """Sᵀ·Y (d × m, float64) for a float64 CSR S and a C-ordered float64 Y of its rows: row blocks
    into partials of d × m values, summed in block order; one thread for a small S, where the
    partials would outweigh its entries (TRANSPOSED_ENTRIES), or where they would take over
    PARTIALS_BYTES."""
    n, d = S.shape
    m = Y.shape[1]
    nb = min(thread_count(), max(n, 1)) if S.nnz >= compiled.SMALL_CSR else 1  # as above
    if (
        nb > 1
        and compiled.TRANSPOSED_ENTRIES * nb * d <= S.nnz
        and 8 * nb * d * m <= compiled.PARTIALS_BYTES
    ):
        parts = padded_partials(nb, d, m)
        csr_transposed_matrix_kernel(
            S.indptr, S.indices, S.data, Y, block_bounds(S.indptr, nb), parts
        )
        return np.add.reduce(parts[:, :d], axis=0)
    out = np.empty((d, m))
    csr_transposed_matrix_rows(out, S.indptr, S.indices, S.data, Y, 0, n)
    return out


def square_excess(S, scale, shift, weights=None):
    """As cpu.square_excess: compiled per source row of a float64 CSR (one read of each entry,
    blocks of rows in parallel, one thread under SMALL_CSR entries) and for a tall dense S, per
    row or weighted per column (one read of each value, where NumPy's chunks make three passes
    and two temporaries; block partials summed in block order)."""
    if _tall(S):
        scale, shift = c_float(scale), c_float(shift)
        nb = min(thread_count(), S.shape[0])
        if weights is None:
            out = np.empty(S.shape[0])
            square_excess_kernel(S, scale, shift, out, nb)
            return out
        parts = grad_parts(nb, S.shape[1], ())
        weighted_square_excess_kernel(S, scale, shift, c_float(weights), parts)
        return grad_sum(parts)
    if weights is not None or not _csr64(S):
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.square_excess(S, scale, shift, weights)
    out, scale, shift = np.empty(S.shape[0]), c_float(scale), c_float(shift)
    if S.nnz < compiled.SMALL_CSR:
        csr_square_excess_rows(out, S.indptr, S.indices, S.data, scale, shift, 0, S.shape[0])
    else:
        csr_square_excess_kernel(S.indptr, S.indices, S.data, scale, shift, csr_blocks(S), out)
    return out


def _mirror(tiles, d):
    """The symmetric d × d matrix whose upper triangle is that of ``tiles`` (padded)."""
    upper = np.triu(tiles[:d, :d])
    return upper + np.triu(upper, 1).T


def weighted_gram(S, c=None):
    """Sᵀ·diag(c)·S (Sᵀ·S for c=None), as cpu.weighted_gram: compiled for a tall dense S of at
    most GRAM_WIDE columns (upper 4 × 4 tiles per row block, S read once; partials summed in
    block order, then mirrored), a wide sparse S by SciPy in blocks of the result's rows on
    Python threads (:func:`_sparse_gram`), else cpu's (BLAS, sparse routes)."""
    if sp.issparse(S) and S.shape[1] > cpu.NARROW and S.nnz >= compiled.SMALL_CSR:
        return _sparse_gram(S, c)
    if not _tall(S) or S.shape[1] > compiled.GRAM_WIDE:
        with threads.blas_held():  # BLAS between compiled kernels
            return cpu.weighted_gram(S, c)
    nb = min(thread_count(), S.shape[0])
    parts = np.empty((nb, up4(S.shape[1]), up4(S.shape[1])))
    gram_kernel(S, EMPTY_V if c is None else c_float(c), parts)
    return _mirror(np.add.reduce(parts, axis=0), S.shape[1])


def _sparse_gram(S, c):
    """Sᵀ·diag(c)·S for a wide sparse S as SciPy computes it, Sᵀ (as CSR) times diag(c)·S, with the
    rows of Sᵀ in blocks of about equal entries, one a thread: SciPy's sparse product is one
    thread and releases the GIL. The blocks' results are the result's rows, stacked; returned as
    CSC, as SciPy's Sᵀ·S is."""
    nb = min(thread_count(), S.shape[1])
    if nb == 1:
        with threads.blas_held():
            return cpu.weighted_gram(S, c)
    St = sp.csr_array(S.T)
    R = sp.csr_array(S) if c is None else sp.csr_array(sp.diags_array(c) @ S)
    bounds = block_bounds(St.indptr, nb)
    ranges = [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    G = sp.vstack(run_blocks(lambda lo, hi: St[lo:hi] @ R, ranges), format="csr")
    # G is symmetric: its CSR arrays are those of G as CSC, whose columns (transposed rows) the
    # crossprod's accumulator copies in order without sorting them, as it does SciPy's CSC Gram.
    return sp.csc_array((G.data, G.indices, G.indptr), shape=G.shape)


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
    if not _tall(S) or S.shape[1] > compiled.GRAM_WIDE or any(ind.is_identity for ind in targets):
        return None
    nb = min(thread_count(), S.shape[0])
    d, d4 = S.shape[1], up4(S.shape[1])
    w = EMPTY_V if w is None else c_float(w)
    # Block partials as for a segment-sum: each thread then streams its own rows of S. The owned
    # route reads S in bucket order, every thread over all of S, so it is kept for partials too
    # large for the pass (where partials fit, they are the faster route).
    large = [not use_partials(nb, ind.n_source, S.shape[0], 1, d) for ind in targets]
    small = [ind for ind, big in zip(targets, large) if not big]
    sums, gram = {}, None
    if small or not targets:
        R, offsets = stacked_rows(small) if small else (np.empty((0, S.shape[0]), np.intp), [0])
        parts = scratch((nb, offsets[-1] + 1, d))
        grams = np.empty((nb, d4, d4))
        gram_pushes_kernel(S, w, R, parts, grams)
        stacked = np.empty((offsets[-1], d))
        reduce_blocks(parts, stacked)
        gram = np.add.reduce(grams, axis=0)
        for g, ind in enumerate(small):
            sums[id(ind)] = stacked[offsets[g] : offsets[g + 1]]
    for ind in (ind for ind, big in zip(targets, large) if big):
        order, starts, bounds = _owned_rows(ind, nb)
        out = np.empty((ind.n_source + 1, d))
        grams = np.empty((nb, d4, d4) if gram is None else (nb, 0, 0))
        gram_pushes_owned_kernel(S, w, bucket_rows(ind)[None, :], order, starts, bounds, out, grams)
        if gram is None:
            gram = np.add.reduce(grams, axis=0)
        sums[id(ind)] = out[:-1]
    return _mirror(gram, d), [sums[id(ind)] for ind in targets]
