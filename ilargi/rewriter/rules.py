"""The rewrite rules: every operator on T₀ = Σ_p I_p S_p M_pᵀ as work on the small sources.

Notation (``docs/design.rst``, "Rewrite rules"): g(Z, rows) gathers rows of Z (0 where
rows = -1), s(Y, rows, n_p) segment-sums rows of Y into n_p buckets, cols_p scatters source
columns into target columns. The affine state T = T₀·diag(a) + 1·bᵀ is applied on top of these by
:class:`~ilargi.rewriter.normalized.NormalizedMatrix`. Each function is one rule; the kernels
behind g and s come from the arrays' backend, and a backend's stacked form of a rule (all parts in
a few launches, on the GPU) is taken first where it has one (:func:`ilargi.backend.optional`).
"""

from functools import reduce
from operator import add

import numpy as np

from ilargi.backend import backend_of, optional
from ilargi.metadata.indicator import Indicator

from . import passes
from .grouping import by_indicator, folds


def d_of(parts):
    """The target width the parts reach (their largest target column + 1)."""
    return max((int(part.cols.max()) + 1 for part in parts if part.cols.size), default=0)


def _gather_groups(kernels, groups, small, n, like, out=None, started=False):
    """Σ_g g(small[g], rows_g), folding coarse groups into their hosts first (see :func:`folds`);
    into ``out`` if given (accumulating if ``started``, else overwriting it)."""
    for c, h, factor in folds(groups):
        small[h] = small[h] + kernels.gather(small[c], factor)
        small[c] = None
    for group, Z in zip(groups, small):
        if Z is None:
            continue
        if started:
            out = kernels.gather_add(out, Z, group[0].indicator)
        else:
            out, started = kernels.gather(Z, group[0].indicator, out=out), True
    if started:
        return out
    if out is None:
        return kernels.xp.zeros((n,) + like.shape[1:], dtype=like.dtype)
    out[...] = 0
    return out


def lmm(parts, n, X, out=None):
    """T₀·X = Σ_p g(S_p · X[cols_p], rows_p): multiply the small source first, then gather.

    ``out``: a buffer of the result's shape and dtype to write into (training loops reuse one).
    """
    kernels = backend_of(X)
    tabs = passes.tables(kernels, parts, n)  # a backend has a PassPlan or a fused_lmm, not both
    if tabs is not None:
        dtype = tabs.result_dtype(X)
        into = out if out is not None and dtype == np.float64 and out.flags.c_contiguous else None
        stacked = passes.lmm(tabs, kernels, X, out=into).astype(dtype, copy=False)
    else:
        fused = optional(kernels, "fused_lmm")
        stacked = None if fused is None else fused(parts, n, X)
    if stacked is not None:
        if out is None or stacked is out:
            return stacked
        out[...] = stacked
        return out
    groups = by_indicator(parts)  # parts of one table: summed before the table's single gather
    products, started = [], False
    for group in groups:
        if not group[0].indicator.is_identity:
            products.append(
                reduce(add, (kernels.product(part.operand(), X[part.target]) for part in group))
            )
            continue
        products.append(None)
        for part in group:  # fact parts: n-long products, written straight into the result
            if started:
                out += kernels.product(part.operand(), X[part.target])
            else:
                out, started = kernels.product(part.operand(), X[part.target], out=out), True
    return _gather_groups(kernels, groups, products, n, X, out, started)


def tmm(parts, d, Y):
    """T₀ᵀ·Y = Σ_p M_p · S_pᵀ · s(Y, rows_p, n_p): aggregate first, then one small product."""
    kernels = backend_of(Y)
    tabs = passes.tables(kernels, parts, Y.shape[0])
    if tabs is not None:
        return passes.tmm(tabs, kernels, Y, d).astype(tabs.result_dtype(Y), copy=False)
    fused = optional(kernels, "fused_tmm")
    out = None if fused is None else fused(parts, d, Y)
    if out is not None:
        return out
    groups = by_indicator(parts)
    sums = [None] * len(groups)
    fold = folds(groups)
    folded = {c for c, _, _ in fold}
    for g, group in enumerate(groups):
        if g not in folded:
            sums[g] = kernels.segment_sum(Y, group[0].indicator)  # once per table, not per part
    for c, h, factor in reversed(fold):  # hosts before what folds into them
        sums[c] = kernels.segment_sum(sums[h], factor)
    for group, group_sums in zip(groups, sums):
        for part in group:
            block = kernels.transposed_product(part.operand(), group_sums)
            if out is None:
                out = kernels.xp.zeros((d,) + block.shape[1:], dtype=block.dtype)
            out[part.target] += block
    return kernels.xp.zeros((d,) + Y.shape[1:], dtype=Y.dtype) if out is None else out


def colsums(parts, d):
    """colSums(T₀) = Σ_p M_p · S_pᵀ cnt_p, with cnt_p = bincount(rows_p ≥ 0) built once."""
    kernels = backend_of(*(part.source for part in parts))
    fused = optional(kernels, "fused_colsums")
    out = None if fused is None else fused(parts, d)
    if out is not None:
        return out
    out = kernels.xp.zeros(d)
    for part in parts:
        ind = part.indicator
        if ind.is_identity:
            out[part.target] += kernels.column_sums(part.source)
        else:
            out[part.target] += kernels.transposed_product(part.summable(), ind.counts())
    return out


def rowsums(parts, n):
    """rowSums(T₀) = Σ_p g(rowSums(S_p), rows_p)."""
    kernels = backend_of(*(part.source for part in parts))
    fused = optional(kernels, "fused_rowsums")
    out = None if fused is None else fused(parts, n)
    if out is not None:
        return out
    tabs = passes.tables(kernels, parts, n)
    if tabs is not None:
        return passes.rowsums(tabs, kernels, d_of(parts))
    groups = by_indicator(parts)
    sums = [reduce(add, (kernels.row_sums(part.source) for part in group)) for group in groups]
    return _gather_groups(kernels, groups, sums, n, kernels.xp.empty(0))


def crossprod(parts, d, w=None, sparse=False):
    """T₀ᵀ·diag(w)·T₀ = Σ_{p,q} M_p S_pᵀ C_pq S_q M_qᵀ with C_pq = I_pᵀ diag(w) I_q.

    Diagonal blocks: C_pp = diag(s(w, rows_p)), so S_pᵀ diag(s(w, rows_p)) S_p on the source rows.
    Cross blocks: C_pq is the n_p × n_q co-occurrence matrix (≤ n entries, pattern cached), applied
    to the cheaper side: S_pᵀ (C_pq S_q) or (C_pqᵀ S_p)ᵀ S_q; or, for a narrow sparse S_p,
    (C_pqᵀ S_p) is summed straight from S_p's entries (see :class:`_Pushed`); or, where q's rows
    are a function of p's and both sources' rows are short, summed row by row over p's source
    rows (see :func:`_direct`).
    """
    kernels = backend_of(*(part.source for part in parts))
    out = kernels.BlockAccumulator(d, sparse)
    pushed = _Pushed(kernels, parts, w)
    grams = pushed.fact_pass(parts)
    for p, first in enumerate(parts):
        gram = grams.get(id(first))
        if gram is None:
            if w is None:
                weights = None if first.indicator.is_identity else first.indicator.counts()
            else:
                weights = kernels.segment_sum(w, first.indicator)
            gram = kernels.weighted_gram(first.summable(), weights)
        out.add(first.cols, first.cols, gram)
        for second in parts[p + 1 :]:
            block = _cross_block(kernels, first, second, w, pushed)
            if block is not None:
                out.add(first.cols, second.cols, block)
                out.add(second.cols, first.cols, block.T)
    return out.result()


def _cross_block(kernels, first, second, w, pushed):
    """S_pᵀ · I_pᵀ diag(w) I_q · S_q, aggregating whichever side costs fewer operations."""
    fused = optional(kernels, "fused_cross_block")
    block = None if fused is None else fused(first, second, w)
    if block is not None:
        return block
    if first.indicator is second.indicator:  # one table (or two fact parts): C = diag(s(w, rows))
        ind = first.indicator
        weights = (
            (None if ind.is_identity else ind.counts())
            if w is None
            else kernels.segment_sum(w, ind)
        )
        S_q = second.summable()
        return kernels.transposed_product(
            first.summable(), S_q if weights is None else kernels.scale_rows(S_q, weights)
        )
    block = _direct(kernels, first, second, w)
    if block is None:
        block = pushed.block(first, second)
    if block is not None:
        return block
    C = kernels.cooccurrence(first.indicator, second.indicator, w)
    if C is None:
        return None
    S_p, S_q = first.summable(), second.summable()
    (n_p, d_p), (n_q, d_q) = S_p.shape, S_q.shape
    if C.nnz * d_q + n_p * d_p * d_q <= C.nnz * d_p + n_q * d_p * d_q:
        return kernels.transposed_product(S_p, C @ S_q)
    return kernels.transposed_product(C.T @ S_p, S_q)


# Where one table's rows determine the other's (each order has one customer), the cross block is
# summed over the finer table's rows, Σ_r s(w)_r·S_p[r]ᵀ·S_q[f(r)], when a row of S_p's entries
# times a row of S_q's is at most DIRECT_ENTRIES and the d_p × d_q partial (DIRECT_CELLS values)
# stays in cache (TPC-H's orders' one-hot columns against customer's: several times faster than
# the co-occurrence matrix and two sparse products). Between independent tables a
# row-by-row pass measured slower than the pushes (each is shared by all of a table's parts).
DIRECT_ENTRIES = 8
DIRECT_CELLS = 1 << 12


def _direct(kernels, first, second, w):
    """S_pᵀ·I_pᵀ diag(w) I_q·S_q = Σ_r s(w, rows_p)_r·S_p[r]ᵀ·S_q[f(r)] for q = f(p) (or the
    other way round), one pass over p's source rows; None where no such f exists or the rows
    are not narrow."""
    direct = optional(kernels, "direct_cross")
    S_p, S_q = first.summable(), second.summable()
    if (
        direct is None
        or first.indicator.is_identity
        or second.indicator.is_identity
        or S_p.shape[1] * S_q.shape[1] > DIRECT_CELLS
        or _entries(kernels, S_p) * _entries(kernels, S_q) > DIRECT_ENTRIES
    ):
        return None
    for fine, coarse, flip in ((first, second, False), (second, first, True)):
        mapped = coarse.indicator.function_of(fine.indicator)
        if mapped is not None:
            sums = fine.indicator.counts() if w is None else kernels.segment_sum(w, fine.indicator)
            block = direct(fine.summable(), None, coarse.summable(), mapped, sums)
            return block.T if flip else block
    return None


def _entries(kernels, S):
    """Stored entries per row of a source (its width if dense)."""
    return S.nnz / max(S.shape[0], 1) if kernels.is_sparse(S) else S.shape[1]


# A dense dimension part is pushed one bincount per column: beyond two columns the co-occurrence
# matrix (built once, cached) and a dense product cost less.
DENSE_PUSHED = 2


class _Pushed:
    """Cross blocks of a narrow part p through the target rows: A = I_qᵀ diag(w) I_p S_p is
    summed from S_p's entries into the other table's n_q rows (dense n_q × d_p), then S_pqᵀ =
    Aᵀ S_q is a small product. A is computed once per (part, indicator) in one crossprod and
    shared by all of q's parts; an indicator that folds into a host's (I_q = I_h·F, see
    :func:`folds`) sums the host's A further, once that exists, instead of passing over the
    target rows again.

    Used where the co-occurrence matrix would have ~n entries (no functional dependency between
    the two tables) and the backend has the kernel; p is the side with fewer entries to sum.
    """

    def __init__(self, kernels, parts, w):
        self.kernels, self.w, self.sums = kernels, w, {}
        self.pushed_sums = optional(kernels, "pushed_sums")
        self.narrow = optional(kernels, "NARROW")  # given with pushed_sums
        groups = by_indicator(parts)
        self.hosts = (
            {
                id(groups[c][0].indicator): (groups[h][0].indicator, factor)
                for c, h, factor in folds(groups)
            }
            if self.pushed_sums is not None
            else None
        )

    def fact_pass(self, parts):
        """{id(part): S_pᵀ·diag(w)·S_p} for the dense fact parts that the backend's fact pass
        (``gram_pushes``) reads once for their Gram and their pushes into every table they
        cross (kept in self.sums); a table that folds into a host pushed there is summed from
        the host's push later."""
        fused = optional(self.kernels, "gram_pushes")
        if fused is None or self.hosts is None:
            return {}
        tables = list(
            {
                id(part.indicator): part.indicator
                for part in parts
                if not part.indicator.is_identity
            }.values()
        )
        listed = {id(ind) for ind in tables}
        tables = [ind for ind in tables if id(self.hosts.get(id(ind), (None,))[0]) not in listed]
        grams = {}
        for part in parts:
            if not part.indicator.is_identity or self.kernels.is_sparse(part.summable()):
                continue
            targets = [ind for ind in tables if self._cost(part, ind) != float("inf")]
            done = fused(part.summable(), targets, self.w) if targets else None
            if done is None:
                continue
            grams[id(part)] = done[0]
            for ind, A in zip(targets, done[1]):
                self.sums[id(part), id(ind)] = A
        return grams

    def block(self, first, second):
        if self.hosts is None or _functional(first.indicator, second.indicator):
            return None
        options = [
            (self._cost(p, q.indicator), flip, p, q)
            for flip, p, q in ((False, first, second), (True, second, first))
        ]
        cost, flip, pushed, other = min(options, key=lambda option: option[:2])
        if cost == float("inf"):
            return None
        A = self._sums(pushed, other.indicator)
        block = self.kernels.transposed_product(other.summable(), A)  # S_otherᵀ·A = (Aᵀ·S_other)ᵀ
        return block if flip else block.T

    def _cost(self, pushed, ind):
        """Entries summed to push ``pushed`` into the rows of indicator ``ind`` (0 if already
        summed), or infinity where this route does not apply: S_p wider than NARROW
        (DENSE_PUSHED for a dense dimension part), A larger than 4 n-vectors, or into the fact
        rows (a gather, not a sum)."""
        if (id(pushed), id(ind)) in self.sums:
            return 0
        S = pushed.summable()
        n, (n_other, width) = pushed.indicator.n_rows, (ind.n_source, S.shape[1])
        sparse = self.kernels.is_sparse(S)
        if (
            width > (self.narrow if sparse or pushed.indicator.is_identity else DENSE_PUSHED)
            or n_other * width > 4 * n
            or ind.is_identity
        ):
            return float("inf")
        per_row = S.nnz / max(S.shape[0], 1) if sparse else width
        return n * per_row + n_other * width

    def _sums(self, part, ind):
        key = (id(part), id(ind))
        if key not in self.sums:
            host = self.hosts.get(id(ind))
            if host is not None and (id(part), id(host[0])) in self.sums:
                self.sums[key] = self.kernels.segment_sum(self.sums[id(part), id(host[0])], host[1])
            else:
                self.sums[key] = self.pushed_sums(part.summable(), part.indicator, ind, self.w)
        return self.sums[key]


def _functional(first, second):
    """Whether one table's rows determine the other's (then the co-occurrence matrix is small)."""
    if first.is_identity or second.is_identity:
        return False
    return first.function_of(second) is not None or second.function_of(first) is not None


def tcrossprod(parts, n, column_weights):
    """T₀·diag(c)·T₀ᵀ = Σ_{p,q} g(g(S_p[:, shared] diag(c) S_q[:, shared]ᵀ, rows_p)ᵀ, rows_q)ᵀ.

    Only target columns that both parts cover contribute; the n_p × n_q block is gathered into
    the n × n result on the rows each part covers.
    """
    kernels = backend_of(*(part.source for part in parts))
    out = kernels.xp.zeros((n, n))
    referenced = [_referenced(part, n, kernels) for part in parts]
    for first, (S_p, ind_p) in zip(parts, referenced):
        for second, (S_q, ind_q) in zip(parts, referenced):
            shared, i_p, i_q = np.intersect1d(first.cols, second.cols, return_indices=True)
            if shared.size == 0:
                continue
            left = kernels.scale_columns(kernels.select_columns(S_p, i_p), column_weights[shared])
            right = kernels.select_columns(S_q, i_q).T
            # The backend's product for a dense right side (on the CPU: in row blocks on the
            # compiled kernels' threads, see pool.py), SciPy's for a sparse one.
            block = kernels.to_dense(
                left @ right if kernels.is_sparse(right) else kernels.product(left, right)
            )
            block = kernels.gather(block, ind_p)
            out += kernels.gather(kernels.xp.ascontiguousarray(block.T), ind_q).T
    return out


def _referenced(part, n, kernels):
    """(S_p, I_p) cut to the source rows the target references, where the source has more rows
    than the target (a selection of a few rows): tcrossprod's n_p × n_q block is then at most
    n × n, however large the sources. I_p·S_p = I'_p·S_p[used] with I'_p the rows renumbered."""
    ind = part.indicator
    if ind.is_identity or ind.n_source <= n:
        return part.source, ind
    xp, present = kernels.xp, ind.rows >= 0
    used = xp.zeros(ind.n_source, dtype=bool)
    used[ind.rows[present]] = True
    renumbered = xp.where(present, xp.cumsum(used)[ind.rows] - 1, -1).astype(np.intp)
    return (
        kernels.select_rows(part.source, used),
        Indicator(renumbered, int(used.sum()), validate=False),
    )
