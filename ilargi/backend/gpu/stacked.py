"""Stacked passes: T₀·X, T₀ᵀ·Y, row and column sums and the gram-vector pattern over all parts.

The rules run part by part; on the GPU that costs a few launches per part, and a launch costs
more than the work of a small part. So these run over every part at once (:class:`RowPlan`,
built once per tuple of parts):

* forward: U = Z·(a⊙x), one sparse product over every part's source rows stacked (Z: sparse
  sources and small dense ones, columns mapped to target columns); large dense sources by cuBLAS;
* one pass over the target rows (``ilargi_rows``): q_i = F_i·x_F + Σ_p U_p[rows_p[i]], with the
  fact table F (dense, ≤ FACT_MAX_WIDTH columns) read in that pass; for the gram-vector pattern
  it also forms w_i = v_i·q_i and Fᵀw, so F is read once for both products;
* backward: B = Iᵀ·w for every part at once (one sparse product with the stacked Iᵀ), then
  G += Zᵀ·B (one product) and the large dense sources' Sᵀ·B by cuBLAS.

The sparse products run on :class:`~.pieces.Pieces`. What does not change across iterations (the
stacked matrices, int32 index vectors, segments of Iᵀ, device copies of column mappings) is built
once and cached, so a training loop pays for it once; the hot paths call no host synchronization.
Each ``fused_*`` function returns None where it does not apply, and the rule runs part by part.
"""

from functools import cached_property

import cupy as cp
import numpy as np

from . import flags
from .arrays import as_csr, entry_rows, indicator_pieces, is_sparse, rows32, segments
from .device import (
    INT32_LIMIT,
    contiguous,
    device_index,
    dummy,
    launch,
    ones,
    real_dtype,
    sm_count,
    width,
    zero,
)
from .pieces import Pieces, pieces_from_entries
from .primitives import column_sums, scale_rows, segment_sum, sparse_product

SMALL_DENSE = 2**17  # dense sources up to this many cells join the stacked sparse product
FACT_MAX_WIDTH = 64  # widest dense fact table the row pass reads itself


def fused_fact(parts):
    """The part a row pass reads itself (an identity part, dense, ≤ FACT_MAX_WIDTH columns).

    Reading the fact table's rows in the pass that gathers the dimensions, for both T·y and
    Tᵀ·w, reads the largest source once instead of twice. None if there is no such part.
    """
    for p, part in enumerate(parts):
        if (
            part.indicator.is_identity
            and not is_sparse(part.source)
            and part.source.shape[1] <= FACT_MAX_WIDTH
        ):
            return p
    return None


def contiguous_source(part, dtype):
    """The part's dense source as a C-contiguous ``dtype`` array (a copy cached if one is needed)."""
    source, real = part.source, real_dtype(dtype)
    if source.dtype == real and source.flags.c_contiguous:
        return source
    return part.indicator.cached(
        ("gpu_contiguous", real.char),
        lambda: cp.ascontiguousarray(source, dtype=real),
        owner=source,
    )


def _target(part):
    """Where a part's columns sit in a target-indexed device array: a slice when contiguous."""
    return part.target if isinstance(part.target, slice) else device_index(part.cols)


def _entries(S):
    """(rows int64, columns, values) of S's stored entries; a dense S stores every cell."""
    if is_sparse(S):
        S = as_csr(S)
        return entry_rows(S).astype(cp.int64), S.indices, S.data
    n_rows, n_columns = S.shape
    return (
        cp.repeat(cp.arange(n_rows, dtype=cp.int64), n_columns),
        cp.tile(cp.arange(n_columns, dtype=cp.int32), n_rows),
        cp.ascontiguousarray(S).ravel(),
    )


def _product_into(out, A, B):
    """out[...] = A·B through cuBLAS, without converting A (out: a C-contiguous float64 view)."""
    if A.dtype == np.float64:
        cp.dot(A, B, out=out)
    else:
        out[...] = A @ B.astype(A.dtype)


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
        starts = np.concatenate(
            [[0], np.cumsum([ind.n_source for ind in self.indicators], dtype=np.int64)]
        )
        self.offsets = [int(v) for v in starts[:-1]]
        self.total = int(starts[-1])
        self.offsets_device = (
            cp.asarray(starts[:-1].astype(np.int64)) if self.P else dummy(np.int64)
        )
        self.dense, self.stacked = [], []
        for offset, (key, group) in zip(self.offsets, slots.items()):
            if isinstance(key, tuple):
                self.dense.append((offset, group[0]))
            else:
                self.stacked.append((offset, group))

    @property
    def row_real(self):
        """The element type ilargi_rows reads: the fact table's, else float64 (v, y in it)."""
        return np.dtype(np.float64) if self.fact is None else real_dtype(self.fact.source.dtype)

    def build(self):
        """Build every component now (a graph capture cannot allocate)."""
        return self.R, self.z, self.zt, self.segment_pieces, self._row_pass

    @cached_property
    def R(self):
        """P × n int32: the row of each slot every target row takes (-1 = absent)."""
        R = cp.empty((max(self.P, 1), self.n), dtype=cp.int32)
        for p, ind in enumerate(self.indicators):
            R[p] = cp.arange(self.n, dtype=cp.int32) if ind.is_identity else rows32(ind)
        return R

    @cached_property
    def z(self):
        """Pieces of Z, the stacked sources (forward products), or None without stacked slots."""
        return self._stacked_sources(transposed=False)

    @cached_property
    def zt(self):
        """Pieces of Zᵀ, the stacked summable sources (backward products), or None."""
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
                S = part.summable() if transposed else part.source
                entry_row, entry_col, values = _entries(S)
                rows.append(entry_row + (offset if transposed else local))
                cols.append(device_index(part.cols)[entry_col].astype(cp.int64))
                data.append(values)
            out_rows.append(cp.arange(offset, offset + n_source, dtype=cp.int32))
            local += n_source
        real = real_dtype(np.result_type(*(x.dtype for x in data)))
        rows, cols = cp.concatenate(rows), cp.concatenate(cols)
        data = cp.concatenate([x.astype(real, copy=False) for x in data])
        if transposed:  # rows: target columns; entries: stacked source rows of B
            return pieces_from_entries(cols, rows, data, self.d, cp.arange(self.d, dtype=cp.int32))
        return pieces_from_entries(rows, cols, data, local, cp.concatenate(out_rows))

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
        return Pieces(indptr, cp.concatenate(orders), None, cp.arange(self.total, dtype=cp.int32))

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
            _product_into(
                rows[offset : offset + part.source.shape[0]], part.source, x[_target(part)]
            )
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
            S = part.summable()
            G[_target(part)] += S.T @ rows[offset : offset + S.shape[0]].astype(S.dtype, copy=False)

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
            F, W, f_cols = dummy(np.float64), 0, dummy(np.int32)
        else:
            F, W = contiguous_source(self.fact, self.row_real), self.fact.source.shape[1]
            f_cols = device_index(self.fact.cols)
        tiles = -(-self.n // 32)
        per_warp = 8 * (33 * W + 32)
        warps = max(1, min(8, (49152 - 8 * W) // per_warp, tiles))
        shared = 8 * W + warps * per_warp
        resident = max(
            1, min(64 // warps, 32, 233472 // (shared + 1024), 65536 // (64 * 32 * warps))
        )
        blocks = max(1, min(-(-tiles // warps), sm_count() * resident))
        return F, W, f_cols, blocks, 32 * warps, shared

    def rows(self, x, U, mode, out, c0, v=None, y=None, inv_total=0.0, G=None, total=None):
        """Launch ilargi_rows (modes 0/1/2 as in the CUDA source) over the n target rows."""
        if self.n == 0:
            return
        real = self.row_real
        F, W, f_cols, blocks, threads, shared = self._row_pass
        args = (
            F,
            np.int32(W),
            f_cols,
            x,
            self.R,
            np.int32(self.P),
            np.int64(self.n),
            dummy(np.float64) if U is None else U,
            self.offsets_device,
            c0,
            np.int32(mode),
            dummy(real) if v is None else contiguous(v, real),
            np.int32(v is not None),
            dummy(real) if y is None else contiguous(y, real),
            np.float64(inv_total),
            out,
            dummy(np.float64) if G is None else G,
            dummy(np.float64) if total is None else total,
        )
        launch("ilargi_rows", real, 0, args, blocks=blocks, threads=threads, shared=shared)


def row_plan(parts, n, separate_fact=True, cublas=True):
    """The :class:`RowPlan` of these parts (cached on them), or None where the kernels' int32
    indices cannot hold it (then the rules run part by part)."""
    if not parts:
        return None
    stacked = sum(
        int(part.source.nnz) if is_sparse(part.source) else int(part.source.size) for part in parts
    )
    if max(n, len(parts) * n, stacked) > INT32_LIMIT:
        return None
    return parts[0].cached(
        ("gpu_row_plan", separate_fact, cublas),
        lambda: RowPlan(parts, n, separate_fact, cublas),
        owner=tuple(parts),
    )


def _stacked_plan(parts, n):
    return row_plan(parts, n) if flags.stacked() else None


def _result_dtype(parts, operand):
    return np.result_type(operand.dtype, *(part.source.dtype for part in parts))


def fused_lmm(parts, n, X):
    """T₀·X (rules.lmm) in stacked passes: forward U, then one pass over the target rows."""
    plan = _stacked_plan(parts, n)
    if plan is None:
        return None
    m = width(X)
    x = cp.ascontiguousarray(X, dtype=cp.float64)
    U = plan.forward(x, m) if plan.P else None
    if X.ndim == 1:
        out = cp.empty(n)
        plan.rows(x, U, 0, out, zero())
    else:
        out = plan.fact_product(x)
        if plan.P:
            accumulate = out is not None
            out = cp.empty((n, m)) if out is None else out
            launch(
                "ilargi_gather_parts",
                np.float64,
                n * m,
                (
                    plan.R,
                    np.int32(plan.P),
                    np.int64(n),
                    U,
                    plan.offsets_device,
                    np.int32(m),
                    np.int32(accumulate),
                    out,
                ),
            )
    return out.astype(_result_dtype(parts, X), copy=False)


def fused_rowsums(parts, n):
    """rowSums(T₀) (rules.rowsums) as T₀·1 in stacked passes."""
    plan = _stacked_plan(parts, n)
    return None if plan is None else fused_lmm(parts, n, ones(plan.d, np.float64))


def fused_tmm(parts, d, Y):
    """T₀ᵀ·Y (rules.tmm): B = Iᵀ·Y for every part in one launch, then G = Zᵀ·B (+ cuBLAS)."""
    plan = _stacked_plan(parts, Y.shape[0])
    if plan is None:
        return None
    m = width(Y)
    y = cp.ascontiguousarray(Y, dtype=cp.float64)
    zeros = cp.zeros(plan.total * m + d * m)  # B and G, zeroed in one launch
    B, G = zeros[: plan.total * m], zeros[plan.total * m :].reshape((d, m) if Y.ndim == 2 else d)
    if plan.P:
        plan.backward(plan.segment(y, m, B), m, G)
    if plan.fact is not None:
        F = plan.fact.summable()
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
    """S_pᵀ·C_pq·S_q (a cross block of rules.crossprod) without a co-occurrence matrix where one
    is not needed.

    Two parts of one table (one indicator): C = diag(s(w, rows)), a row scaling. An identity part
    p, dense: C_pq = diag(w)·I_q, so Cᵀ·S_p = s(w⊙S_p, rows_q), one segment-sum launch over the
    fact rows (no transposed sparse product). None otherwise (the rule's co-occurrence path).
    """
    if not flags.stacked():
        return None
    if first.indicator is second.indicator:
        ind = first.indicator
        c = ind.counts() if w is None else segment_sum(cp.asarray(w, dtype=cp.float64), ind)
        S_p, S_q = first.summable(), second.summable()
        scaled = scale_rows(S_q, c)
        if is_sparse(scaled):
            return sparse_product(S_p.T, scaled) if is_sparse(S_p) else (scaled.T @ S_p).T
        return S_p.T @ scaled
    for fact, other, flip in ((first, second, False), (second, first, True)):
        if fact.indicator.is_identity and not is_sparse(fact.source):
            S = cp.ascontiguousarray(fact.summable(), dtype=cp.float64)
            weight = None if w is None else cp.ascontiguousarray(w, dtype=cp.float64)
            ind = other.indicator
            A = indicator_pieces(ind).run(
                S, S.shape[1], cp.empty((ind.n_source, S.shape[1])), weight=weight
            )
            S_other = other.summable()
            block = (S_other.T @ A).T if is_sparse(S_other) else A.T @ S_other
            return block.T if flip else block
    return None


def gramvec(parts, n, d, scale, shift, y, v=None, alpha=1.0, beta=0.0, z=None):
    """α·Tᵀ(v⊙(T·y)) + β·z for T = T₀·diag(scale) + 1·shiftᵀ in one stacked pass, or None.

    ``parts`` and (n, d) describe T₀; ``scale``/``shift`` (length d, or None for 1 and 0) the
    affine state. x = a⊙y; U = Z·x (+ cuBLAS for large dense parts); one row pass forms
    q_i = F_i·x_F + Σ_p U_p[rows_p[i]] + bᵀy and w_i = v_i·q_i, adds Fᵀw (F read once for both
    products) and Σw; then B = Iᵀw for every part in one launch, G += Zᵀ·B; finally a⊙G + b·Σw.
    None (the caller runs the operator chain) for a 2-D y, operands of the wrong shape, no parts,
    or the fused pass switched off (``gpu_fused_gramvec``).
    """
    if not flags.fused_gramvec() or not parts:
        return None
    y = cp.asarray(y)
    if y.shape != (d,) or y.dtype.kind not in "biuf":
        return None
    if v is not None:
        v = cp.asarray(v)
        if v.shape != (n,) or v.dtype.kind not in "biuf":
            return None
    plan = _stacked_plan(parts, n)
    if plan is None:
        return None
    dtypes = [part.source.dtype for part in parts]
    dtypes += [vector.dtype for vector in (scale, shift) if vector is not None]
    result = np.result_type(*dtypes, y.dtype, np.float32)
    a, b = scale, shift
    x = cp.ascontiguousarray(y, dtype=cp.float64)
    if a is not None:
        x = cp.ascontiguousarray(a * x, dtype=cp.float64)
    c0 = (
        zero()
        if b is None
        else cp.dot(b.astype(cp.float64, copy=False), cp.asarray(y, dtype=cp.float64)).reshape(1)
    )
    U = plan.forward(x, 1) if plan.P else None
    zeros = cp.zeros(plan.total + d + 1)  # B, G and Σw, zeroed in one launch
    B, G, total = zeros[: plan.total], zeros[plan.total : -1], zeros[-1:]
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
