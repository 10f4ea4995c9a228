"""Rules as one pass over the target rows, for a backend with a PassPlan (the compiled CPU backend).

Write T₀·X = Σ_g g(U_g, rows_g) + F·X_F + C·X_C, with U_g = Σ_{p∈g} S_p·X[cols_p] the small products
of each gathered table g (a table folded into a host, I_c = I_h·F, adds g(U_c, F) into U_h first),
and F, C the fact table's dense and sparse parts. One pass over the target rows computes the scores
z_i of every row, applies a link to them (none for T₀·X; the log-loss residual; v ⊙ z for gramvec;
Lloyd's assignment for k-means) and sends the result r back in the same pass:

    T₀ᵀ·r = Σ_g Σ_{p∈g} M_p · S_pᵀ · s(r, rows_g) + M_F·Fᵀr + M_C·Cᵀr,

every table's segment-sum s(r, rows_g) accumulated while each fact row is read once. The
:class:`Tables` of a matrix (which tables are gathered, the fact blocks, the backend's plan) are
built once and cached on its parts.

Where every gathered table is sparse (one-hot dimensions) and none folds into another, their
sources stand stacked as one CSR D (the tables' rows one under another as in U, each entry in its
target column): the stacked products are then U = D·X and Σ_g Σ_p M_p·S_pᵀ·s(r, rows_g) = Dᵀ·s, one
call each way in place of two per part, which is most of a small table's cost.
"""

from functools import reduce
from operator import add

import numpy as np
import scipy.sparse as sp

from ilargi.backend import optional

from .grouping import by_indicator, folds


def tables(kernels, parts, n):
    """The :class:`Tables` of these parts (built on first use, then cached on them), or None
    where the backend has no PassPlan."""
    if optional(kernels, "PassPlan") is None or not parts:
        return None
    return parts[0].cached("pass_tables", lambda: Tables(kernels, parts, n), owner=tuple(parts))


def _index(cols):
    """``cols`` as an index into a target-indexed array: a slice where contiguous (a view)."""
    if cols.size and cols[-1] - cols[0] == cols.size - 1 and bool((np.diff(cols) == 1).all()):
        return slice(int(cols[0]), int(cols[-1]) + 1)
    return cols


class Tables:
    """The gathered tables and fact blocks of T₀ as one pass reads them (built once per parts)."""

    def __init__(self, kernels, parts, n):
        self.dtype = np.result_type(*(part.source.dtype for part in parts))
        self.groups = by_indicator(parts)
        self.fold = folds(self.groups)
        folded = {c for c, _, _ in self.fold}
        self.gathered = [
            g
            for g, group in enumerate(self.groups)
            if not group[0].indicator.is_identity and g not in folded
        ]
        fact = [
            (part, part.operand())
            for group in self.groups
            if group[0].indicator.is_identity
            for part in group
        ]
        dense = [(part, S) for part, S in fact if not kernels.is_sparse(S)]
        sparse = [(part, S) for part, S in fact if kernels.is_sparse(S)]
        self.dense = _block(dense, np.hstack)
        self.sparse = _block(sparse, lambda blocks: sp.hstack(blocks, format="csr"))
        self.plan = optional(kernels, "PassPlan")(
            [self.groups[g][0].indicator for g in self.gathered],
            fact=self.dense[1],
            fact_csr=self.sparse[1],
            n=n,
        )
        self.stacked = (
            None if self.fold else _stacked(kernels, [self.groups[g] for g in self.gathered])
        )

    def result_dtype(self, X):
        """The dtype of the sources' product with X, as NumPy would give it (the passes compute
        in float64)."""
        return self.dtype if X.dtype == self.dtype else np.result_type(self.dtype, X.dtype)

    def forward(self, kernels, X):
        """(U, x_F, x_C): the stacked small products of the gathered tables and the fact blocks'
        rows of X, the operands of a pass computing T₀·X."""
        U = self.plan.workspace(None if X.ndim == 1 else X.shape[1])
        if self.stacked is not None:
            kernels.product(self.stacked, X[: self.stacked.shape[1]], out=U[:-1])
            return (U, *self._fact_operands(X))
        slot = {g: self.plan.table(U, i) for i, g in enumerate(self.gathered)}
        small = {}
        for g, group in enumerate(self.groups):
            if group[0].indicator.is_identity:
                continue
            products = [
                kernels.product(
                    part.operand(), X[part.target], out=slot.get(g) if len(group) == 1 else None
                )
                for part in group
            ]  # a table of one part: straight into its rows of U
            small[g] = reduce(add, products)
        for c, h, factor in self.fold:  # coarsest first: chains fold in turn
            small[h] = small[h] + kernels.gather(small[c], factor)
        for g, rows in slot.items():
            if small[g] is not rows:
                rows[...] = small[g]
        return (U, *self._fact_operands(X))

    def _fact_operands(self, X):
        """(x_F, x_C): the fact blocks' rows of X (None for a block that is absent)."""
        return (
            None if self.dense[0] is None else X[self.dense[0]],
            None if self.sparse[0] is None else X[self.sparse[0]],
        )

    def backward(self, kernels, done, d):
        """T₀ᵀ·r (d [× m], float64) from a pass's pieces: every table's Iᵀ·r through its
        sources, and the fact blocks' transposed products."""
        out = np.zeros((d,) + done.tables.shape[1:])
        if self.stacked is not None:
            out[: self.stacked.shape[1]] = kernels.transposed_product(self.stacked, done.tables)
        else:
            self._tables_backward(kernels, done, out)
        if done.fact is not None:
            out[self.dense[0]] += done.fact
        if done.csr is not None:
            out[self.sparse[0]] += done.csr
        return out

    def _tables_backward(self, kernels, done, out):
        """out += Σ_g Σ_{p∈g} M_p · S_pᵀ · s(r, rows_g), table by table (folds through hosts)."""
        sums = {g: self.plan.table(done.tables, i) for i, g in enumerate(self.gathered)}
        for c, h, factor in reversed(self.fold):  # hosts before what folds into them
            sums[c] = kernels.segment_sum(sums[h], factor)
        for g, group in enumerate(self.groups):
            if g in sums:
                for part in group:
                    out[part.target] += kernels.transposed_product(part.operand(), sums[g])


def _stacked(kernels, groups):
    """D (total × w, float64 CSR): the gathered tables' sources one under another, as the pass
    plan stacks their values (table i from row offsets[i]), each entry in its target column,
    w = 1 + the last; None unless every source is a float64 CSR (a dense one multiplies faster
    by BLAS)."""
    operands = [(part, part.operand()) for group in groups for part in group]
    if not operands or not all(kernels.is_sparse(S) and S.dtype == np.float64 for _, S in operands):
        return None
    width = 1 + max(int(part.cols.max()) for part, _ in operands)
    # Each source's CSR arrays with its columns mapped, not a COO: building D from a COO took a
    # large share of a short first fit on a wide one-hot table.
    tables = [
        reduce(
            add,
            [
                sp.csr_array((S.data, part.cols[S.indices], S.indptr), shape=(S.shape[0], width))
                for part, S in ((p, p.operand().tocsr()) for p in group)
            ],
        )
        for group in groups
    ]
    return sp.vstack(tables, format="csr")


def _block(parts, stack):
    """(target index, block) of the fact parts of one kind, side by side; (None, None) if none."""
    if not parts:
        return None, None
    cols = np.concatenate([part.cols for part, _ in parts])
    block = parts[0][1] if len(parts) == 1 else stack([S for _, S in parts])
    return _index(cols), block


# ---------------------------------------------------------------------------------------------
# The rules, each one pass. X is already scaled by the affine a (T₀·(a⊙X)), c is the constant
# added to every score (the intercept and bᵀX).


def lmm(tabs, kernels, X, c=0.0, out=None):
    """T₀·X + c: the pass with no link (into ``out``, float64, if given)."""
    U, xf, xc = tabs.forward(kernels, X)
    return tabs.plan.scores(U, xf, xc, c, out=out)


def tmm(tabs, kernels, Y, d):
    """T₀ᵀ·Y: the segment-sums of Y into every table and the fact blocks' products in one pass."""
    return tabs.backward(kernels, tabs.plan.transposed(Y), d)


def rowsums(tabs, kernels, d):
    """rowSums(T₀) = T₀·1: each table's small product is its row sums."""
    return lmm(tabs, kernels, np.ones(d))


def loss(tabs, kernels, X, c, link, d):
    """(Σ_i loss_i, T₀ᵀ·r, Σ_i r_i) for the scores T₀·X + c and the link's residual r, in one pass."""
    U, xf, xc = tabs.forward(kernels, X)
    if link.kind == "logistic":
        done = optional(kernels, "logistic_pass")(tabs.plan, U, link.y, link.sw, xf, xc, c)
    else:
        done = optional(kernels, "softmax_pass")(tabs.plan, U, link.labels, link.sw, xf, xc, c)
    return done.loss, tabs.backward(kernels, done, d), done.total


def gramvec(tabs, kernels, X, c, v, d):
    """(T₀ᵀ·w, Σ_i w_i) for w = v ⊙ (T₀·X + c), in one pass."""
    U, xf, xc = tabs.forward(kernels, X)
    done = optional(kernels, "gramvec_pass")(tabs.plan, U, v, xf, xc, c)
    return tabs.backward(kernels, done, d), done.total


def assign(tabs, kernels, X, c, x_sq, c_sq, rounding, d):
    """Lloyd's assignment to the centers whose scores are T₀·X + c (X = centersᵀ, d × k) in one
    pass: (labels, closest, inertia, counts, T₀ᵀ·onehot(labels)), the last the clusters' sums."""
    U, xf, xc = tabs.forward(kernels, X)
    done = optional(kernels, "kmeans_pass")(tabs.plan, U, x_sq, c_sq, rounding, xf, xc, c)
    return done.labels, done.closest, done.inertia, done.counts, tabs.backward(kernels, done, d)
