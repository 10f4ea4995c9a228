"""The Numba code of :mod:`ilargi.backend.compiled`: serial row routines and parallel drivers.

All jitted code lives in this one file on purpose: Numba's on-disk cache checks only the timestamp
of the file that defines a function, so a helper edited in another file would leave callers'
cached machine code stale. Every function is compiled on first use and cached (``cache=True``).

Conventions: rows lo..hi-1 of the target; arrays named z/out/r in the row routines are
chunk-relative (row i at i - lo); R is a (G, n) index array whose absent entries point at a sink
row; 1-D operands (m = 1) get their own loop bodies, pruned at compile time on ``ndim`` (the 1-D
loops vectorize, the 2-D ones with an inner loop of length 1 do not).
"""

import math

import numpy as np
from llvmlite import binding, ir
from numba import njit, prange, types, uint64
from numba.core import cgutils
from numba.extending import intrinsic

# error_model="numpy": float division without Python's zero check, which blocks vectorization
_PARALLEL = dict(parallel=True, cache=True, fastmath=False, nogil=True, error_model="numpy")
_SERIAL = dict(cache=True, fastmath=False, nogil=True, error_model="numpy")

# Rows per step inside a block: a chunk of scores stays in L1/L2 while it is built and used. Each
# step pays for its slices and calls, so 1-D steps are long (a log-loss pass over 600k rows is
# faster in steps of 4096 rows than of 1024); 2-D ones (m columns) stay short. Below 8192: the
# log-loss multiplies CHUNK / LANES factors of at most 2 (see _logistic_link), 2^1024 overflows.
CHUNK = 4096
CHUNK_WIDE = 1024
TRANSPOSED_STEP = 16384  # rows per step of a given 1-D residual (128 KiB, see transposed_kernel)
SERIAL_REDUCE = 1 << 18  # partials up to this many values are summed by one thread
WIDE = 4  # a dense fact block this wide is read row by row (a dot per row)

# Entries of an index list read ahead by a gather loop that prefetches (see _prefetch): far enough
# that the line arrives before its row is summed, near enough that it is still cached then.
PREFETCH = 16
PREFETCH_SUMS = PREFETCH // 2  # a leaf pass's rows of sums by key (see _leaf_pass_rows)
_PREFETCH_NAME = "llvm.prefetch.p0" if binding.llvm_version_info >= (15,) else "llvm.prefetch.p0i8"


@intrinsic
def _prefetch(typingctx, array, index):
    """Ask the CPU to bring the cache line of array[index] in (index an int, or a tuple of ints
    for a 2-D array; no load, no fault for any address). A gather through a leaf's sorted but
    sparse rows misses the caches at nearly every row, which the hardware prefetcher cannot
    foresee; a row a few iterations ahead, hinted, has arrived when it is read (LLVM's
    llvm.prefetch: a read, kept in every cache level)."""
    if not isinstance(array, types.Array):
        return None
    if isinstance(index, types.Integer):
        kinds = (index,)
    elif isinstance(index, types.BaseTuple) and all(
        isinstance(kind, types.Integer) for kind in index.types
    ):
        kinds = tuple(index.types)
    else:
        return None
    if len(kinds) != array.ndim:
        return None

    def codegen(context, builder, signature, args):
        array_type, index_type = signature.args
        values = (
            cgutils.unpack_tuple(builder, args[1], len(kinds))
            if isinstance(index_type, types.BaseTuple)
            else [args[1]]
        )
        at = [context.cast(builder, v, k, types.intp) for v, k in zip(values, kinds)]
        made = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, made, at)
        byte = ir.IntType(8).as_pointer()
        word = ir.IntType(32)
        hint = ir.FunctionType(ir.VoidType(), [byte, word, word, word])
        call = cgutils.get_or_insert_function(builder.module, hint, _PREFETCH_NAME)
        # read (0), kept in every level (3), a data line (1)
        builder.call(call, [builder.bitcast(pointer, byte), word(0), word(3), word(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


# ---------------------------------------------------------------------------------------------
# Serial row routines: rows lo..hi-1 of the target; outputs named z/out are chunk-relative.


@njit(**_SERIAL)
def _u(i):
    """An index as unsigned: Numba then skips the negative-index wraparound of every access (a
    compare and a select a load), which halves the time of a loop of indirect loads (a CSR's
    Sᵀ·y). Only for indices known to be >= 0 (CSR structure, stacked rows)."""
    return uint64(i)


@njit(**_SERIAL)
def _add_scaled(row, f, x):
    """row += f·x for two 1-D rows. Rows of 2-D arrays go through this (or views like it), not
    A[k, j] indexing: Numba then re-derives both addresses and checks for overlap at every
    element (a CSR fact block's Fᵀ·Y with 8 columns takes about twice as long that way)."""
    for j in range(row.shape[0]):
        row[j] += f * x[j]


@njit(inline="always", **_SERIAL)
def _ones_sum(indices, x, lo, hi):
    """Σ_e x[indices[e]] over entries lo..hi-1 (a row of a one-hot block) in four independent sums:
    one running sum waits on each add. Inlined in Numba's IR (called, it is slower; with Numba's
    reassoc the plain loop vectorizes into gathers, also slower)."""
    s0 = s1 = s2 = s3 = 0.0
    e = lo
    while e + 4 <= hi:
        s0 += x[_u(indices[e])]
        s1 += x[_u(indices[e + 1])]
        s2 += x[_u(indices[e + 2])]
        s3 += x[_u(indices[e + 3])]
        e += 4
    while e < hi:
        s0 += x[_u(indices[e])]
        e += 1
    return (s0 + s1) + (s2 + s3)


@njit(**_SERIAL)
def _csr_row_scores(z, indptr, indices, data, X, i):
    """z += Σ_k data[k]·X[indices[k]] over CSR row i, the width loop written out: through
    _add_scaled, a row of varying length runs several times slower (Fᵀ·Y of a CSR with a few
    dozen entries a row; written out, it is as fast as SciPy's)."""
    for k in range(_u(indptr[i]), _u(indptr[i + 1])):
        x, f = X[_u(indices[k])], data[k]
        for j in range(z.shape[0]):
            z[j] += f * x[j]


@njit(**_SERIAL)
def _csr_row_grad(G, indptr, indices, data, r, i):
    """G[indices[k]] += data[k]·r over CSR row i (see _csr_row_scores)."""
    for k in range(_u(indptr[i]), _u(indptr[i + 1])):
        g, f = G[_u(indices[k])], data[k]
        for j in range(r.shape[0]):
            g[j] += f * r[j]


@njit(**_SERIAL)
def _gather(out, U, R, lo, hi, accumulate):
    """out[i - lo] (+)= Σ_g U[R[g, i]]: groups outer, so each pass is one stream of independent
    loads the compiler vectorizes (a row-by-row loop over groups is slower)."""
    G = R.shape[0]
    first = 0
    if not accumulate:
        if G == 0:
            out[:] = 0.0
            return
        r = R[0]
        if U.ndim == 1:
            for i in range(lo, hi):
                out[i - lo] = U[_u(r[i])]
        else:
            for i in range(lo, hi):
                row, u = out[i - lo], U[_u(r[i])]
                for j in range(u.shape[0]):
                    row[j] = u[j]
        first = 1
    for g in range(first, G):
        r = R[g]
        if U.ndim == 1:
            for i in range(lo, hi):
                out[i - lo] += U[_u(r[i])]
        else:
            for i in range(lo, hi):
                row, u = out[i - lo], U[_u(r[i])]
                for j in range(u.shape[0]):
                    row[j] += u[j]


@njit(**_SERIAL)
def _scatter(P, Y, R, lo, hi):
    """P[R[g, i]] += Y[i - lo] for every group g (P: one block's partial, sink row included)."""
    for g in range(R.shape[0]):
        r = R[g]
        if Y.ndim == 1:
            for i in range(lo, hi):
                P[_u(r[i])] += Y[i - lo]
        else:
            for i in range(lo, hi):
                row, y = P[_u(r[i])], Y[i - lo]
                for j in range(y.shape[0]):
                    row[j] += y[j]


@njit(**_SERIAL)
def _fact_scores(z, fact, xf, xc, lo, hi):
    """z[i - lo] += F_i·xf + (F_c)_i·xc for the dense and CSR fact blocks (either may be empty)."""
    F, indptr, indices, data, rows = fact
    _dot_rows(z, F, xf, lo, hi)
    if rows.shape[0]:  # short rows of varying length: entry by entry (see PassPlan)
        for e in range(_u(indptr[lo]), _u(indptr[hi])):
            i = rows[e] - lo
            if z.ndim == 1:
                z[i] += data[e] * xc[_u(indices[e])]
            else:
                _add_scaled(z[i], data[e], xc[_u(indices[e])])
    elif indptr.shape[0] == 1:  # k ones in every row (a one-hot block): its column indices only
        k = indptr[0]
        if z.ndim == 1 and k == 2:  # a constant trip count: no loop per row
            for i in range(lo, hi):
                z[i - lo] += xc[_u(indices[2 * i])] + xc[_u(indices[2 * i + 1])]
        elif z.ndim == 1 and k == 3:
            for i in range(lo, hi):
                z[i - lo] += (
                    xc[_u(indices[3 * i])] + xc[_u(indices[3 * i + 1])] + xc[_u(indices[3 * i + 2])]
                )
        elif z.ndim == 1:
            # four sums over the chunk's entries counted from 0 (from lo·k they ran as slowly as
            # one running sum)
            block = indices[lo * k : hi * k]
            for j in range(hi - lo):
                z[j] += _ones_sum(block, xc, j * k, j * k + k)
        else:
            for i in range(lo, hi):
                for e in range(i * k, i * k + k):
                    _add_scaled(z[i - lo], 1.0, xc[_u(indices[e])])
    elif indptr.shape[0]:
        for i in range(lo, hi):
            if z.ndim == 1:  # a row's sum in a register: a store per entry costs more (four
                s = 0.0  # sums, as _ones_sum, are slower here)
                for k in range(_u(indptr[i]), _u(indptr[i + 1])):
                    s += data[k] * xc[_u(indices[k])]
                z[i - lo] += s
            else:
                _csr_row_scores(z[i - lo], indptr, indices, data, xc, i)


@njit(**_SERIAL)
def _one_hot_grad(gc, indices, k, r, lo, hi):
    """gc += (F_c)[lo:hi]ᵀ·r for a one-hot block of k ones a row, into 4 interleaved copies of gc
    (row i into copy i % 4): with few columns, neighbouring rows add into the same value, and a
    single copy would wait on each previous add (with a dozen columns, the copies nearly halve
    the time)."""
    acc = np.zeros((4,) + gc.shape)
    for i in range(lo, hi):
        into = acc[(i - lo) & 3]
        if r.ndim == 2:
            for e in range(i * k, i * k + k):
                _add_scaled(into[_u(indices[e])], 1.0, r[i - lo])
            continue
        f = r[i - lo]
        if k == 2:
            into[_u(indices[2 * i])] += f
            into[_u(indices[2 * i + 1])] += f
        elif k == 3:
            into[_u(indices[3 * i])] += f
            into[_u(indices[3 * i + 1])] += f
            into[_u(indices[3 * i + 2])] += f
        else:
            for e in range(i * k, i * k + k):
                into[_u(indices[e])] += f
    for a in range(4):
        gc += acc[a]


@njit(**_SERIAL)
def _few_columns_grad(gc, indptr, indices, data, rows, r, lo, hi):
    """gc += (F_c)[lo:hi]ᵀ·r for a 1-D r and a CSR block of few columns (4·d_c <= its entries
    here), into 4 local copies of gc (entry e into copy e % 4), added to gc at the end. Into gc
    directly, each add waits on the previous one into the same value, and gc, one thread's row
    of the partials, shares its cache line with the next thread's (false sharing, most costly at
    several threads)."""
    acc = np.zeros((4, gc.shape[0]))
    if rows.shape[0]:
        copy = 0
        for e in range(_u(indptr[lo]), _u(indptr[hi])):
            acc[copy, _u(indices[e])] += data[e] * r[rows[e] - lo]
            copy = (copy + 1) & 3
    else:
        for i in range(lo, hi):
            f, into = r[i - lo], acc[(i - lo) & 3]
            for e in range(_u(indptr[i]), _u(indptr[i + 1])):
                into[_u(indices[e])] += data[e] * f
    for a in range(4):
        for c in range(gc.shape[0]):
            gc[c] += acc[a, c]


@njit(**_SERIAL)
def _fact_grad(gf, gc, fact, r, lo, hi):
    """gf += F[lo:hi]ᵀ·r and gc += (F_c)[lo:hi]ᵀ·r (one block's partials)."""
    F, indptr, indices, data, rows = fact
    _transposed_rows(gf, F, r, lo, hi)
    if r.ndim == 1 and indptr.shape[0] > 1 and 4 * gc.shape[0] <= indptr[hi] - indptr[lo]:
        _few_columns_grad(gc, indptr, indices, data, rows, r, lo, hi)
    elif rows.shape[0]:  # entry by entry (see _fact_scores)
        for e in range(_u(indptr[lo]), _u(indptr[hi])):
            i = rows[e] - lo
            if r.ndim == 1:
                gc[_u(indices[e])] += data[e] * r[i]
            else:
                _add_scaled(gc[_u(indices[e])], data[e], r[i])
    elif indptr.shape[0] == 1 and 4 * gc.shape[0] <= hi - lo:
        _one_hot_grad(gc, indices, indptr[0], r, lo, hi)
    elif indptr.shape[0] == 1:  # a one-hot block (see _fact_scores)
        k = indptr[0]
        for i in range(lo, hi):
            if r.ndim == 1 and k == 2:
                gc[_u(indices[2 * i])] += r[i - lo]
                gc[_u(indices[2 * i + 1])] += r[i - lo]
            elif r.ndim == 1 and k == 3:
                gc[_u(indices[3 * i])] += r[i - lo]
                gc[_u(indices[3 * i + 1])] += r[i - lo]
                gc[_u(indices[3 * i + 2])] += r[i - lo]
            else:
                for e in range(i * k, i * k + k):
                    if r.ndim == 1:
                        gc[_u(indices[e])] += r[i - lo]
                    else:
                        _add_scaled(gc[_u(indices[e])], 1.0, r[i - lo])
    elif indptr.shape[0]:
        for i in range(lo, hi):
            if r.ndim == 1:
                for k in range(_u(indptr[i]), _u(indptr[i + 1])):
                    gc[_u(indices[k])] += data[k] * r[i - lo]
            else:
                _csr_row_grad(gc, indptr, indices, data, r[i - lo], i)


@njit(**_SERIAL)
def _sum_blocks(parts, out):
    """out = Σ_b parts[b][:len(out)], in block order (serial; parts are small next to the pass)."""
    out[...] = parts[0][: out.shape[0]]
    for b in range(1, parts.shape[0]):
        out += parts[b][: out.shape[0]]


# ---------------------------------------------------------------------------------------------
# Dense products of a source S (n_p × d_p, rows in order): S·X, Sᵀ·Y and Sᵀ·diag(w)·S. A sum
# over rows is vectorized along a row (Sᵀ·Y: rows of S scaled into accumulator rows) or along
# the rows of a transposed chunk (ROWS rows) in 4 × 4 tiles of sums (Sᵀ·diag(w)·S), which takes
# reassociation (_REDUCE): the order of the additions is fixed by the compiled code and the row
# blocks, so results stay deterministic for a thread count; no nnan/ninf, so NaN and inf
# propagate as in IEEE. One row at a time into one sum per output, each output would be a chain
# of dependent additions (and Numba's loops over a row's outputs are not vectorized: no SLP).

_REDUCE = dict(_SERIAL, fastmath={"reassoc", "contract"})
ROWS = 256  # rows of a transposed chunk: d × ROWS values stay in L1/L2 for d <= 128
STRIDE = ROWS + 8  # its row length: a stride of 2^k bytes would put a whole column in one cache set
_NO_INDEX = np.empty(0, dtype=np.intp)
_NO_WEIGHT = np.empty(0)


@njit(**_SERIAL)
def _up4(k):
    return (k + 3) // 4 * 4


@njit(**_SERIAL)
def _step(z):
    """Rows per step for scores shaped like z: CHUNK for 1-D, CHUNK_WIDE for 2-D."""
    return CHUNK if z.ndim == 1 else CHUNK_WIDE


@njit(**_REDUCE)
def _dot_rows(z, F, x, lo, hi):
    """z[i - lo] += F_i·x for rows lo..hi-1 (x: d_p [× m]; 2-D: callers pass chunks of rows)."""
    d = F.shape[1]
    if z.ndim == 1:
        if d >= WIDE:  # a dot per row, vectorized along the row (reassociation)
            for i in range(lo, hi):
                row = F[i]
                s = 0.0
                for c in range(d):
                    s += row[c] * x[c]
                z[i - lo] += s
        elif d == 1:
            w = x[0]
            for i in range(lo, hi):
                z[i - lo] += F[i, 0] * w
        elif d:  # rows of 2 or 3 values: the flat block, its stride a constant
            _dot_narrow(z, F[lo:hi].reshape(-1), x, d, hi - lo)
    elif d >= WIDE:  # a dot per row and column of x, each vectorized along the row: x transposed
        # (as fast as BLAS at one thread; column by column, the strided loads of F's columns make
        # it several times slower)
        xt = np.ascontiguousarray(x.T)
        for i in range(lo, hi):
            row, zi = F[i], z[i - lo]
            for j in range(xt.shape[0]):
                xj = xt[j]
                s = 0.0
                for c in range(d):
                    s += row[c] * xj[c]
                zi[j] += s
    else:  # column by column: consecutive updates go to different rows of z, not in a chain
        for c in range(d):
            xc = x[c]
            for i in range(lo, hi):
                f = F[i, c]
                zi = z[i - lo]
                for j in range(z.shape[1]):
                    zi[j] += f * xc[j]


@njit(**_REDUCE)
def _dot_narrow(z, flat, x, d, m):
    """z[i] += flat[d i : d i + d]·x for i < m and d = 2 or 3, the stride a constant in each loop:
    the compiler's interleaved vector loads, where a column-by-column loop over a runtime stride
    gathers (several times slower than BLAS)."""
    if d == 2:
        x0, x1 = x[0], x[1]
        for i in range(m):
            z[i] += flat[2 * i] * x0 + flat[2 * i + 1] * x1
    else:
        x0, x1, x2 = x[0], x[1], x[2]
        for i in range(m):
            z[i] += flat[3 * i] * x0 + flat[3 * i + 1] * x1 + flat[3 * i + 2] * x2


@njit(**_REDUCE)
def _transposed_narrow(g, flat, r, d, m):
    """g += flatᵀ·r for m rows of d = 2 or 3 values: one sum per column, reassociated into vector
    lanes, the stride a constant (a column loop over a runtime stride gathers)."""
    a0 = a1 = a2 = 0.0
    if d == 2:
        for i in range(m):
            a0 += flat[2 * i] * r[i]
            a1 += flat[2 * i + 1] * r[i]
    else:
        for i in range(m):
            a0 += flat[3 * i] * r[i]
            a1 += flat[3 * i + 1] * r[i]
            a2 += flat[3 * i + 2] * r[i]
    g[0] += a0
    g[1] += a1
    if d == 3:
        g[2] += a2


@njit(**_REDUCE)
def _scaled_rows(A, a_lo, B, b_lo, count):
    """Σ_k A[a_lo + k]ᵀ·B[b_lo + k] over k < count (A: · × p, B: · × q; a p × q array): accumulator
    row a adds B's row scaled by A's value a, two rows a step, so each store is followed by half
    as many dependent loads of the same row."""
    p, q = A.shape[1], B.shape[1]
    acc = np.zeros((p, q))
    k = 0
    while k + 1 < count:
        a0, a1, b0, b1 = A[a_lo + k], A[a_lo + k + 1], B[b_lo + k], B[b_lo + k + 1]
        for a in range(p):
            x0, x1, row = a0[a], a1[a], acc[a]
            for j in range(q):
                row[j] += x0 * b0[j] + x1 * b1[j]
        k += 2
    if k < count:
        a0, b0 = A[a_lo + k], B[b_lo + k]
        for a in range(p):
            _add_scaled(acc[a], a0[a], b0)
    return acc


@njit(**_SERIAL)
def _transposed_narrow_rows(g, F, r, lo, hi):
    """g[:d, :m] += F[lo:hi]ᵀ·r for a 2-D r and F of d < WIDE columns: d accumulator rows of r's
    width (faster than one row a step, and than BLAS)."""
    acc = _scaled_rows(F, lo, r, 0, hi - lo)
    for c in range(acc.shape[0]):
        _add_scaled(g[c], 1.0, acc[c])


@njit(**_SERIAL)
def _outer_rows(g, F, r, lo, hi):
    """g[:d, :m] += F[lo:hi]ᵀ·r for a 2-D r and F of d >= WIDE columns: m accumulator rows of d,
    vectorized along F's rows, no transposed copies (faster than transposed 4 × 4 tiles, and
    than BLAS, at one thread)."""
    acc = _scaled_rows(r, 0, F, lo, hi - lo)
    for c in range(acc.shape[1]):
        row = g[c]
        for j in range(acc.shape[0]):
            row[j] += acc[j, c]


@njit(**_SERIAL)
def _columns(Ct, S, idx, lo, m, w):
    """Ct[a, i] = w_r·S[r, a] with r = idx[lo + i] (lo + i for an empty idx; w_r = 1 for an empty
    w) for i < m, and 0 for m <= i < ROWS: a chunk of rows, transposed. Column by column: the
    loads are gathers, the stores contiguous (faster than row by row)."""
    for a in range(S.shape[1]):
        col = Ct[a]
        if idx.shape[0] == 0 and w.shape[0] == 0:
            for i in range(m):
                col[i] = S[lo + i, a]
        elif idx.shape[0] == 0:
            for i in range(m):
                col[i] = w[lo + i] * S[lo + i, a]
        elif w.shape[0] == 0:
            for i in range(m):
                col[i] = S[idx[lo + i], a]
        else:
            for i in range(m):
                r = idx[lo + i]
                col[i] = w[r] * S[r, a]
        col[m:ROWS] = 0.0


@njit(**_REDUCE)
def _tile_sums(G, At, Bt, upper):
    """G[a:a+4, b:b+4] += Σ_i At[a:a+4, i]·Bt[b:b+4, i] over a chunk (i < ROWS), for the tiles
    with b >= a only if ``upper``: sixteen sums a tile, so each load feeds four products."""
    for a in range(0, At.shape[0], 4):
        x0r, x1r, x2r, x3r = At[a], At[a + 1], At[a + 2], At[a + 3]
        for b in range(a if upper else 0, Bt.shape[0], 4):
            y0r, y1r, y2r, y3r = Bt[b], Bt[b + 1], Bt[b + 2], Bt[b + 3]
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = 0.0
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = 0.0
            for i in range(ROWS):
                x0, x1, x2, x3 = x0r[i], x1r[i], x2r[i], x3r[i]
                y0, y1, y2, y3 = y0r[i], y1r[i], y2r[i], y3r[i]
                s00 += x0 * y0
                s01 += x0 * y1
                s02 += x0 * y2
                s03 += x0 * y3
                s10 += x1 * y0
                s11 += x1 * y1
                s12 += x1 * y2
                s13 += x1 * y3
                s20 += x2 * y0
                s21 += x2 * y1
                s22 += x2 * y2
                s23 += x2 * y3
                s30 += x3 * y0
                s31 += x3 * y1
                s32 += x3 * y2
                s33 += x3 * y3
            G[a, b] += s00
            G[a, b + 1] += s01
            G[a, b + 2] += s02
            G[a, b + 3] += s03
            G[a + 1, b] += s10
            G[a + 1, b + 1] += s11
            G[a + 1, b + 2] += s12
            G[a + 1, b + 3] += s13
            G[a + 2, b] += s20
            G[a + 2, b + 1] += s21
            G[a + 2, b + 2] += s22
            G[a + 2, b + 3] += s23
            G[a + 3, b] += s30
            G[a + 3, b + 1] += s31
            G[a + 3, b + 2] += s32
            G[a + 3, b + 3] += s33


@njit(**_SERIAL)
def _transposed_rows(g, F, r, lo, hi):
    """g += F[lo:hi]ᵀ·r (r chunk-relative). 1-D r: row by row into 4 interleaved accumulator
    rows (narrow F: column by column in LANES sums); 2-D: rows of r or F scaled into accumulator
    rows (_transposed_narrow_rows, _outer_rows)."""
    d = F.shape[1]
    if r.ndim == 1 and d >= WIDE:
        acc = np.zeros((4, d))
        for i in range(lo, hi):
            ri, a = r[i - lo], (i - lo) & 3
            row = F[i]
            for c in range(d):
                acc[a, c] += row[c] * ri
        for a in range(4):
            for c in range(d):
                g[c] += acc[a, c]
    elif r.ndim == 1 and 1 < d < 4:  # rows of 2 or 3 values: the flat block (see _dot_narrow)
        _transposed_narrow(g, F[lo:hi].reshape(-1), r, d, hi - lo)
    elif r.ndim == 1:  # one sum would be a chain of dependent adds
        for c in range(d):
            lanes = np.zeros(LANES)
            body = (hi - lo) - (hi - lo) % LANES
            for i in range(0, body, LANES):
                for j in range(LANES):
                    lanes[j] += F[lo + i + j, c] * r[i + j]
            for i in range(body, hi - lo):
                lanes[i - body] += F[lo + i, c] * r[i]
            g[c] += lanes.sum()
    elif d < WIDE:  # rows of 1-3 values: each scales a row of r
        _transposed_narrow_rows(g, F, r, lo, hi)
    elif d:
        _outer_rows(g, F, r, lo, hi)


@njit(**_SERIAL)
def _gram_rows(G, S, w, idx, lo, hi, At, Bt):
    """G += the upper tiles of S_rᵀ·diag(w_r)·S_r over rows r = idx[lo:hi] (lo..hi-1 for an empty
    idx; w empty: 1); At is Bt when unweighted, else it holds the weighted chunk."""
    for start in range(lo, hi, ROWS):
        m = min(start + ROWS, hi) - start
        _columns(Bt, S, idx, start, m, _NO_WEIGHT)
        if w.shape[0]:
            _columns(At, S, idx, start, m, w)
        _tile_sums(G, At, Bt, True)


@njit(**_PARALLEL)
def product_kernel(S, X, out, nb):
    """out = S·X (X: d_p [× m]), nb row blocks in CHUNK-row steps."""
    n, step = S.shape[0], _step(out)
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        for start in range(lo, hi, step):
            stop = min(start + step, hi)
            z = out[start:stop]
            z[...] = 0.0
            _dot_rows(z, S, X, start, stop)


@njit(**_PARALLEL)
def transposed_product_kernel(S, Y, parts):
    """parts[b] = S_bᵀ·Y_b over block b's rows."""
    n, nb = S.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        parts[b][...] = 0.0
        _transposed_rows(parts[b], S, Y[lo:hi], lo, hi)


@njit(**_PARALLEL)
def blas_product_kernel(S, X, out, nb):
    """out = S·X, one BLAS call per row block on the kernels' own threads (BLAS held at one
    thread by the caller): a pool of Python threads would wait for a core that an idle OpenMP
    thread still spins on after the previous kernel."""
    n = S.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        np.dot(S[lo:hi], X, out[lo:hi])


@njit(**_PARALLEL)
def blas_transposed_kernel(S, Y, parts):
    """parts[b] = S_bᵀ·Y_b, one BLAS call per row block (see blas_product_kernel)."""
    n, nb = S.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        np.dot(S[lo:hi].T, Y[lo:hi], parts[b])


@njit(**_REDUCE)
def _combine_dot(q, c, a, v, w):
    """q = c·q + a·v in place; returns w·q. One read of each vector (q must not overlap v or w:
    the compiler's overlap check would take its scalar loop, several times slower)."""
    total = 0.0
    for i in range(q.shape[0]):
        o = c * q[i] + a * v[i]
        q[i] = o
        total += w[i] * o
    return total


@njit(**_PARALLEL)
def combine_dot_kernel(q, c, a, v, w, parts):
    """_combine_dot over nb = len(parts) blocks in parallel; parts[b] = block b's w·q (the
    fastmath helper vectorizes: a reduction written in the prange body does not)."""
    d, nb = q.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * d // nb, (b + 1) * d // nb
        parts[b] = _combine_dot(q[lo:hi], c, a, v[lo:hi], w[lo:hi])


@njit(**_SERIAL)
def csr_product_rows(out, indptr, indices, data, x, lo, hi):
    """out[lo:hi] = S[lo:hi]·x for a CSR S; each row's dot in entry order from 0.0, as SciPy's
    csr_matvec (the same bits)."""
    for i in range(lo, hi):
        total = 0.0
        for k in range(_u(indptr[i]), _u(indptr[i + 1])):
            total += data[k] * x[_u(indices[k])]
        out[i] = total


@njit(**_PARALLEL)
def csr_product_kernel(indptr, indices, data, x, bounds, out):
    """out = S·x for a CSR S, the row blocks bounds[b]:bounds[b + 1] in parallel (see
    csr_product_rows)."""
    for b in prange(bounds.shape[0] - 1):
        csr_product_rows(out, indptr, indices, data, x, bounds[b], bounds[b + 1])


@njit(**_SERIAL)
def csr_square_excess_rows(out, indptr, indices, data, scale, shift, lo, hi):
    """out[i] = Σ_k v_k·(v_k + 2·shift_k), v_k = scale_k·S_ik, over row i's entries in entry order
    (as cpu.square_excess: the same bits), for the rows lo:hi of a CSR S."""
    for i in range(lo, hi):
        total = 0.0
        for k in range(_u(indptr[i]), _u(indptr[i + 1])):
            c = _u(indices[k])
            v = data[k] * scale[c]
            total += v * (v + 2.0 * shift[c])
        out[i] = total


@njit(**_PARALLEL)
def csr_square_excess_kernel(indptr, indices, data, scale, shift, bounds, out):
    """csr_square_excess_rows over the row blocks bounds[b]:bounds[b + 1] in parallel."""
    for b in prange(bounds.shape[0] - 1):
        csr_square_excess_rows(out, indptr, indices, data, scale, shift, bounds[b], bounds[b + 1])


@njit(**_SERIAL)
def _square_excess_rows(out, S, scale, shift, lo, hi):
    """out[i] = Σ_j v_ij·(v_ij + 2·shift_j), v_ij = scale_j·S_ij, for the rows lo:hi of a dense S
    (each row in column order)."""
    d = S.shape[1]
    for i in range(lo, hi):
        total = 0.0
        for j in range(d):
            v = S[i, j] * scale[j]
            total += v * (v + 2.0 * shift[j])
        out[i] = total


@njit(**_PARALLEL)
def square_excess_kernel(S, scale, shift, out, nb):
    """_square_excess_rows over nb row blocks of a dense S in parallel."""
    n = S.shape[0]
    for b in prange(nb):
        _square_excess_rows(out, S, scale, shift, b * n // nb, (b + 1) * n // nb)


@njit(**_PARALLEL)
def weighted_square_excess_kernel(S, scale, shift, weights, parts):
    """parts[b, j] = Σ_i weights_i·v_ij·(v_ij + 2·shift_j) over block b's rows of a dense S (each
    block sums into its own buffer: the rows of parts share cache lines)."""
    n, nb, d = S.shape[0], parts.shape[0], S.shape[1]
    for b in prange(nb):
        p = np.zeros(d)
        for i in range(b * n // nb, (b + 1) * n // nb):
            w = weights[i]
            for j in range(d):
                v = S[i, j] * scale[j]
                p[j] += w * (v * (v + 2.0 * shift[j]))
        parts[b][:] = p


@njit(**_SERIAL)
def csr_transposed_rows(g, indptr, indices, data, y, ones, lo, hi):
    """g = S[lo:hi]ᵀ·y[lo:hi] for a CSR S (ones: y is all ones, the column sums; y is not read):
    each entry added into its column in row order."""
    g[:] = 0.0
    if ones:
        for k in range(_u(indptr[lo]), _u(indptr[hi])):
            g[_u(indices[k])] += data[k]
        return
    for i in range(lo, hi):
        f = y[i]
        for k in range(_u(indptr[i]), _u(indptr[i + 1])):
            g[_u(indices[k])] += data[k] * f


@njit(**_PARALLEL)
def csr_transposed_kernel(indptr, indices, data, y, ones, bounds, parts):
    """parts[b] = S_bᵀ·y_b over the rows bounds[b]:bounds[b + 1] of a CSR S (see
    csr_transposed_rows)."""
    for b in prange(parts.shape[0]):
        csr_transposed_rows(parts[b], indptr, indices, data, y, ones, bounds[b], bounds[b + 1])


@njit(**_SERIAL)
def csr_product_matrix_rows(out, indptr, indices, data, X, lo, hi):
    """out[lo:hi] = S[lo:hi]·X for a CSR S and a C-ordered X (d × m): each row's entries in
    order, each adding its row of X from 0.0, as SciPy's csr_matvecs (the same bits)."""
    m = X.shape[1]
    for i in range(lo, hi):
        row = out[i]
        row[:] = 0.0
        for k in range(_u(indptr[i]), _u(indptr[i + 1])):
            a, x = data[k], X[_u(indices[k])]
            for j in range(m):
                row[j] += a * x[j]


@njit(**_PARALLEL)
def csr_product_matrix_kernel(indptr, indices, data, X, bounds, out):
    """out = S·X for a CSR S, the row blocks bounds[b]:bounds[b + 1] in parallel (see
    csr_product_matrix_rows)."""
    for b in prange(bounds.shape[0] - 1):
        csr_product_matrix_rows(out, indptr, indices, data, X, bounds[b], bounds[b + 1])


@njit(**_SERIAL)
def csr_transposed_matrix_rows(G, indptr, indices, data, Y, lo, hi):
    """G = S[lo:hi]ᵀ·Y[lo:hi] (d × m) for a CSR S: each entry's row of Y, scaled, added into
    its column's row of G in row order (as SciPy's csc_matvecs on Sᵀ)."""
    G[:] = 0.0
    m = Y.shape[1]
    for i in range(lo, hi):
        y = Y[i]
        for k in range(_u(indptr[i]), _u(indptr[i + 1])):
            a, g = data[k], G[_u(indices[k])]
            for j in range(m):
                g[j] += a * y[j]


@njit(**_PARALLEL)
def csr_transposed_matrix_kernel(indptr, indices, data, Y, bounds, parts):
    """parts[b] = S_bᵀ·Y_b over the rows bounds[b]:bounds[b + 1] of a CSR S (see
    csr_transposed_matrix_rows)."""
    for b in prange(parts.shape[0]):
        csr_transposed_matrix_rows(parts[b], indptr, indices, data, Y, bounds[b], bounds[b + 1])


@njit(**_SERIAL)
def scatter_block_rows(indptr, indices, data, rows, cols, filled, out_indices, out_data, lo, hi):
    """A CSR block's rows r in lo:hi copied to the result's rows rows[r] (rows distinct), each
    from its next free place filled[rows[r]], the columns mapped through cols."""
    for r in range(lo, hi):
        at = filled[rows[r]]
        for k in range(indptr[r], indptr[r + 1]):
            out_indices[at] = cols[indices[k]]
            out_data[at] = data[k]
            at += 1
        filled[rows[r]] = at


@njit(**_PARALLEL)
def scatter_block_kernel(indptr, indices, data, rows, cols, filled, out_indices, out_data, bounds):
    """scatter_block_rows over the row blocks bounds[b]:bounds[b + 1] in parallel."""
    for b in prange(bounds.shape[0] - 1):
        scatter_block_rows(
            indptr,
            indices,
            data,
            rows,
            cols,
            filled,
            out_indices,
            out_data,
            bounds[b],
            bounds[b + 1],
        )


@njit(**_PARALLEL)
def scatter_transposed_kernel(
    indptr, indices, data, rows, cols, filled, out_indices, out_data, bounds
):
    """The transpose of a CSR block B into the result: B's entry (r, j) to row rows[j], column
    cols[r], at that row's next free place, in B's row order (so sorted where cols is). Thread b
    takes the entries of the columns bounds[b]:bounds[b + 1] of B: each reads all of B, and
    writes (the scattered, costly part) its own share."""
    for b in prange(bounds.shape[0] - 1):
        lo, hi = bounds[b], bounds[b + 1]
        for r in range(indptr.shape[0] - 1):
            c = cols[r]
            for k in range(indptr[r], indptr[r + 1]):
                j = indices[k]
                if lo <= j < hi:
                    i = rows[j]
                    at = filled[i]
                    out_indices[at] = c
                    out_data[at] = data[k]
                    filled[i] = at + 1


@njit(**_PARALLEL)
def gram_kernel(S, w, parts):
    """parts[b] = the upper tiles of S_bᵀ·diag(w_b)·S_b over block b's rows (parts: nb × d4 × d4)."""
    n, nb = S.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        parts[b][...] = 0.0
        Bt = np.zeros((parts.shape[1], STRIDE))
        At = np.zeros((parts.shape[1], STRIDE)) if w.shape[0] else Bt
        _gram_rows(parts[b], S, w, _NO_INDEX, lo, hi, At, Bt)


@njit(**_SERIAL)
def _push_rows(P, S, w, R, idx, lo, m):
    """P[R[g, r]] += w_r·S[r] for every table g and the rows r = idx[lo:lo+m] (lo.. for an empty
    idx; w empty: 1): a chunk's pushes, right after its Gram, while its rows are in cache."""
    for g in range(R.shape[0]):
        rows = R[g]
        for i in range(m):
            r = idx[lo + i] if idx.shape[0] else lo + i
            f = w[r] if w.shape[0] else 1.0
            into, row = P[_u(rows[r])], S[r]
            for c in range(S.shape[1]):
                into[c] += f * row[c]


@njit(**_PARALLEL)
def gram_pushes_kernel(S, w, R, parts, grams):
    """The fact pass of crossprod over row blocks: grams[b] = the upper tiles of S_bᵀ·diag(w_b)·S_b
    and parts[b] = Σ_g I_gᵀ·diag(w_b)·S_b (R: the stacked tables' rows, sink row last), reading
    each row once; the caller sums the partials in block order."""
    n, nb = S.shape[0], grams.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        parts[b][...] = 0.0
        grams[b][...] = 0.0
        Bt = np.zeros((grams.shape[1], STRIDE))
        At = np.zeros((grams.shape[1], STRIDE)) if w.shape[0] else Bt
        for start in range(lo, hi, ROWS):
            stop = min(start + ROWS, hi)
            _gram_rows(grams[b], S, w, _NO_INDEX, start, stop, At, Bt)
            _push_rows(parts[b], S, w, R, _NO_INDEX, start, stop - start)


@njit(**_PARALLEL)
def gram_pushes_owned_kernel(S, w, R, order, starts, bounds, out, grams):
    """The fact pass of crossprod without partials: thread t owns the output rows bounds[t]..
    bounds[t+1]-1 of one table (R: 1 × n, sink row n_out last) and takes the target rows whose
    bucket it owns, order[starts[t]:starts[t+1]] (increasing; the absent ones with the last
    thread): it sums its own rows of ``out`` in place, and grams[t] over its rows (grams: nb × 0
    × 0 for none). Each thread's slice of the output is 1/nb of a partial, and the threads, at
    about the same place in S, share its cache lines in L3."""
    nb = grams.shape[0]
    for t in prange(nb):
        out[bounds[t] : bounds[t + 1]] = 0.0
        grams[t][...] = 0.0
        Bt = np.zeros((grams.shape[1], STRIDE))
        At = np.zeros((grams.shape[1], STRIDE)) if w.shape[0] else Bt
        for start in range(starts[t], starts[t + 1], ROWS):
            stop = min(start + ROWS, starts[t + 1])
            if grams.shape[1]:
                _gram_rows(grams[t], S, w, order, start, stop, At, Bt)
            _push_rows(out, S, w, R, order, start, stop - start)


# ---------------------------------------------------------------------------------------------
# Parallel drivers: gathers and segment sums.


@njit(**_PARALLEL)
def partials_kernel(Y, R, parts, out):
    """out = Σ_g I_gᵀ·Y through block partials (parts: B × (n_out + 1) [× m], scratch)."""
    n, nb = R.shape[1], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        parts[b][...] = 0.0
        _scatter(parts[b], Y[lo:hi], R, lo, hi)
    reduce_blocks(parts, out)


@njit(**_PARALLEL)
def reduce_blocks(parts, out):
    """out[j] = Σ_b parts[b, j] in block order; output rows split over the threads when the
    partials are large (small ones are summed here: a parallel region costs a launch, and on a
    busy machine a wait for every thread's core)."""
    n_out, nb = out.shape[0], parts.shape[0]
    if parts.size <= SERIAL_REDUCE:
        _sum_blocks(parts, out)
        return
    for c in prange(nb):
        lo, hi = c * n_out // nb, (c + 1) * n_out // nb
        _sum_blocks(parts[:, lo:hi], out[lo:hi])


@njit(**_PARALLEL)
def buckets_kernel(S, src, w, indptr, order, bounds, out):
    """out[j] = Σ_{k in bucket j} w[o]·S[src[o]] with o = order[k] (src empty: S[o]; w empty: 1;
    src[o] = -1: skipped): the CSR of Iᵀ, output rows in parallel, no partials."""
    for b in prange(bounds.shape[0] - 1):
        for j in range(bounds[b], bounds[b + 1]):
            if S.ndim == 1:
                acc = 0.0
                for k in range(indptr[j], indptr[j + 1]):
                    o = order[k]
                    s = o if src.shape[0] == 0 else src[o]
                    if s >= 0:
                        acc += (1.0 if w.shape[0] == 0 else w[o]) * S[_u(s)]
                out[j] = acc
            else:
                row = out[j]
                row[:] = 0.0
                for k in range(indptr[j], indptr[j + 1]):
                    o = order[k]
                    s = o if src.shape[0] == 0 else src[o]
                    if s >= 0:
                        _add_scaled(row, 1.0 if w.shape[0] == 0 else w[o], S[_u(s)])


@njit(**_PARALLEL)
def buckets_sparse_kernel(Sp, Si, Sd, src, w, indptr, order, bounds, out):
    """As buckets_kernel for a CSR source (Sp, Si, Sd): out[j, Si[e]] += w[o]·Sd[e]."""
    for b in prange(bounds.shape[0] - 1):
        for j in range(bounds[b], bounds[b + 1]):
            out[j, :] = 0.0
            for k in range(indptr[j], indptr[j + 1]):
                o = order[k]
                s = o if src.shape[0] == 0 else src[o]
                if s < 0:
                    continue
                f = 1.0 if w.shape[0] == 0 else w[o]
                for e in range(_u(Sp[s]), _u(Sp[s + 1])):
                    out[j, _u(Si[e])] += f * Sd[e]


@njit(**_SERIAL)
def _source_row(i, src, w):
    """Target row i's source row (src empty: i itself; -1: none) and its weight (w empty: 1)."""
    return (i if src.shape[0] == 0 else src[i]), (1.0 if w.shape[0] == 0 else w[i])


@njit(**_PARALLEL)
def pushed_partials_kernel(S, src, w, T, parts, out):
    """out = Σ_i w_i·S[src_i] added into row T[i] (src empty: S[i]; w empty: 1; src_i = -1:
    skipped; T[i] = the sink row where the target is absent), through block partials."""
    n, nb = T.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        for i in range(lo, hi):
            s, f = _source_row(i, src, w)
            if s >= 0:
                into, row = part[_u(T[i])], S[_u(s)]
                for c in range(S.shape[1]):
                    into[c] += f * row[c]
    reduce_blocks(parts, out)


@njit(**_PARALLEL)
def pushed_partials_sparse_kernel(Sp, Si, Sd, src, w, T, parts, out):
    """As pushed_partials_kernel for a CSR source (Sp, Si, Sd)."""
    n, nb = T.shape[0], parts.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        for i in range(lo, hi):
            s, f = _source_row(i, src, w)
            if s >= 0:
                into = part[_u(T[i])]
                for e in range(_u(Sp[s]), _u(Sp[s + 1])):
                    into[_u(Si[e])] += f * Sd[e]
    reduce_blocks(parts, out)


@njit(**_SERIAL)
def _cross_rows(acc, P, rows_p, Q, rows_q, w, lo, hi):
    """acc += Σ_{i in lo..hi-1} w_i·P[rows_p[i]]ᵀ·Q[rows_q[i]] (rows empty: i; -1: skipped) for
    sides P, Q = (dense, indptr, indices, data): dense, or CSR where dense is empty. Each row's
    Q entries are copied out first, so the inner loop is a plain indexed multiply-add."""
    Fp, Pp, Pi, Pd = P
    Fq, Qp, Qi, Qd = Q
    dense_p, dense_q = Fp.shape[0] > 0, Fq.shape[0] > 0
    width = Fq.shape[1] if dense_q else acc.shape[1]
    cols = np.arange(width) if dense_q else np.empty(width, dtype=np.int64)
    vals = np.empty(width)
    for i in range(lo, hi):
        s = i if rows_p.shape[0] == 0 else rows_p[i]
        t = i if rows_q.shape[0] == 0 else rows_q[i]
        if s < 0 or t < 0:
            continue
        f = 1.0 if w.shape[0] == 0 else w[i]
        if dense_q:
            m = width
            for k in range(m):
                vals[k] = f * Fq[_u(t), k]
        else:
            m = 0
            for e in range(_u(Qp[t]), _u(Qp[t + 1])):
                cols[m] = Qi[e]
                vals[m] = f * Qd[e]
                m += 1
        if dense_p:
            for c in range(Fp.shape[1]):
                a = Fp[_u(s), c]
                for k in range(m):
                    acc[c, _u(cols[k])] += a * vals[k]
        else:
            for e in range(_u(Pp[s]), _u(Pp[s + 1])):
                c, a = _u(Pi[e]), Pd[e]
                for k in range(m):
                    acc[c, _u(cols[k])] += a * vals[k]


@njit(**_PARALLEL)
def cross_kernel(P, rows_p, Q, rows_q, w, n, parts, out):
    """out = Σ_i w_i·P[rows_p[i]]ᵀ·Q[rows_q[i]] over the n pass rows in row blocks: each block
    sums into its own d_p × d_q partial, then the partials are added in block order."""
    nb = parts.shape[0]
    for b in prange(nb):
        parts[b][...] = 0.0
        _cross_rows(parts[b], P, rows_p, Q, rows_q, w, b * n // nb, (b + 1) * n // nb)
    _sum_blocks(parts, out)


@njit(**_SERIAL)
def counting_sort(keys, n_keys):
    """(indptr, order) of the positions of keys in [0, n_keys), stable (-1/ >= n_keys dropped)."""
    indptr = np.zeros(n_keys + 1, dtype=np.int64)
    for k in keys:
        if 0 <= k < n_keys:
            indptr[k + 1] += 1
    for j in range(n_keys):
        indptr[j + 1] += indptr[j]
    fill = indptr[:-1].copy()
    order = np.empty(indptr[n_keys], dtype=np.int64)
    for i in range(keys.shape[0]):
        k = keys[i]
        if 0 <= k < n_keys:
            order[fill[k]] = i
            fill[k] += 1
    return indptr, order


# ---------------------------------------------------------------------------------------------
# Materialization: the joined table written once, row blocks in parallel (NumPy/SciPy build it
# from per-part temporaries the size of the table, each of them page-faulted in again).


@njit(**_PARALLEL)
def join_dense_kernel(out, S, rows, cols, nb):
    """out[i, cols] += S[rows[i]] for the target rows i with rows[i] >= 0 (rows empty: S[i])."""
    n, w = out.shape[0], S.shape[1]
    for b in prange(nb):
        for i in range(b * n // nb, (b + 1) * n // nb):
            r = i if rows.shape[0] == 0 else rows[i]
            if r >= 0:
                for j in range(w):
                    out[i, _u(cols[j])] += S[_u(r), j]


@njit(**_PARALLEL)
def join_dense_csr_kernel(out, indptr, indices, data, rows, cols, nb):
    """join_dense_kernel for a CSR source (indptr, indices, data)."""
    n = out.shape[0]
    for b in prange(nb):
        for i in range(b * n // nb, (b + 1) * n // nb):
            r = i if rows.shape[0] == 0 else rows[i]
            if r >= 0:
                for k in range(_u(indptr[_u(r)]), _u(indptr[_u(r) + 1])):
                    out[i, _u(cols[_u(indices[k])])] += data[k]


@njit(**_PARALLEL)
def join_lengths_kernel(lengths, R, out_indptr, nb):
    """out_indptr[i + 1] = Σ_g lengths[R[g, i]]: the entries of joined row i (before the sum)."""
    n = R.shape[1]
    for b in prange(nb):
        for i in range(b * n // nb, (b + 1) * n // nb):
            count = 0
            for g in range(R.shape[0]):
                count += lengths[_u(R[g, i])]
            out_indptr[i + 1] = count


@njit(**_PARALLEL)
def join_csr_kernel(indptr, indices, data, R, out_indptr, out_indices, out_data, unsorted):
    """Joined row i is the stacked source rows R[0, i], R[1, i], ... one after the other (the
    sources' column indices already target columns); unsorted[b]: block b's rows left unsorted."""
    n, nb = R.shape[1], unsorted.shape[0]
    for b in prange(nb):
        count = 0
        for i in range(b * n // nb, (b + 1) * n // nb):
            first = at = out_indptr[i]
            for g in range(R.shape[0]):
                r = _u(R[g, i])
                for k in range(_u(indptr[r]), _u(indptr[r + 1])):
                    out_indices[_u(at)] = indices[k]
                    out_data[_u(at)] = data[k]
                    at += 1
            for k in range(_u(first + 1), _u(at)):
                if out_indices[k] < out_indices[k - 1]:
                    count += 1
                    break
        unsorted[b] = count


@njit(**_SERIAL)
def _count_unsorted(out_indptr, out_indices, lo, hi):
    """Rows among lo..hi-1 whose column indices decrease somewhere."""
    count = 0
    for i in range(lo, hi):
        for k in range(_u(out_indptr[i] + 1), _u(out_indptr[i + 1])):
            if out_indices[k] < out_indices[k - 1]:
                count += 1
                break
    return count


JOIN_TILE = 512


@njit(**_PARALLEL)
def join_csr_tiles_kernel(indptr, indices, data, R, out_indptr, out_indices, out_data, unsorted):
    """join_csr_kernel part by part within tiles of JOIN_TILE rows: each pass reads one part's
    rows, so its copies have that part's lengths (a row-by-row loop over many narrow parts
    mispredicts the end of nearly every copy); the tile's output stays in cache between passes."""
    n, nb = R.shape[1], unsorted.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        at = np.empty(JOIN_TILE, dtype=np.int64)
        count = 0
        for first in range(lo, hi, JOIN_TILE):
            last = min(first + JOIN_TILE, hi)
            for i in range(first, last):
                at[i - first] = out_indptr[i]
            for g in range(R.shape[0]):
                for i in range(first, last):
                    r = _u(R[g, i])
                    to = at[i - first]
                    for k in range(_u(indptr[r]), _u(indptr[r + 1])):
                        out_indices[_u(to)] = indices[k]
                        out_data[_u(to)] = data[k]
                        to += 1
                    at[i - first] = to
            count += _count_unsorted(out_indptr, out_indices, first, last)
        unsorted[b] = count


@njit(**_PARALLEL)
def dense_nonzeros_kernel(S, lengths, nb):
    """lengths[r] = the nonzeros of row r of S (a NaN is not zero: it is stored, as SciPy does)."""
    n = S.shape[0]
    for b in prange(nb):
        for r in range(b * n // nb, (b + 1) * n // nb):
            count = 0
            for j in range(S.shape[1]):
                count += S[r, j] != 0
            lengths[r] = count


@njit(**_PARALLEL)
def dense_csr_kernel(S, indptr, indices, data, nb):
    """S as CSR (indptr from dense_nonzeros_kernel): row r's nonzeros, by column, at indptr[r]."""
    n = S.shape[0]
    for b in prange(nb):
        for r in range(b * n // nb, (b + 1) * n // nb):
            to = indptr[r]
            for j in range(S.shape[1]):
                if S[r, j] != 0:
                    indices[to] = j
                    data[to] = S[r, j]
                    to += 1


# ---------------------------------------------------------------------------------------------
# Vectorizable arithmetic: libm's exp is a scalar call (Numba's pip build has no SVML), and a sum
# in one accumulator is a chain of dependent adds; either one caps a pass's speed.

_LOG2E = 1.4426950408889634
_LN2_HI = 0.693147180369123816490  # ln 2 split so that k·_LN2_HI is exact (Cody-Waite)
_LN2_LO = 1.90821492927058770002e-10
LANES = 8


@njit(**_SERIAL)
def _exp_neg_abs(z, e, bits):
    """e = exp(-|z|), within 1 ulp, in loops the compiler vectorizes: e^r by its Taylor series to
    degree 13 on |r| <= ln2/2 (error < 1e-17), times 2^k written as exponent bits. |z| > 708 gives
    exp(-708) (≈ 3e-308) instead of a subnormal: absolute error below 1e-307."""
    scale = bits.view(np.float64)
    for i in range(z.shape[0]):
        x = max(-abs(z[i]), -708.0)
        k = math.floor(x * _LOG2E + 0.5)
        r = (x - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        e[i] = p * r + 1.0
        bits[i] = (np.int64(k) + 1023) << 52
    for i in range(z.shape[0]):
        e[i] *= scale[i]


@njit(**_SERIAL)
def _lane_sum(lanes, a):
    """lanes[i % LANES] += a[i]: LANES independent sums (one vector add per LANES values), in a
    fixed order, so results stay deterministic."""
    n = a.shape[0]
    body = n - n % LANES
    for i in range(0, body, LANES):
        for j in range(LANES):
            lanes[j] += a[i + j]
    for i in range(body, n):
        lanes[i - body] += a[i]


@njit(**_SERIAL)
def _logistic_link(z, y, sw, start, e, t, bits, lanes):
    """On a chunk of scores z (rows start..): z ← r = s(σ(z) - y); lanes[:LANES] += the loss
    terms, lanes[LANES:] += r; returns the chunk's Σ log(1 + e^-|z|) (unweighted: as the logs of
    LANES products of at most CHUNK / LANES factors in (1, 2], which cannot overflow)."""
    n = z.shape[0]
    _exp_neg_abs(z, e, bits)
    for i in range(n):  # elementwise: vectorized
        zi, yi, ei = z[i], y[start + i], e[i]
        sig = 1.0 / (1.0 + ei)
        z[i] = (sig if zi >= 0.0 else ei * sig) - yi
        t[i] = max(zi, 0.0) - yi * zi
    logs = 0.0
    if sw.shape[0]:
        for i in range(n):  # Σ s log(1 + e) is no log of a product: one log1p per row
            s = sw[start + i]
            t[i] = s * (t[i] + math.log1p(e[i]))
            z[i] *= s
    else:
        products = np.ones(LANES)
        body = n - n % LANES
        for i in range(0, body, LANES):
            for j in range(LANES):
                products[j] *= 1.0 + e[i + j]
        for i in range(body, n):
            products[i - body] *= 1.0 + e[i]
        for j in range(LANES):
            logs += math.log(products[j])
    _lane_sum(lanes[:LANES], t[:n])
    _lane_sum(lanes[LANES:], z)
    return logs


# ---------------------------------------------------------------------------------------------
# Fused passes: scores, link, and the residual's products, reading each fact row once.


@njit(**_SERIAL)
def _scores(z, U, R, fact, xf, xc, c, lo, hi):
    """z = Σ_g U[R[g, i]] + F_i·xf + (F_c)_i·xc + c for rows lo..hi-1."""
    _gather(z, U, R, lo, hi, False)
    _fact_scores(z, fact, xf, xc, lo, hi)
    for i in range(hi - lo):
        if z.ndim == 1:
            z[i] += c[0]
        else:
            _add_scaled(z[i], 1.0, c)


@njit(**_SERIAL)
def _backward(r, R, fact, part, gf, gc, r_out, lo, hi):
    """The residual chunk's products: the tables' partial (an empty one: r goes to r_out for the
    buckets route instead) and the fact blocks' gradient partials."""
    if part.shape[0]:
        _scatter(part, r, R, lo, hi)
    elif r_out.shape[0]:  # empty where the caller keeps r itself (transposed_kernel)
        r_out[lo:hi] = r
    _fact_grad(gf, gc, fact, r, lo, hi)


@njit(**_PARALLEL)
def logistic_kernel(U, R, fact, xf, xc, c, y, sw, parts, gf, gc, stats, r_out):
    """Binary log-loss: z = scores; Σ s(log(1 + e^z) - y z) with log(1 + e^z) = max(z, 0) +
    log(1 + e^-|z|); r = s(σ(z) - y), σ from the same e^-|z| (_logistic_link)."""
    n, nb = R.shape[1], stats.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        gf[b][...] = 0.0
        gc[b][...] = 0.0
        z, e, t = np.empty(CHUNK), np.empty(CHUNK), np.empty(CHUNK)
        bits = np.empty(CHUNK, dtype=np.int64)
        lanes = np.zeros(2 * LANES)
        logs = 0.0
        for start in range(lo, hi, CHUNK):
            stop = min(start + CHUNK, hi)
            zc = z[: stop - start]
            _scores(zc, U, R, fact, xf, xc, c, start, stop)
            logs += _logistic_link(zc, y, sw, start, e, t, bits, lanes)
            _backward(zc, R, fact, part, gf[b], gc[b], r_out, start, stop)
        stats[b, 0] = lanes[:LANES].sum() + logs
        stats[b, 1] = lanes[LANES:].sum()


@njit(**_SERIAL)
def _softmax_link(zc, labels, sw, start, e, bits, rows, totals):
    """On a chunk of scores Z (rows start..): Z ← R = s(softmax(Z) - onehot(y)); totals[j] += Σ R_ij;
    returns the chunk's Σ s(logsumexp(Z_i) - Z_i,y). ``rows``: 3 × CHUNK_WIDE scratch.

    Row maxima and sums run down the chunk a class at a time (a row's few classes fill no vector
    lanes), unweighted rows' logs are logs of products of 8 row sums, each in [1, k] (a log per
    row was a third of the link), and Σ R_ij goes to k local sums, not through memory the
    compiler must assume Z may alias (together they shorten the link markedly)."""
    n, k = zc.shape
    flat = zc.reshape(-1)
    top, picked, scale = rows[0], rows[1], rows[2]
    for i in range(n):  # shift by the row's max: exponents <= 0
        top[i] = flat[i * k]
    for j in range(1, k):
        for i in range(n):
            top[i] = max(top[i], flat[i * k + j])
    for i in range(n):
        picked[i] = flat[i * k + labels[start + i]]
        for j in range(k):
            flat[i * k + j] -= top[i]
    _exp_neg_abs(flat, e, bits)
    scale[:n] = 0.0
    for j in range(k):
        for i in range(n):
            scale[i] += e[i * k + j]
    loss = 0.0
    if sw.shape[0]:
        for i in range(n):
            s = sw[start + i]
            loss += s * (math.log(scale[i]) + top[i] - picked[i])
            scale[i] = s / scale[i]
    else:
        for lo in range(0, n, 8):
            product = 1.0
            for i in range(lo, min(lo + 8, n)):
                product *= scale[i]
            loss += math.log(product)
        for i in range(n):
            loss += top[i] - picked[i]
            scale[i] = 1.0 / scale[i]
    sums = np.zeros(k)
    for i in range(n):
        for j in range(k):
            r = scale[i] * e[i * k + j]
            flat[i * k + j] = r
            sums[j] += r
    for i in range(n):
        s = sw[start + i] if sw.shape[0] else 1.0
        label = labels[start + i]
        flat[i * k + label] -= s
        sums[label] -= s
    for j in range(k):
        totals[j] += sums[j]
    return loss


@njit(**_PARALLEL)
def softmax_kernel(U, R, fact, xf, xc, c, labels, sw, parts, gf, gc, stats, r_out):
    """Multinomial log-loss over k classes: Σ s(logsumexp(Z_i) - Z_i,y); R_i = s(softmax(Z_i) -
    onehot(y_i)); stats[b] = (loss, Σ_i R_i)."""
    n, nb = R.shape[1], stats.shape[0]
    k = U.shape[1]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        gf[b][...] = 0.0
        gc[b][...] = 0.0
        stats[b][...] = 0.0
        z = np.empty((CHUNK_WIDE, k))
        e, bits = np.empty(CHUNK_WIDE * k), np.empty(CHUNK_WIDE * k, dtype=np.int64)
        rows = np.empty((3, CHUNK_WIDE))
        loss = 0.0
        for start in range(lo, hi, CHUNK_WIDE):
            stop = min(start + CHUNK_WIDE, hi)
            zc = z[: stop - start]
            _scores(zc, U, R, fact, xf, xc, c, start, stop)
            loss += _softmax_link(zc, labels, sw, start, e, bits, rows, stats[b, 1:])
            _backward(zc, R, fact, part, gf[b], gc[b], r_out, start, stop)
        stats[b, 0] = loss


@njit(**_PARALLEL)
def logistic_link_kernel(z, y, sw, r, stats):
    """The binary link on given scores (a materialized table's X·w + b): r = s(σ(z) - y), and
    per block stats[b] = (Σ s(log(1 + e^z) - y z), Σ r)."""
    n, nb = z.shape[0], stats.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        e, t = np.empty(CHUNK), np.empty(CHUNK)
        bits = np.empty(CHUNK, dtype=np.int64)
        lanes = np.zeros(2 * LANES)
        logs = 0.0
        for start in range(lo, hi, CHUNK):
            stop = min(start + CHUNK, hi)
            rc = r[start:stop]
            rc[:] = z[start:stop]
            logs += _logistic_link(rc, y, sw, start, e, t, bits, lanes)
        stats[b, 0] = lanes[:LANES].sum() + logs
        stats[b, 1] = lanes[LANES:].sum()


@njit(**_PARALLEL)
def softmax_link_kernel(Z, labels, sw, R, stats):
    """The multinomial link on given scores Z (n × k): R = s(softmax(Z) - onehot(y)); per block
    stats[b] = (loss, Σ_i R_i)."""
    n, nb = Z.shape[0], stats.shape[0]
    k = Z.shape[1]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        stats[b][...] = 0.0
        e, bits = np.empty(CHUNK_WIDE * k), np.empty(CHUNK_WIDE * k, dtype=np.int64)
        rows = np.empty((3, CHUNK_WIDE))
        loss = 0.0
        for start in range(lo, hi, CHUNK_WIDE):
            stop = min(start + CHUNK_WIDE, hi)
            rc = R[start:stop]
            rc[...] = Z[start:stop]
            loss += _softmax_link(rc, labels, sw, start, e, bits, rows, stats[b, 1:])
        stats[b, 0] = loss


@njit(**_SERIAL)
def _weigh(w, v, start, total):
    """w_i *= v_i (v empty: 1) and total += Σ_i w_i over a chunk starting at row ``start``."""
    if w.ndim == 1:
        if v.shape[0]:
            for i in range(w.shape[0]):
                w[i] *= v[start + i]
        lanes = np.zeros(LANES)
        _lane_sum(lanes, w)
        total[0] += lanes.sum()
    else:
        for i in range(w.shape[0]):
            f, row = (v[start + i] if v.shape[0] else 1.0), w[i]
            for j in range(row.shape[0]):
                row[j] *= f
                total[j] += row[j]


@njit(**_PARALLEL)
def gramvec_kernel(U, R, fact, xf, xc, c, v, parts, gf, gc, stats, r_out):
    """The linear link of α·Tᵀ(v⊙(T·y)): w = v ⊙ scores (v empty: 1); stats[b] = Σ_i w_i."""
    n, nb = R.shape[1], stats.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        gf[b][...] = 0.0
        gc[b][...] = 0.0
        stats[b][...] = 0.0
        step = _step(U)
        z = np.empty((step,) + U.shape[1:])
        for start in range(lo, hi, step):
            stop = min(start + step, hi)
            zc = z[: stop - start]
            _scores(zc, U, R, fact, xf, xc, c, start, stop)
            _weigh(zc, v, start, stats[b])
            _backward(zc, R, fact, part, gf[b], gc[b], r_out, start, stop)


@njit(**_PARALLEL)
def kmeans_kernel(
    U, R, fact, xf, xc, c, x_sq, c_sq, rounding, parts, gf, gc, stats, r_out, labels, closest
):
    """Lloyd's assignment from scores Z_ik = x_i·c_k: d_ik = (‖x_i‖² + ‖c_k‖²) - 2 Z_ik, set to 0
    below its rounding error; the label is the first center within rounding of the nearest
    (models/kmeans.py's rule). The residual is onehot(label): its products are the per-table and
    fact cluster sums; stats[b] = (inertia, counts per cluster)."""
    n, nb = R.shape[1], stats.shape[0]
    k = U.shape[1]
    top_c = c_sq.max()
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        part = parts[b]
        part[...] = 0.0
        gf[b][...] = 0.0
        gc[b][...] = 0.0
        stats[b][...] = 0.0
        z = np.empty((CHUNK_WIDE, k))
        for start in range(lo, hi, CHUNK_WIDE):
            stop = min(start + CHUNK_WIDE, hi)
            zc = z[: stop - start]
            _scores(zc, U, R, fact, xf, xc, c, start, stop)
            for i in range(stop - start):
                row, xi = zc[i], x_sq[start + i]
                low = np.inf
                for j in range(k):
                    scale = xi + c_sq[j]
                    d = scale - 2.0 * row[j]
                    row[j] = 0.0 if d <= rounding * scale else d
                    low = min(low, row[j])
                bound = low + rounding * (xi + top_c)
                label = 0
                while row[label] > bound:
                    label += 1
                labels[start + i] = label
                closest[start + i] = row[label]
                stats[b, 0] += row[label]
                stats[b, 1 + label] += 1.0
                row[:] = 0.0
                row[label] = 1.0
            _backward(zc, R, fact, part, gf[b], gc[b], r_out, start, stop)


@njit(**_PARALLEL)
def scores_kernel(out, U, R, fact, xf, xc, c, nb, accumulate):
    """out (+)= the scores of every row: T₀·x (lmm) or the gather-add of the plan's tables."""
    n = R.shape[1]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        step = _step(out)
        z = np.empty((step if accumulate else 0,) + out.shape[1:])
        for start in range(lo, hi, step):  # a chunk of scores stays in L1/L2 while it is built
            stop = min(start + step, hi)
            if accumulate:
                _scores(z[: stop - start], U, R, fact, xf, xc, c, start, stop)
                out[start:stop] += z[: stop - start]
            else:
                _scores(out[start:stop], U, R, fact, xf, xc, c, start, stop)


@njit(**_PARALLEL)
def transposed_kernel(Y, R, fact, parts, gf, gc, stats):
    """T₀ᵀ·Y pieces (tmm): Y's segment-sums into every table, Fᵀ·Y, (F_c)ᵀ·Y and Σ_i Y_i."""
    n, nb = R.shape[1], stats.shape[0]
    for b in prange(nb):
        lo, hi = b * n // nb, (b + 1) * n // nb
        parts[b][...] = 0.0
        gf[b][...] = 0.0
        gc[b][...] = 0.0
        stats[b][...] = 0.0
        # Y is given, so a 1-D step is long (each step pays for its slices and scratch); a step
        # of Y stays in L2 while the tables and fact blocks read it (a 2-D Y of the whole block
        # would be read from memory by each)
        step = TRANSPOSED_STEP if Y.ndim == 1 else CHUNK_WIDE
        lanes = np.zeros(LANES)  # Σ_i Y_i of a 1-D Y: not one chain of dependent adds
        for start in range(lo, hi, step):
            stop = min(start + step, hi)
            _backward(Y[start:stop], R, fact, parts[b], gf[b], gc[b], Y[:0], start, stop)
            if Y.ndim == 1:
                _lane_sum(lanes, Y[start:stop])
            else:
                for i in range(start, stop):
                    _add_scaled(stats[b], 1.0, Y[i])
        if Y.ndim == 1:
            stats[b, 0] = lanes.sum()


# ---------------------------------------------------------------------------------------------
# Gradient-boosted trees: histograms of (gradient, hessian, count) by bin code over a leaf's rows.
# ``codes`` is a table's (rows × k) uint8 bin codes; a leaf's row i reads codes row rows[i] + 1
# (row 0: the absent row, rows[i] = -1) or codes row i where ``rows`` is empty (the fact table, or
# a table of summed rows). Partials per row block, summed in block order: deterministic at a
# fixed thread count.


@njit(**_SERIAL)
def _hessian(h, i, fixed):
    """Row i's hessian: h[i], or h[0] where every row's is the same (``fixed``: h holds that one
    value, shorter than the gradients). A fixed hessian (squared error's unit hessians) is not
    gathered row by row: in a leaf's rows that gather misses the caches at nearly every row."""
    return np.float64(h[0]) if fixed else np.float64(h[i])


@njit(**_SERIAL)
def _histogram_rows(P, codes, rows, idx, g, h, c, lo, hi):
    """P[f, codes[r, f]] += (g[i], h[i], c[i] or 1) for the entries lo..hi-1 of idx."""
    k = codes.shape[1]
    indirect = rows.shape[0] > 0
    counted = c.shape[0] > 0
    fixed = h.shape[0] != g.shape[0]  # one hessian for every row (see _hessian)
    for e in range(lo, hi):
        if e + PREFETCH < hi:
            ahead = idx[e + PREFETCH]
            _prefetch(g, ahead)
            if not fixed:
                _prefetch(h, ahead)
            if indirect:
                _prefetch(rows, ahead)
            else:
                _prefetch(codes, (ahead, 0))
        i = idx[e]
        r = rows[i] + 1 if indirect else i
        gi = np.float64(g[i])
        hi_ = _hessian(h, i, fixed)
        ci = c[i] if counted else 1.0
        for f in range(k):
            b = codes[r, f]
            P[f, b, 0] += gi
            P[f, b, 1] += hi_
            P[f, b, 2] += ci


@njit(**_PARALLEL)
def histogram_kernel(codes, rows, idx, g, h, c, parts, out):
    """out[f, b] = Σ (g, h, count) over the entries of idx whose row has code b in column f;
    parts (nb × k × bins × 3) holds the blocks' partials."""
    m, nb = idx.shape[0], parts.shape[0]
    for b in prange(nb):
        parts[b][...] = 0.0
        _histogram_rows(parts[b], codes, rows, idx, g, h, c, b * m // nb, (b + 1) * m // nb)
    k = out.shape[0]
    for f in prange(k):
        out[f][...] = 0.0
        for b in range(nb):
            for j in range(out.shape[1]):
                for q in range(3):
                    out[f, j, q] += parts[b, f, j, q]


@njit(**_PARALLEL)
def leaf_sums_kernel(rows, idx, g, h, parts, out):
    """out[rows[i] + 1] += (g[i], h[i], 1) over i in idx: a leaf's segment-sum by foreign key
    (row 0: the absent rows); parts (nb × n_out × 3) holds the blocks' partials."""
    m, nb = idx.shape[0], parts.shape[0]
    fixed = h.shape[0] != g.shape[0]
    for b in prange(nb):
        P = parts[b]
        P[...] = 0.0
        for e in range(b * m // nb, (b + 1) * m // nb):
            i = idx[e]
            cell = P[rows[i] + 1]
            cell[0] += np.float64(g[i])
            cell[1] += _hessian(h, i, fixed)
            cell[2] += 1.0
    n_out = out.shape[0]
    for j in prange(n_out):
        for q in range(3):
            s = 0.0
            for b in range(nb):
                s += parts[b, j, q]
            out[j, q] = s


# Rows of a partition beyond which its blocks write both sides into one scratch (first rows from
# a block's start up, the others from its end down) and place them with straight copies: no
# flags written and read again, fewer bytes once a leaf's rows and scratch outgrow the
# second-level caches; below it, the flags' pass measured faster.
BIG_PARTITION = 1 << 18


@njit(**_PARALLEL)
def _partition_from_both_ends(order, lo, hi, codes, rows, column, threshold, copy, counts):
    """partition_kernel's blocks for big partitions (see BIG_PARTITION)."""
    indirect = rows.shape[0] > 0
    m, nb = hi - lo, counts.shape[0]
    for b in prange(nb):
        start, stop = b * m // nb, (b + 1) * m // nb
        at_left = start
        at_right = stop - 1
        for x in range(lo + start, lo + stop):
            i = order[x]
            r = rows[i] + 1 if indirect else i
            go = codes[r, column] <= threshold
            copy[at_left] = i
            copy[at_right] = i
            at_left += go
            at_right -= 1 - go
        counts[b] = at_left - start
    n_left = 0
    for b in range(nb):
        n_left += counts[b]
    for b in prange(nb):
        start, stop = b * m // nb, (b + 1) * m // nb
        before = 0
        for q in range(b):
            before += counts[q]
        k = counts[b]
        for x in range(k):
            order[lo + before + x] = copy[start + x]
        at = lo + n_left + start - before
        for x in range(stop - start - k):
            order[at + x] = copy[stop - 1 - x]
    return n_left


@njit(**_PARALLEL)
def partition_kernel(order, lo, hi, codes, rows, column, threshold, copy, left, counts):
    """Stable partition of order[lo:hi] in place: rows whose code in ``column`` is <= threshold
    first, the others after, each in their order; returns how many go first (copy, left:
    scratch of hi - lo). One block compacts the first ones in place and the others into copy,
    then copies them back: a row is written to both sides and the side's end advanced by the
    test, not branched on (which side a row takes is unpredictable). Several blocks count their
    first rows, then each writes its rows at its offsets (big partitions: see BIG_PARTITION)."""
    indirect = rows.shape[0] > 0
    m, nb = hi - lo, counts.shape[0]
    if nb == 1:
        at_left = lo
        at_right = 0
        for x in range(lo, hi):
            i = order[x]
            r = rows[i] + 1 if indirect else i
            go = codes[r, column] <= threshold
            order[at_left] = i  # at_left <= x: a row not yet read is never overwritten
            copy[at_right] = i
            at_left += go
            at_right += 1 - go
        for x in range(at_right):
            order[at_left + x] = copy[x]
        return at_left - lo
    if m > BIG_PARTITION:
        return _partition_from_both_ends(
            order, lo, hi, codes, rows, column, threshold, copy, counts
        )
    for b in prange(nb):
        k = 0
        for e in range(b * m // nb, (b + 1) * m // nb):
            i = order[lo + e]
            copy[e] = i
            r = rows[i] + 1 if indirect else i
            go = codes[r, column] <= threshold
            left[e] = go
            k += go
        counts[b] = k
    n_left = 0
    for b in range(nb):
        n_left += counts[b]
    for b in prange(nb):
        at_left = 0
        at_right = 0
        for q in range(b):
            at_left += counts[q]
            at_right += (q + 1) * m // nb - q * m // nb - counts[q]
        at_left += lo
        at_right += lo + n_left
        for e in range(b * m // nb, (b + 1) * m // nb):
            if left[e]:
                order[at_left] = copy[e]
                at_left += 1
            else:
                order[at_right] = copy[e]
                at_right += 1
    return n_left


@njit(**_SERIAL)
def _leaf_gain(G, H, l1, l2):
    """ThresholdL1(G, l1)² / (H + l2), LightGBM's gain of a leaf."""
    s = max(0.0, abs(G) - l1)
    if G < 0:
        s = -s
    elif G == 0:
        s = 0.0
    return s * s / (H + l2)


@njit(**_SERIAL)
def _scan_params(params):
    """(l1, l2, min_data, min_hessian, min_gain_shift, epsilon): a leaf scan's first params."""
    return params[0], params[1], params[2], params[3], params[4], params[5]


@njit(**_PARALLEL)
def thresholds_kernel(hist, offsets, n_bins, usable, G, H, count, params, out, splittable):
    """Per feature, LightGBM's reverse scan for the best threshold of a leaf's histograms (one
    feature's bins from row offsets[f] of hist, bins × 3): out[f] =
    (gain over the leaf, threshold bin, left Σg, left Σh (with its offsets), left count), gain
    -inf where none passes; splittable[f]: some threshold gains more than the leaf. A bin's rows
    are estimated from its hessian sum, as LightGBM estimates them (exact for unit hessians).
    params = (l1, l2, min_data, min_hessian, min_gain_shift, epsilon)."""
    for f in prange(n_bins.shape[0]):
        out[f, 0] = -np.inf
        splittable[f] = False
        if usable[f]:
            _reverse_scan(hist, offsets[f], n_bins[f] - 1, G, H, count, params, out, splittable, f)


@njit(inline="always", **_SERIAL)
def _reverse_scan(hist, o, top, G, H, count, params, out, splittable, f):
    """LightGBM's scan from bin ``top`` down to 1 of the feature whose bins start at row o:
    the right side accumulated, out[f] = (gain over the leaf, threshold bin, left Σg, left Σh,
    left count) of its best threshold where one passes (out[f, 0] -inf else, as given);
    splittable[f] set where some threshold gains more than the leaf."""
    l1, l2, min_data, min_hess, shift, eps = _scan_params(params)
    per_hessian = count / H  # LightGBM's cnt_factor: a bin's rows from its hessian sum
    rg = 0.0
    rh = eps
    rc = 0.0
    best = -np.inf
    for t in range(top, 0, -1):
        rg += hist[o + t, 0]
        rh += hist[o + t, 1]
        rc += np.floor(hist[o + t, 1] * per_hessian + 0.5)
        if rc < min_data or rh < min_hess:
            continue
        lc = count - rc
        if lc < min_data:
            break
        lh = H - rh
        if lh < min_hess:
            break
        lg = G - rg
        gain = _leaf_gain(lg, lh, l1, l2) + _leaf_gain(rg, rh, l1, l2)
        if not gain > shift:
            continue
        splittable[f] = True
        if gain > best:
            best = gain
            out[f, 1] = t - 1
            out[f, 2] = lg
            out[f, 3] = lh
            out[f, 4] = lc
    if best > -np.inf:
        out[f, 0] = best - shift


@njit(**_SERIAL)
def nan_thresholds_kernel(hist, offsets, n_bins, zero_first, G, H, count, params, out, splittable):
    """Per feature with a last bin of NaN (and two more), LightGBM's two scans for a leaf's best
    threshold and where NaN goes (``FindBestThresholdSequentially`` with NA_AS_MISSING): from
    the right over the bins but NaN's (NaN left), then from the left (NaN right), kept only
    where its gain is larger than the first's output plus the shift. Bin 0 is summed as the
    leaf less every other bin where zero_first[f] (LightGBM keeps no histogram of its most
    frequent bin 0), else read. out[f] = (gain over the leaf, threshold bin, left Σg, left Σh
    with its offset, left count, 1.0 where NaN goes left); splittable[f]; params as
    thresholds_kernel's."""
    l1, l2, min_data, min_hess, shift, eps = _scan_params(params)
    per_hessian = count / H
    for f in range(n_bins.shape[0]):
        o, nb = offsets[f], n_bins[f]
        out[f, 0] = -np.inf
        out[f, 5] = 1.0
        splittable[f] = False
        _reverse_scan(hist, o, nb - 2, G, H, count, params, out, splittable, f)  # NaN left
        if zero_first[f]:  # bin 0: the leaf less every other bin, one at a time
            lg = G
            lh = H - eps
            lc = count
            for t in range(1, nb):
                lg -= hist[o + t, 0]
                lh -= hist[o + t, 1]
                lc -= np.floor(hist[o + t, 1] * per_hessian + 0.5)
        else:
            lg = 0.0 + hist[o, 0]
            lh = eps + hist[o, 1]
            lc = np.floor(hist[o, 1] * per_hessian + 0.5)
        forward = -np.inf
        for t in range(0, nb - 1):  # NaN's bin stays on the right
            if t > 0:
                lg += hist[o + t, 0]
                lh += hist[o + t, 1]
                lc += np.floor(hist[o + t, 1] * per_hessian + 0.5)
            if lc < min_data or lh < min_hess:
                continue
            rc = count - lc
            if rc < min_data:
                break
            rh = H - lh
            if rh < min_hess:
                break
            gain = _leaf_gain(lg, lh, l1, l2) + _leaf_gain(G - lg, rh, l1, l2)
            if not gain > shift:
                continue
            splittable[f] = True
            if gain > forward:
                forward = gain
                if gain > out[f, 0] + shift:
                    out[f, 1] = t
                    out[f, 2] = lg
                    out[f, 3] = lh
                    out[f, 4] = lc
                    out[f, 5] = 0.0
        if out[f, 5] == 0.0:
            out[f, 0] = forward - shift


@njit(**_SERIAL)
def rebuild_bins_kernel(hist, offsets, n_bins, bins, G, H):
    """hist[offsets[f] + bins[f]] = (G, H) less every other bin of feature f, one at a time, in
    place: LightGBM's ``Dataset::FixHistogram`` of a most frequent bin."""
    for f in range(n_bins.shape[0]):
        o, m = offsets[f], bins[f]
        g = G
        h = H
        for t in range(n_bins[f]):
            if t != m:
                g -= hist[o + t, 0]
                h -= hist[o + t, 1]
        hist[o + m, 0] = g
        hist[o + m, 1] = h


@njit(**_SERIAL)
def categorical_kernel(hist, offsets, n_bins, G, H, count, params, out, splittable, left_bins):
    """Per categorical feature, LightGBM's best set of categories of a leaf
    (``FindBestThresholdCategoricalInner``; the feature's bins from row offsets[f] of hist, bin
    0 never sent left): out[f] = (gain over the leaf, bins sent left, left Σg, left Σh with its
    offset, left count, the L2 penalty of the children's values), gain -inf where none passes;
    the bins in left_bins[f, :out[f, 1]]; splittable[f]: some split gains more than the leaf.
    params = (l1, l2, min_data, min_hessian, min_gain_shift, epsilon, max_cat_to_onehot,
    max_cat_threshold, cat_l2, cat_smooth, min_data_per_group)."""
    l1, l2, min_data, min_hess, shift, eps = _scan_params(params)
    onehot, most_cats, cat_l2, smooth, per_group = (
        params[6],
        params[7],
        params[8],
        params[9],
        params[10],
    )
    per_hessian = count / H
    for f in range(n_bins.shape[0]):
        o, nb = offsets[f], n_bins[f]
        out[f, 0] = -np.inf
        out[f, 1] = 0
        splittable[f] = False
        best = -np.inf
        if nb <= onehot:  # each category against the rest
            out[f, 5] = l2
            for t in range(1, nb):
                g, h = hist[o + t, 0], hist[o + t, 1]
                c = np.floor(h * per_hessian + 0.5)
                if c < min_data or h < min_hess or count - c < min_data:
                    continue
                other_h = H - h - eps
                if other_h < min_hess:
                    continue
                gain = _leaf_gain(G - g, other_h, l1, l2) + _leaf_gain(g, h + eps, l1, l2)
                if not gain > shift:
                    continue
                splittable[f] = True
                if gain > best:
                    best = gain
                    left_bins[f, 0] = t
                    out[f, 1] = 1
                    out[f, 2] = g
                    out[f, 3] = h + eps
                    out[f, 4] = c
        else:  # sorted by Σg / (Σh + cat_smooth), a prefix from either end
            reg = l2 + cat_l2
            out[f, 5] = reg
            kept = np.empty(nb, dtype=np.intp)
            ctr = np.empty(nb)
            used = 0
            for t in range(1, nb):
                if np.floor(hist[o + t, 1] * per_hessian + 0.5) >= smooth:
                    kept[used] = t
                    ctr[used] = hist[o + t, 0] / (hist[o + t, 1] + smooth)
                    used += 1
            order = kept[:used][np.argsort(ctr[:used], kind="mergesort")]  # stable
            steps = min(used, min(most_cats, (used + 1) // 2))
            for direction in range(2):
                group = 0.0
                lg = 0.0
                lh = eps
                lc = 0.0
                for i in range(steps):
                    t = order[i] if direction == 0 else order[used - 1 - i]
                    c = np.floor(hist[o + t, 1] * per_hessian + 0.5)
                    lg += hist[o + t, 0]
                    lh += hist[o + t, 1]
                    lc += c
                    group += c
                    if lc < min_data or lh < min_hess:
                        continue
                    rc = count - lc
                    if rc < min_data or rc < per_group:
                        break
                    rh = H - lh
                    if rh < min_hess:
                        break
                    if group < per_group:
                        continue
                    group = 0.0
                    gain = _leaf_gain(lg, lh, l1, reg) + _leaf_gain(G - lg, rh, l1, reg)
                    if not gain > shift:
                        continue
                    splittable[f] = True
                    if gain > best:
                        best = gain
                        for k in range(i + 1):
                            left_bins[f, k] = order[k] if direction == 0 else order[used - 1 - k]
                        out[f, 1] = i + 1
                        out[f, 2] = lg
                        out[f, 3] = lh
                        out[f, 4] = lc
        if best > -np.inf:
            out[f, 0] = best - shift


@njit(**_SERIAL)
def _table_rows(S, offsets, j):
    """Rows of stacked sums S that table j of a leaf pass holds (the last: to S's end)."""
    return (offsets[j + 1] if j + 1 < offsets.shape[0] else S.shape[0]) - offsets[j]


@njit(**_SERIAL)
def _leaf_pass_rows(
    S, P, R, sel, offsets, fcodes, foff, idx, every, g, h, lo, hi, held, sparse_leaf, far_sums
):
    """Entries lo..hi-1 of idx (every: rows lo..hi-1 themselves, idx not read): (g, h, 1) into
    S at each selected table's key (offsets[j] + R[sel[j], i] + 1) and into P at fact column
    f's bin (foff[f] + code); (g, h) alone where P holds two sums a bin, g alone where one. S is
    zero on entry;
    unless held is empty, each row of S the entries reach is listed in held once, at its first
    entry (its count still zero then; held has room for one row more than S). Returns how many
    are listed. A leaf of fewer than 1 / sparse_leaf of the rows has every line of its rows
    prefetched, and the rows of sums of tables of far_sums rows or more are prefetched (the
    package's SPARSE_LEAF and FAR_SUMS)."""
    listing = held.shape[0] > 0
    T = sel.shape[0]
    kf = fcodes.shape[1]
    counted = P.shape[1] == 3
    weighed = P.shape[1] >= 2
    fixed = h.shape[0] != g.shape[0]
    # a leaf of under an eighth of the rows shares few cache lines between its rows: each row's
    # every line is then asked for, its keys in every table summed by and both lines of codes
    # that straddle a boundary; a bigger leaf's rows share lines, and the extra requests cost
    sparse = not every and idx.shape[0] * sparse_leaf < g.shape[0]
    # a table of many keys holds rows of sums beyond the second-level cache, and consecutive
    # rows' keys reach any of them: each is asked for from the key of the row half the distance
    # ahead (whose index vector's line was asked for before)
    far = False
    for j in range(T):
        far |= _table_rows(S, offsets, j) >= far_sums
    k = 0
    for e in range(lo, hi):
        if far and e + PREFETCH_SUMS < hi:
            near = _u(e + PREFETCH_SUMS) if every else _u(idx[e + PREFETCH_SUMS])
            for j in range(T):
                if _table_rows(S, offsets, j) >= far_sums:
                    _prefetch(S, (_u(offsets[j] + R[sel[j], near] + 1), 0))
        if not every and e + PREFETCH < hi:  # a leaf's rows: a gather missing at every row
            ahead = idx[e + PREFETCH]
            _prefetch(g, ahead)
            if not fixed:
                _prefetch(h, ahead)
            if sparse:
                for j in range(T):
                    _prefetch(R, (sel[j], ahead))
                if kf:
                    _prefetch(fcodes, (ahead, 0))
                    _prefetch(fcodes, (ahead, kf - 1))
            else:
                if T:
                    _prefetch(R, (sel[0], ahead))
                if kf:
                    _prefetch(fcodes, (ahead, 0))
        # rows, keys and bins as unsigned (_u): no negative-index wraparound at every access
        i = _u(e) if every else _u(idx[e])
        gi = np.float64(g[i])
        hi_ = _hessian(h, i, fixed)
        for j in range(T):
            r = _u(offsets[j] + R[sel[j], i] + 1)
            if listing:
                # written always, kept where first reached: no branch to mispredict on the
                # rows of a bigger leaf (about half of them new)
                held[k] = r
                k += S[r, 2] == 0.0
            S[r, 0] += gi
            S[r, 1] += hi_
            S[r, 2] += 1.0
        for f in range(kf):
            b = _u(foff[f] + fcodes[i, _u(f)])
            P[b, 0] += gi
            if weighed:
                P[b, 1] += hi_
            if counted:
                P[b, 2] += 1.0
    return k


@njit(**_SERIAL)
def _sorted_held(held, k, flags, out):
    """The k distinct rows held[:k] in increasing order into out[:k], from the flags set at
    them (flags: one byte a row, a multiple of 8 bytes, zero elsewhere; cleared here; out as
    long as flags). A very
    few rows are sorted; more are read off the flags eight at a time, which costs a pass over
    rows / 8 words rather than k log k comparisons."""
    words = flags.view(np.uint64)
    if k * 256 < flags.shape[0]:
        for e in range(k):
            out[e] = held[e]
        out[:k].sort()
        for e in range(k):
            flags[out[e]] = 0
        return
    at = 0
    for w in range(words.shape[0]):
        if words[w] == 0:
            continue
        for r in range(8 * w, 8 * w + 8):
            # written always, kept where flagged: no branch to mispredict on dense flags
            out[at] = r
            at += flags[r] != 0
            flags[r] = 0


@njit(**_PARALLEL)
def leaf_pass_kernel(
    R, sel, offsets, fcodes, foff, idx, every, g, h, sum_parts, hist_parts, sums, hist, state, cuts
):
    """One pass over a leaf's rows idx (every: all rows of g, idx not read): the segment-sums of
    (g, h, 1) by the keys of the selected tables (stacked in sums, table j from offsets[j]) and
    the fact table's histograms. The
    fact columns' bins lie end to end in the partials (column f's from foff[f], foff[kf] in
    all), so that a block's partial stays in the first-level cache where the columns have few
    bins; hist gets them per column, zero above a column's bins. Partials of two sums a bin
    (hist_parts' last axis) leave out the count: hist's counts are zero then (a threshold scan
    estimates rows from hessians); of one, the hessians too. One block's sum_parts is sums itself (1 × rows × 3): its sums
    are final (a sum from zero is never -0.0, so adding it to zero again changes no bit).

    A leaf of one block touches only the rows of sums that it reaches, so that it costs its
    rows, not the tables': ``state`` = (cleared, held, flags, rows) with cleared the rows of
    sums to zero first (those a previous leaf reached: sums is zero elsewhere; [-1]: every row),
    held (≥ 1 × rows of sums + 1) where the block lists the rows it reaches, flags (a byte a row
    of sums, zero) and rows, which gets the reached rows in increasing order (its sparse tables'
    histograms then read those alone). A bigger leaf sums into every row (several blocks: from
    partials, left zero). ``cuts`` = (sparse_leaf, far_sums): what the rows prefetch (see
    :func:`_leaf_pass_rows`). Returns how many rows were reached, or -1 where not listed."""
    cleared, held, flags, rows = state
    sparse_leaf, far_sums = cuts
    m, nb = (g.shape[0] if every else idx.shape[0]), sum_parts.shape[0]
    listing = nb == 1  # its upkeep: a store a row, without a branch
    if nb == 1:
        if cleared.shape[0] and cleared[0] < 0:
            sums[...] = 0.0
        else:
            for e in range(cleared.shape[0]):
                sums[cleared[e]] = 0.0
    counts = np.zeros(nb, dtype=np.int64)
    listed = held[0] if listing else held[0, :0]
    for b in prange(nb):
        hist_parts[b][...] = 0.0
        counts[b] = _leaf_pass_rows(
            sum_parts[b],
            hist_parts[b],
            R,
            sel,
            offsets,
            fcodes,
            foff,
            idx,
            every,
            g,
            h,
            b * m // nb,
            (b + 1) * m // nb,
            listed,
            sparse_leaf,
            far_sums,
        )
    k = -1
    if listing:
        k = counts[0]
        for e in range(k):
            flags[listed[e]] = 1
        _sorted_held(listed, k, flags, rows)
    elif nb > 1:
        for r in prange(sums.shape[0]):
            for q in range(3):
                s = 0.0
                for b in range(nb):
                    s += sum_parts[b, r, q]
                    sum_parts[b, r, q] = 0.0
                sums[r, q] = s
    for f in prange(hist.shape[0]):
        hist[f][...] = 0.0
        for j in range(foff[f + 1] - foff[f]):
            for q in range(hist_parts.shape[2]):
                s = 0.0
                for b in range(nb):
                    s += hist_parts[b, foff[f] + j, q]
                hist[f, j, q] = s
    return k


@njit(**_PARALLEL)
def scan_split_kernel(
    lst, every, labels, label, new_label, codes, rows, column, threshold, left, side, out, counts
):
    """Blocks of lst: rows labelled ``label`` whose code test (code <= threshold, or left[code]
    where ``left`` is not None: a set of categories) equals ``side`` to out (relabelled), the
    other ones of ``label`` compacted in place; then both moved down block after block.
    every: lst's rows are 0, 1, ... (written, not read). Compiled once for each kind of test:
    with ``left`` None the categorical test is pruned, not branched on at every row."""
    indirect = rows.shape[0] > 0
    m, nb = lst.shape[0], counts.shape[0] - 1
    for b in prange(nb):
        start, stop = b * m // nb, (b + 1) * m // nb
        k = start
        w = start
        for x in range(start, stop):
            if not every and x + PREFETCH < stop:  # a leaf's rows: sparse after a few splits
                ahead = lst[x + PREFETCH]
                _prefetch(labels, ahead)
                if indirect:
                    _prefetch(rows, ahead)
                else:
                    _prefetch(codes, (ahead, column))
            # rows and places as unsigned (_u): no negative-index wraparound at every access
            i = _u(x) if every else _u(lst[x])
            if labels[i] != label:  # a row a smaller side took before: the list is stale there
                continue
            r = _u(rows[i] + 1) if indirect else i
            if left is None:
                go = (codes[r, column] <= threshold) == side
            else:
                go = left[codes[r, column]] == side
            # written to both, the ends advanced by the test: which side a row takes is not
            # predictable; w <= x, so no row not yet read is overwritten
            out[_u(k)] = i
            lst[_u(w)] = i
            labels[i] = new_label if go else label
            k += go
            w += 1 - go
        counts[b, 0] = k - start
        counts[b, 1] = w - start
    if nb == 1:
        return
    # the blocks' moved rows down out, their kept rows down lst: two threads, one list each
    # (within a list the blocks go in order: a block's rows may land where the last one's were)
    for side_list in prange(2):
        at = counts[0, side_list]
        for b in range(1, nb):
            start = b * m // nb
            if side_list == 0:
                for x in range(counts[b, 0]):
                    out[at + x] = out[start + x]
            else:
                for x in range(counts[b, 1]):
                    lst[at + x] = lst[start + x]
            at += counts[b, side_list]
        counts[nb, side_list] = at
    counts[0, 0] = counts[nb, 0]
    counts[0, 1] = counts[nb, 1]


@njit(**_PARALLEL)
def column_histograms_kernel(codes_t, jobs, sums, out):
    """Per job (column, start, rows, feature): out[feature, codes_t[column, r]] += sums[start + r]
    for r < rows; one thread a column, each bin summed in row order (no partials: the result
    does not depend on the thread count)."""
    for q in prange(jobs.shape[0]):
        column, start, n_rows, feature = jobs[q, 0], jobs[q, 1], jobs[q, 2], jobs[q, 3]
        codes = codes_t[column]
        H = out[feature]
        for r in range(n_rows):
            b = codes[r]
            s = sums[start + r]
            H[b, 0] += s[0]
            H[b, 1] += s[1]
            H[b, 2] += s[2]


@njit(**_SERIAL)
def _zero_bins(out, jobs, k):
    """out = 0 over job k's bins (its column's rows offset up to offset + bins)."""
    for b in range(jobs[k, 1], jobs[k, 1] + jobs[k, 2]):
        out[b, 0] = 0.0
        out[b, 1] = 0.0
        out[b, 2] = 0.0


@njit(**_PARALLEL)
def sparse_histograms_kernel(
    indptr, rows, codes, jobs, only, by_rows, sums, totals, zero_bins, counts, out
):
    """Per job k of ``only``, jobs[k] = (start, offset, bins, default, table, column): out[offset
    + codes[e]] = the sum of sums[start + rows[e]] over the column's entries e (indptr[column]
    up to indptr[column + 1]; unless its table's entries were added row by row, by_rows[table]:
    then out holds them), then its default bin = totals minus its other bins (summed in bin
    order; a default bin 0 left at zero unless zero_bins). ``only`` may be any subset of the
    jobs (a leaf's candidate features); out's other rows are not written. Without ``counts``,
    the bins' counts are left at zero. One thread a column, no partials: the result does not
    depend on the thread count."""
    sums_kept = 3 if counts else 2
    for j in prange(only.shape[0]):
        k = only[j]
        start, offset, bins, default = jobs[k, 0], jobs[k, 1], jobs[k, 2], jobs[k, 3]
        column = jobs[k, 5]
        if not by_rows[jobs[k, 4]]:
            # zeroed here, by the thread that sums into them: the bins are then in its caches
            _zero_bins(out, jobs, k)
            for e in range(indptr[column], indptr[column + 1]):
                b = offset + codes[e]
                s = sums[start + rows[e]]
                out[b, 0] += s[0]
                out[b, 1] += s[1]
                if counts:
                    out[b, 2] += s[2]
        if default == 0 and not zero_bins:
            continue
        for q in range(sums_kept):
            rest = 0.0
            for b in range(bins):
                if b != default:
                    rest += out[offset + b, q]
            out[offset + default, q] = totals[q] - rest


@njit(**_PARALLEL)
def sparse_rows_kernel(
    row_ptr, bin_at, tables, by_rows, held, jobs, only, sums, counts, out, ahead
):
    """The entries of the tables by_rows, row by row: out[bin_at[e]] += sums[r] over the entries e
    of each table row r the leaf holds (count > 0), after the bins of the table's jobs among
    ``only`` are zeroed (the other columns' bins get sums on whatever they held: they are not
    read); one thread a table. A bin's entries come in row order, as in the column pass, and
    rows the leaf does not hold add zeros there: the same sums. ``held``: the rows of sums the
    leaf holds, increasing (a table's rows then cost the leaf's, not the table's), or empty:
    every row is read. Without ``counts``, the bins' counts are left at zero."""
    listed = held.shape[0] > 0
    for t in prange(tables.shape[0]):
        if not by_rows[t]:
            continue
        for q in range(only.shape[0]):
            if jobs[only[q], 4] == t:
                _zero_bins(out, jobs, only[q])
        start, n_rows = tables[t, 0], tables[t, 1]
        lo, hi = start, start + n_rows
        if listed:
            lo = np.searchsorted(held, start)
            hi = np.searchsorted(held, start + n_rows)
        for a in range(lo, hi):
            if listed and ahead > 0 and a + ahead < hi:  # the held rows' sums, entries: apart
                q = held[a + ahead]
                _prefetch(sums, (q, 0))
                _prefetch(row_ptr, q)
                _prefetch(bin_at, row_ptr[held[a + ahead // 2]])
            r = held[a] if listed else a
            s = sums[r]
            if s[2] == 0.0:
                continue
            for e in range(row_ptr[r], row_ptr[r + 1]):
                b = bin_at[e]
                out[b, 0] += s[0]
                out[b, 1] += s[1]
                if counts:
                    out[b, 2] += s[2]


@njit(**_SERIAL)
def rows_or_columns_kernel(tables, held, leaf_rows, job_entries, job_table, only, threads):
    """Per table, whether its entries are cheaper added row by row than column by column: the
    rows the leaf holds (at most; all of them without ``held``) and their entries (a share of
    the table's), against its columns' entries among the jobs ``only`` split over the threads.
    An entry by column gathers its row's sums from anywhere in the table, by row they are read
    in order: one costs about four of these. Without the held rows, the pass by row reads every
    row of its tables."""
    T = tables.shape[0]
    entries = np.zeros(T)
    for q in range(only.shape[0]):
        entries[job_table[only[q]]] += job_entries[only[q]]
    by_rows = np.zeros(T, dtype=np.bool_)
    for t in range(T):
        start, n_rows = tables[t, 0], tables[t, 1]
        per_row = tables[t, 2] / max(n_rows, 1)
        if held.shape[0]:
            rows = np.searchsorted(held, start + n_rows) - np.searchsorted(held, start)
            cost = rows * per_row
        else:
            cost = min(n_rows, leaf_rows) * per_row + n_rows
        by_rows[t] = cost < 4 * entries[t] / threads
    return by_rows


@njit(**_SERIAL)
def subtract_held_kernel(row_ptr, bin_at, held, sums, jobs, rebuilt, totals, counts, clean, parent):
    """parent -= a leaf's histograms of sparse columns, from its sums by key, at the bins its
    held rows' entries reach and at the default bins of the jobs ``rebuilt``: each reached bin
    summed in row order into ``clean`` (zero on entry, left zero), a default bin as the leaf's
    totals minus its column's other bins (in bin order), then subtracted once. The bins no
    entry reaches hold zero in the leaf's histograms: parent's stay as they are (x - 0 is x).
    ``held``: rows of sums, increasing, each in a table of row_ptr's. Without ``counts``, the
    counts are left as they are (the histograms count nothing)."""
    sums_kept = 3 if counts else 2
    for a in range(held.shape[0]):
        s = sums[held[a]]
        for e in range(row_ptr[held[a]], row_ptr[held[a] + 1]):
            b = bin_at[e]
            clean[b, 0] += s[0]
            clean[b, 1] += s[1]
            if counts:
                clean[b, 2] += s[2]
    for j in range(rebuilt.shape[0]):
        k = rebuilt[j]
        offset, bins, default = jobs[k, 1], jobs[k, 2], jobs[k, 3]
        for q in range(sums_kept):
            rest = 0.0
            for b in range(bins):
                if b != default:
                    rest += clean[offset + b, q]
            parent[offset + default, q] -= totals[q] - rest
    for a in range(held.shape[0]):
        for e in range(row_ptr[held[a]], row_ptr[held[a] + 1]):
            b = bin_at[e]
            for q in range(sums_kept):
                parent[b, q] -= clean[b, q]  # a bin reached again: minus zero
                clean[b, q] = 0.0


# ---------------------------------------------------------------------------------------------
# Binning a BinnedMatrix's tables: each value's bin, the codes gathered per target row, the fact
# codes as the leaf pass reads them.


@njit(**_SERIAL)
def _bin_of(bounds, v):
    """np.searchsorted(bounds, v, side="left") in NumPy's order (NaN after every number), as a
    search of fixed steps whose comparisons compile to selects, not branches: a column's values
    come in no order, so a branch on each comparison would be mispredicted about half the time."""
    nan = v != v
    base, n = 0, bounds.shape[0]
    while n > 1:
        half = n >> 1
        b = bounds[base + half]
        if (b < v) | (nan & (b == b)):
            base += half
        n -= half
    b = bounds[base]
    return base + ((b < v) | (nan & (b == b)))


@njit(**_PARALLEL)
def affine_column_kernel(column, a, b, out):
    """out = column·a + b: a product rounded, then a sum rounded (no fused multiply-add), as
    NumPy's multiply and add."""
    for i in prange(column.shape[0]):
        out[i] = column[i] * a + b


@njit(**_PARALLEL)
def bin_column_kernel(values, bounds, codes, column):
    for i in prange(values.shape[0]):
        codes[i, column] = _bin_of(bounds, values[i])


@njit(**_PARALLEL)
def gather_codes_kernel(out, at, codes, rows, every):
    """out[i, at:at + k] = codes[r] of each target row i, r = i (every) or rows[i] + 1."""
    k = codes.shape[1]
    for i in prange(out.shape[0]):
        r = np.intp(i)
        if not every:
            r = np.intp(rows[i]) + 1
        for j in range(k):
            out[i, at + j] = codes[r, j]


# Rows a step of joint_codes_kernel: a step's codes, both copies, stay in L2.
JOINT_STEP = 1 << 14


@njit(**_PARALLEL)
def joint_codes_kernel(codes, by_column, joint, members, starts, bins):
    """by_column = codes (a Fortran-ordered copy) and joint[:, q] the joint code of the features
    members[starts[q]:starts[q + 1]]: c0 + b0·(c1 + b1·(...)), b the members' bins."""
    n, k = codes.shape
    for step in prange((n + JOINT_STEP - 1) // JOINT_STEP):
        lo = step * JOINT_STEP
        hi = min(lo + JOINT_STEP, n)
        for i in range(lo, hi):
            for j in range(k):
                by_column[i, j] = codes[i, j]
        for q in range(starts.shape[0] - 1):
            first, last = starts[q], starts[q + 1] - 1
            for i in range(lo, hi):
                v = np.intp(by_column[i, members[last]])
                for m in range(last - 1, first - 1, -1):
                    v = v * bins[m] + by_column[i, members[m]]
                joint[i, q] = v


# ---------------------------------------------------------------------------------------------
# A boosting round's scores.


@njit(**_PARALLEL)
def add_by_label_residuals_kernel(score, values, labels, y, out, block, partials):
    """score[i] += values[labels[i]], then out[i] = score[i] - y[i] rounded to out's precision:
    a tree's leaf values added and the next round's squared-error gradients made in one pass,
    in blocks of ``block`` rows; returns Σout with np.sum(out, dtype=np.float64)'s bits (each
    block's out summed as it is made, while in the caches: buffered_sum_kernel's sum)."""
    n = score.shape[0]
    for c in prange(partials.shape[0]):
        lo = c * block
        hi = min(lo + block, n)
        for i in range(lo, hi):
            s = score[i] + values[labels[i]]
            score[i] = s
            out[i] = s - np.float64(y[i])
        partials[c] = _pairwise_sum(out, lo, hi - lo)
    total = 0.0
    for c in range(partials.shape[0]):
        total += partials[c]
    return total


@njit(**_SERIAL)
def _pairwise_sum(a, lo, n):
    """a[lo:lo + n] summed in double as NumPy's pairwise sum adds them (numpy/_core/src/umath/
    loops_utils.h.src): below 8 values in order, up to 128 in eight lanes then combined as
    ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)) and the tail in order, beyond that two
    halves (the first a multiple of 8 values)."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += np.float64(a[i])
        return res
    if n <= 128:
        r0, r1 = np.float64(a[lo]), np.float64(a[lo + 1])
        r2, r3 = np.float64(a[lo + 2]), np.float64(a[lo + 3])
        r4, r5 = np.float64(a[lo + 4]), np.float64(a[lo + 5])
        r6, r7 = np.float64(a[lo + 6]), np.float64(a[lo + 7])
        whole = n - n % 8
        for i in range(lo + 8, lo + whole, 8):
            r0 += np.float64(a[i])
            r1 += np.float64(a[i + 1])
            r2 += np.float64(a[i + 2])
            r3 += np.float64(a[i + 3])
            r4 += np.float64(a[i + 4])
            r5 += np.float64(a[i + 5])
            r6 += np.float64(a[i + 6])
            r7 += np.float64(a[i + 7])
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(lo + whole, lo + n):
            res += np.float64(a[i])
        return res
    half = n // 2
    half -= half % 8
    return _pairwise_sum(a, lo, half) + _pairwise_sum(a, lo + half, n - half)


@njit(**_PARALLEL)
def buffered_sum_kernel(a, block, partials):
    """Σa in double with np.sum(a, dtype=np.float64)'s bits for a single-precision vector: NumPy
    casts it in buffers of ``block`` values, sums each pairwise and adds the buffers' sums in
    order from zero; here the buffers' sums are made in parallel (partials: one a buffer)."""
    n = a.shape[0]
    for c in prange(partials.shape[0]):
        lo = c * block
        partials[c] = _pairwise_sum(a, lo, min(block, n - lo))
    total = 0.0
    for c in range(partials.shape[0]):
        total += partials[c]
    return total


# ---------------------------------------------------------------------------------------------
# A table's numeric columns as one row-major block.

# Columns a call of dense_columns_kernel takes (separate arguments of one type: a list of arrays
# would be a typed List, whose methods Numba compiles in every process).
DENSE_COLUMNS = 8
DENSE_STEP = 1 << 13  # rows a step: the step's rows of the block stay in L2 while written


@njit(**_SERIAL)
def _dense_column_step(column, fill, out, j, lo, hi):
    for i in range(lo, hi):
        v = column[i]
        out[i, j] = fill if v != v else v


@njit(**_PARALLEL)
def dense_columns_kernel(out, at, count, fills, c0, c1, c2, c3, c4, c5, c6, c7):
    """out[:, at + j] = column j of c0..c7 (the first ``count``), NaN as fills[j]: a step of
    rows at a time, every column written into it while its lines are cached."""
    n = out.shape[0]
    for step in prange((n + DENSE_STEP - 1) // DENSE_STEP):
        lo = step * DENSE_STEP
        hi = min(lo + DENSE_STEP, n)
        for j in range(count):
            if j == 0:
                _dense_column_step(c0, fills[0], out, at, lo, hi)
            elif j == 1:
                _dense_column_step(c1, fills[1], out, at + 1, lo, hi)
            elif j == 2:
                _dense_column_step(c2, fills[2], out, at + 2, lo, hi)
            elif j == 3:
                _dense_column_step(c3, fills[3], out, at + 3, lo, hi)
            elif j == 4:
                _dense_column_step(c4, fills[4], out, at + 4, lo, hi)
            elif j == 5:
                _dense_column_step(c5, fills[5], out, at + 5, lo, hi)
            elif j == 6:
                _dense_column_step(c6, fills[6], out, at + 6, lo, hi)
            else:
                _dense_column_step(c7, fills[7], out, at + 7, lo, hi)


# One cache for every process of an environment: read and written under a lock (see .build).
from .build import lock_caches  # noqa: E402  (after every kernel is defined)

lock_caches(globals())
