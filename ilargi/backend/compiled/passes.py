"""The fused passes over the target rows: :class:`PassPlan` and the logistic, softmax, gramvec and
k-means passes.

A :class:`PassPlan` stacks the gathered tables of one matrix (built once per matrix, see the
package docstring); each pass reads every fact row once and returns a :data:`Pass` (or, for
k-means, an :data:`Assignment`): the loss, and the residual's segment-sums into every table, its
products with the fact blocks and its sum.
"""

import threading
from collections import namedtuple
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from .. import compiled, cpu
from .kernels import (
    buckets_kernel,
    counting_sort,
    gramvec_kernel,
    kmeans_kernel,
    logistic_kernel,
    reduce_blocks,
    scores_kernel,
    softmax_kernel,
    transposed_kernel,
)
from .launch import (
    EMPTY_F,
    EMPTY_I,
    EMPTY_V,
    NO_FACT,
    NO_ROWS,
    block_bounds,
    c_float,
    grad_parts,
    grad_sum,
    thread_count,
    use_partials,
)
from .primitives import stacked_rows

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
            self.R, self.offsets = stacked_rows(indicators)
        else:
            self.R, self.offsets = np.empty((0, self.n), dtype=np.intp), [0]
        self.total = self.offsets[-1]
        F = EMPTY_F if fact is None else np.ascontiguousarray(fact)
        if F.dtype not in (np.float32, np.float64):
            F = F.astype(np.float64)
        if fact_csr is None:
            self.fact = (F,) + NO_FACT[1:]
        else:
            C = sp.csr_array(fact_csr)
            indices = C.indices.astype(np.int64, copy=False)
            indptr = C.indptr.astype(np.int64, copy=False)
            if cpu.one_hot_columns(C) is not None:  # k ones per row: indptr [k], no values read
                self.fact = (
                    F,
                    np.array([C.nnz // C.shape[0]], dtype=np.int64),
                    indices,
                    EMPTY_V,
                    NO_ROWS,
                )
            else:
                short = C.nnz <= compiled.ENTRY_BY_ENTRY * C.shape[0] < 2**31
                rows = (
                    np.repeat(np.arange(C.shape[0], dtype=np.int32), np.diff(indptr))
                    if short
                    else NO_ROWS
                )
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
        return A[self.offsets[g] : self.offsets[g + 1]]

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
        if not use_partials(nb, self.total, self.n, self.G, int(np.prod(width))):
            return np.empty((nb, 0) + width)
        shape = (nb, self.total + 1) + width
        buffer = getattr(self._scratch, "parts", None)
        if buffer is None or buffer.shape != shape:
            buffer = self._scratch.parts = np.empty(shape)
        return buffer

    def _operands(self, U, xf, xc, c):
        """Checked float64 operands of a pass and the fact tuple (blocks without x skipped)."""
        U = c_float(U)
        if U.shape[0] != self.total + 1 or U.ndim > 2:
            raise ValueError(f"U must have {self.total + 1} rows (plan.buffer), got {U.shape}")
        width = U.shape[1:]
        F, *csr = self.fact
        if xf is None or not self.d_fact:
            F, xf = EMPTY_F.astype(F.dtype), np.zeros((0,) + width)
        if xc is None or not self.d_csr:
            csr, xc = NO_FACT[1:], np.zeros((0,) + width)
        c = (
            np.full(width or (1,), c, dtype=np.float64)
            if isinstance(c, (int, float))
            else np.broadcast_to(c_float(c), width or (1,)).copy()
        )  # full: cheaper than broadcast
        fact = (F, *csr)
        return (
            U,
            width,
            fact,
            c_float(xf).reshape((-1,) + width),
            c_float(xc).reshape((-1,) + width),
            c,
        )

    def _finish(self, nb, parts, r, gf, gc, fact, width):
        """The tables' sums (partials in block order, or buckets over r) and the fact gradients."""
        tables = np.empty(
            (self.total,) + parts.shape[2:] if parts.shape[1] else (self.total,) + r.shape[1:]
        )
        if parts.shape[1]:
            reduce_blocks(parts, tables)
        else:
            indptr, order = self.buckets
            buckets_kernel(r, EMPTY_I, EMPTY_V, indptr, order, block_bounds(indptr, nb), tables)
        d = fact[0].shape[1]
        return (
            tables,
            grad_sum(gf) if d else None,
            np.add.reduce(gc, axis=0) if fact[1].shape[0] else None,
        )

    def _run(self, kernel, U, xf, xc, c, args, width_stats, outs=()):
        """Launch a fused kernel (U, R, fact, xf, xc, c, *args, parts, gf, gc, stats, r, *outs);
        returns (stats summed in block order, tables, Fᵀr, F_cᵀr)."""
        nb = min(thread_count(), max(self.n, 1))
        U, width, fact, xf, xc, c = self._operands(U, xf, xc, c)
        parts = self._parts(nb, width)
        r = np.empty((0,) + width) if parts.shape[1] else np.empty((self.n,) + width)
        gf = grad_parts(nb, fact[0].shape[1], width)
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
        scores_kernel(
            out, U, self.R, fact, xf, xc, c, min(thread_count(), max(self.n, 1)), accumulate
        )
        return out

    def transposed(self, Y, fact=True):
        """T₀ᵀ·Y pieces for Y (n [× m]): Pass(None, stacked Iᵀ·Y, Fᵀ·Y, F_cᵀ·Y, Σ_i Y_i) (tmm)."""
        nb = min(thread_count(), max(self.n, 1))
        Y = c_float(Y)
        if not Y.flags.writeable:  # the kernel types a slice of Y as a scratch it may write
            Y = Y.copy()
        width = Y.shape[1:]
        fact_t = self.fact if fact else (EMPTY_F.astype(self.fact[0].dtype), *NO_FACT[1:])
        parts = self._parts(nb, width)
        gf = grad_parts(nb, fact_t[0].shape[1], width)
        gc = np.empty((nb, self.d_csr if fact_t[1].shape[0] else 0) + width)
        stats = np.empty((nb,) + (width or (1,)))
        transposed_kernel(Y, self.R, fact_t, parts, gf, gc, stats)
        tables, f, g = self._finish(nb, parts, Y, gf, gc, fact_t, width)
        total = np.add.reduce(stats, axis=0)
        return Pass(None, tables, f, g, float(total[0]) if not width else total)


def logistic_pass(plan, U, y, sw=None, xf=None, xc=None, c=0.0):
    """The binary log-loss pass: z = scores (see PassPlan.scores; U: total + 1 values), loss =
    Σ s(log(1 + e^z) - y z), r = s(σ(z) - y); returns Pass(loss, Iᵀr stacked, Fᵀr, F_cᵀr, Σr)."""
    sw = EMPTY_V if sw is None else c_float(sw)
    stats, tables, f, g = plan._run(logistic_kernel, U, xf, xc, c, (c_float(y), sw), 2)
    return Pass(float(stats[0]), tables, f, g, float(stats[1]))


def softmax_pass(plan, U, labels, sw=None, xf=None, xc=None, c=0.0):
    """The multinomial log-loss pass over k = U.shape[1] classes: Z = scores, loss =
    Σ s(logsumexp(Z_i) - Z_i,y_i), R = s(softmax(Z) - onehot(y)); returns Pass(loss, IᵀR, FᵀR,
    F_cᵀR, Σ_i R_i)."""
    sw = EMPTY_V if sw is None else c_float(sw)
    labels = np.ascontiguousarray(labels, dtype=np.intp)
    k = np.shape(U)[1]
    stats, tables, f, g = plan._run(softmax_kernel, U, xf, xc, c, (labels, sw), 1 + k)
    return Pass(float(stats[0]), tables, f, g, stats[1:])


def gramvec_pass(plan, U, v=None, xf=None, xc=None, c=0.0):
    """The pass of α·Tᵀ(v⊙(T·y)) + β·z: q = scores (T₀·y pieces), w = v⊙q; returns Pass(None, Iᵀw,
    Fᵀw, F_cᵀw, Σw). The caller applies the affine map, α, β·z and the tables' Sᵀ."""
    v = EMPTY_V if v is None else c_float(v)
    m = np.shape(U)[1] if np.ndim(U) == 2 else 1
    stats, tables, f, g = plan._run(gramvec_kernel, U, xf, xc, c, (v,), m)
    return Pass(None, tables, f, g, float(stats[0]) if np.ndim(U) == 1 else stats)


def kmeans_pass(plan, U, x_sq, c_sq, rounding, xf=None, xc=None, c=0.0):
    """Lloyd's assignment pass: Z = scores (U: the tables' S_g·C_gᵀ, total + 1 × k), squared
    distances (‖x‖² + ‖c‖²) - 2Z with models/kmeans.py's rounding rule (``rounding`` = its
    links.rounding(centers)); returns Assignment (labels, closest, inertia, counts, cluster
    sums)."""
    k = np.shape(U)[1]
    labels, closest = np.empty(plan.n, dtype=np.intp), np.empty(plan.n)
    args = (c_float(x_sq), c_float(c_sq), float(rounding))
    stats, tables, f, g = plan._run(kmeans_kernel, U, xf, xc, c, args, 1 + k, (labels, closest))
    return Assignment(labels, closest, float(stats[0]), stats[1:], tables, f, g)
