"""The reductions of a NormalizedMatrix: ``sum``, ``mean``, ``var``, ``std``, ``sum_of_squares``,
``min`` and ``max``, over all cells, down columns or along rows.

:class:`ReductionsMixin` is one of the mixins :class:`~ilargi.rewriter.NormalizedMatrix` is made
of, kept apart so that each kind of operator reads on its own. Each reduction is computed from the
sources and the affine state, counting the NULL cells (value b) and only the source rows T uses,
and equals the reduction of the materialized table, at the edges of float64 too:

* sums take the fast form (colSums, rowSums) and, where it is not finite, sum the cells again
  scaled by a power of two per column (exact in binary floating point), so that a sum is finite
  wherever the exact sum of the cells is, and ±inf where that overflows;
* variances follow NumPy's two-pass definition, Σ (x − mean)² over the cells: down columns and
  over all cells the mean is one number per column, so the pass is factorized exactly (each source
  row weighed by how many target rows take it); along rows each source row's own centre, centred
  sum of squares and residual combine exactly into the row's sum (a row whose combination is not
  finite is summed from its cells).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi.backend.contract import Array
from ilargi.metadata import group_rows

from . import pool, rules
from .operators import reduced_axis
from .state import MatrixState

# Partial sums of cells scaled below 2**LIMIT_EXPONENT cannot overflow float64 (max < 2**1024).
LIMIT_EXPONENT = 1020
CHUNK_CELLS = 1 << 22  # cells of a dense block of source rows evaluated at once


def _exponents(xp, bound, count):
    """Per bound, the power of two to divide cells of magnitude ≤ bound by so that ``count`` of
    them sum below 2**LIMIT_EXPONENT (0 where no scaling is needed; a non-finite bound, a column
    with a cell that is ±inf or NaN itself, is scaled as one of the largest finite cells)."""
    finite = xp.isfinite(bound)
    _, top = xp.frexp(xp.where(finite, bound, np.finfo(np.float64).max))
    share = int(np.ceil(np.log2(max(int(count), 1)))) + 1
    return xp.maximum(top + share - LIMIT_EXPONENT, 0).astype(np.int64)


def scaled_sum(xp, mantissa, exponent):
    """Σ mantissa·2^exponent without intermediate overflow: the terms are brought under one
    power of two, summed, and multiplied back (±inf only where the sum itself overflows).

    Examples
    --------
    >>> m, e = np.frexp(np.array([1.5e308, 1e308, -1e308]))
    >>> float(scaled_sum(np, m, e)) == 1.5e308
    True
    """
    if mantissa.size == 0:
        return 0.0
    finite = xp.isfinite(mantissa)
    top = int(xp.where(finite, exponent, -(2**30)).max()) if bool(finite.any()) else 0
    top += int(np.ceil(np.log2(mantissa.size))) + 1
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(xp.ldexp(mantissa, exponent - top).sum())
        return float(np.ldexp(total, top))


def add_scaled(*items):
    """The sum of (mantissa, exponent) pairs of arrays (column sums in the form of
    ``_exact_colsums``), as such a pair: each position brought under one power of two, so that no
    partial sum overflows (the tree reduction of a distributed column sum)."""
    xp = np
    mantissas = xp.stack([xp.asarray(m, dtype=np.float64) for m, _ in items])
    exponents = xp.stack([xp.asarray(e, dtype=np.int64) for _, e in items])
    finite = xp.isfinite(mantissas) & (mantissas != 0)
    top = xp.where(finite, exponents, -(2**30)).max(axis=0)
    top = xp.where(top == -(2**30), 0, top) + int(np.ceil(np.log2(len(items)))) + 1
    with np.errstate(over="ignore", invalid="ignore"):
        total = xp.ldexp(mantissas, exponents - top).sum(axis=0)
    mantissa, extra = xp.frexp(total)
    return mantissa, extra + top


def _entry_rows(xp, S):
    """The row of each stored entry of a CSR matrix (a search in its row pointers: CuPy's
    ``repeat`` takes no array of counts)."""
    return xp.searchsorted(S.indptr[1:], xp.arange(S.nnz), side="right")


def _blocks(kernels, S):
    """Row blocks of a source of at most CHUNK_CELLS cells each: (start, dense block)."""
    step = max(1, CHUNK_CELLS // max(S.shape[1], 1))
    for start in range(0, S.shape[0], step):
        block = S[start : start + step]
        yield start, kernels.to_dense(block) if kernels.is_sparse(block) else block


def _weighted_cell_sums(kernels, S, weights, g, a, b, cols):
    """Σ_r w_r·g(a_j·S_rj + b_j, cols_j) per source column j (w = 1 where ``weights`` is None),
    every cell evaluated as the materialized table holds it; a sparse S's implicit zeros are the
    cells b_j, counted by weight instead of stored."""
    xp = kernels.xp
    with np.errstate(over="ignore", invalid="ignore"):
        if kernels.is_sparse(S):
            S = kernels.as_csr(S)
            entry_row = _entry_rows(xp, S)
            entry_weight = xp.ones(S.nnz) if weights is None else weights[entry_row]
            values = g(S.data * a[S.indices] + b[S.indices], cols[S.indices])
            k = S.shape[1]
            stored = xp.bincount(S.indices, weights=entry_weight * values, minlength=k)
            stored_weight = xp.bincount(S.indices, weights=entry_weight, minlength=k)
            implicit = (S.shape[0] if weights is None else weights.sum()) - stored_weight
            return stored + xp.where(implicit > 0, implicit * g(b, cols), 0.0)
        out = xp.zeros(S.shape[1])
        for start, block in _blocks(kernels, S):
            values = g(block * a + b, cols[None, :])
            if weights is None:
                out += values.sum(axis=0)
            else:
                with pool.blas(kernels):
                    out += weights[start : start + block.shape[0]] @ values
        return out


def _row_cell_sums(kernels, S, g, a, b):
    """Σ_j g(a_j·S_rj + b_j, r) per source row r over the part's columns (a sparse S's implicit
    zeros as b_j: on the stored values where b is one value, else in dense row blocks)."""
    xp = kernels.xp
    n_rows, k = S.shape
    with np.errstate(over="ignore", invalid="ignore"):
        if kernels.is_sparse(S) and k and bool(b.min() == b.max()):
            S = kernels.as_csr(S)
            per_row = xp.diff(S.indptr)
            entry_row = _entry_rows(xp, S)
            values = g(S.data * a[S.indices] + b[S.indices], entry_row)
            stored = xp.bincount(entry_row, weights=values, minlength=n_rows)
            implicit = k - per_row
            fill = g(xp.full(n_rows, b[0]), xp.arange(n_rows))
            return stored + xp.where(implicit > 0, implicit * fill, 0.0)
        out = xp.zeros(n_rows)
        for start, block in _blocks(kernels, S):
            rows = xp.arange(start, start + block.shape[0])[:, None]
            out[start : start + block.shape[0]] = g(block * a + b, rows).sum(axis=1)
        return out


class ReductionsMixin(MatrixState):
    """``sum``, ``mean``, ``var``, ``std``, ``sum_of_squares``, ``min`` and ``max`` of
    :class:`~ilargi.rewriter.NormalizedMatrix` (a mixin: it reads the matrix's parts, shape and
    affine state)."""

    def _axis(self, axis):
        """The axis of the untransposed T that ``axis`` of this view reduces (0, 1 or None)."""
        return reduced_axis(axis, self._transposed)

    @staticmethod
    def _finish(result, axis, keepdims, out, shape):
        if keepdims:
            result = result.reshape(
                (1, 1) if axis is None else ((1, shape[1]) if axis == 0 else (shape[0], 1))
            )
        if out is not None:
            out[...] = result
            return out
        return result

    def _colsums(self):
        """colSums(T) = a⊙colSums(T₀) + n·b; where that is not finite, the scaled cell sums."""
        xp = self._kernels.xp
        with np.errstate(over="ignore", invalid="ignore"):  # what overflows is summed again
            out = rules.colsums(self._parts, self._shape[1])
            if self._scale is not None:
                out = out * self._scale
            if self._shift is not None:
                out = out + self._shape[0] * self._shift
            if self._needs_scaled_sums(out, self._shape[0]):
                bad = ~xp.isfinite(out) | self._cells_may_overflow()
                mantissa, exponent = self._scaled_colsums()
                out = xp.where(bad, xp.ldexp(mantissa, exponent), out)
        return out

    def _scaled_colsums(self):
        """colSums(T) as (mantissa, exponent) arrays, summed from the cells of each column divided
        by a power of two that keeps every partial sum finite: the column's sum is
        mantissa·2^exponent even where it exceeds float64 (the cell values, not a·colSums(T₀) + n·b,
        so a cell that overflows is ±inf as in the materialized table)."""
        xp = self._kernels.xp
        exponent = _exponents(xp, self._column_absmax(), self._shape[0])
        factor = xp.ldexp(xp.ones(self._shape[1]), -exponent)
        scaled = self._cell_column_sums(lambda v, c: v * factor[c])
        mantissa, extra = xp.frexp(scaled)
        return mantissa, extra + exponent

    def _total(self):
        """Σ over all cells: the column sums' total, or their scaled total where that overflows."""
        xp = self._kernels.xp
        sums = self._colsums()
        with np.errstate(over="ignore", invalid="ignore"):
            total = sums.sum()  # a scalar on the matrix's device
            if bool(xp.isfinite(total)) or self._any_nan(sums):
                return total
            return xp.asarray(scaled_sum(xp, *self._exact_colsums(sums)))[()]

    def _exact_colsums(self, sums=None):
        """colSums(T) as (mantissa, exponent) arrays: column j sums to mantissa_j·2^exponent_j
        even beyond float64, so that partial sums (of columns, of partitions) combine without
        overflow (:func:`scaled_sum`, :func:`add_scaled`)."""
        xp = self._kernels.xp
        sums = self._colsums() if sums is None else sums
        mantissa, exponent = xp.frexp(sums)
        bad = ~xp.isfinite(sums)
        if bool(bad.any()):
            scaled_m, scaled_e = self._scaled_colsums()
            mantissa = xp.where(bad, scaled_m, mantissa)
            exponent = xp.where(bad, scaled_e, exponent)
        return mantissa, exponent.astype(np.int64)

    def _centred_squares(self, centre):
        """Σ_i (T_ij − centre_j)² per column (the second pass of a two-pass variance; ``centre``
        a scalar or one value per column)."""
        xp = self._kernels.xp
        centre = xp.broadcast_to(xp.asarray(centre, dtype=np.float64), (self._shape[1],))
        with np.errstate(over="ignore", invalid="ignore"):
            return self._cell_column_sums(lambda v, c: (v - centre[c]) ** 2)

    def _needs_scaled_sums(self, sums, count):
        """Whether some of the fast ``sums`` (each over ``count`` cells) must be summed again from
        scaled cells. Not where no sum of ``count`` cells can come near overflow (a bound from
        each source's largest value, kept with the source, so the common case reads no sum);
        else their total, finite only where every one of them is, screens them in one reduction
        (a total that overflows from finite sums only costs the exact check)."""
        if self._sums_in_range(count):
            return False
        return self._cells_may_overflow() or not bool(self._kernels.xp.isfinite(sums.sum()))

    def _sums_in_range(self, count):
        """Whether count·max|a·s + b| stays far below the largest float (NaN or inf in a source
        gives False)."""
        xp = self._kernels.xp
        largest = max((part.absmax() for part in self._parts), default=0.0)
        a = 1.0 if self._scale is None or not self._scale.size else float(xp.abs(self._scale).max())
        b = 0.0 if self._shift is None or not self._shift.size else float(xp.abs(self._shift).max())
        with np.errstate(over="ignore", invalid="ignore"):
            bound = (largest * a + b) * max(count, 1)
        return bool(bound < float(np.finfo(self.dtype).max) / 4)

    def _cells_may_overflow(self):
        """Whether some cell a·s + b may overflow where a·colSums(T₀) + n·b would not (the affine
        state on huge values; a bound from each source's largest value, computed once)."""
        return any(self._may_overflow(part) for part in self._parts)

    @staticmethod
    def _any_nan(values):
        return bool(values.size) and bool((values != values).any())

    def _column_absmax(self):
        """max |T_ij| per column (NULL cells included; inf or NaN where a cell is)."""
        xp = self._kernels.xp
        if self._shape[0] == 0:
            return xp.zeros(self._shape[1])
        low, negated_high = self._column_min(), (-self)._column_min()
        return xp.maximum(-low, -negated_high)

    def _cell_column_sums(self, g):
        """Σ_i g(T_ij, j) per column j, over every cell of T: each part's cells a_j·s + b_j (the
        implicit zeros of a sparse source as b_j), each source row counted as often as target rows
        take it, and the NULL cells b_j. Only the source rows T uses are read, so a count of 0
        never meets a non-finite g; ``g(values, columns)`` is elementwise, ``columns`` the target
        column of each value."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        out = xp.zeros(d)
        for part in self._parts:
            ind = part.indicator
            if not ind.n_present or not part.cols.size:
                continue
            if ind.is_identity and not ind.n_absent:
                source, weights = part.source, None
            else:
                used = ind.present() if ind.is_identity else ind.counts() > 0
                source = kernels.select_rows(part.source, used)
                weights = None if ind.is_identity else ind.counts()[used]
            out[part.cols] += _weighted_cell_sums(
                kernels, source, weights, g, a[part.cols], b[part.cols], part.cols
            )
        nulls = n - self._column_coverage()
        has = nulls > 0
        if bool(has.any()):
            columns = xp.flatnonzero(has)
            out[columns] += nulls[columns] * g(b[columns], columns)
        return out

    def _rowsums(self):
        """rowSums(T) = T₀·a + Σb; rows where that is not finite are summed from scaled cells."""
        xp = self._kernels.xp
        n = self._shape[0]
        with np.errstate(over="ignore", invalid="ignore"):  # what overflows is summed again
            out = (
                rules.rowsums(self._parts, n)
                if self._scale is None
                else rules.lmm(self._parts, n, self._scale)
            )
            if out is None:
                out = xp.zeros(n)
            if self._shift is not None:
                out = out + self._shift.sum()
            if self._needs_scaled_sums(out, self._shape[1]):
                bad = ~xp.isfinite(out) | self._cells_may_overflow()
                out = xp.where(bad, self._scaled_rowsums(), out)
        return out

    def _scaled_rowsums(self):
        """rowSums(T) from the cells divided by one power of two that keeps every partial sum of
        a row finite, then multiplied back (±inf only where a row's sum overflows)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        absmax = self._column_absmax()
        finite = absmax[xp.isfinite(absmax)]
        largest = float(finite.max()) if finite.size else 0.0
        exponent = int(_exponents(np, np.array([largest]), d)[0])
        factor = float(np.ldexp(1.0, -exponent))
        total = xp.zeros(n)
        for part in self._parts:
            if not part.cols.size:
                continue
            sums = _row_cell_sums(
                kernels, part.source, lambda v, r: v * factor, a[part.cols], b[part.cols]
            )
            ind = part.indicator
            total += xp.where(xp.asarray(ind.present()), kernels.gather(sums, ind), 0.0)
        inverse, uncovered = self._null_patterns()
        nulls = xp.asarray([float((b[c] * factor).sum()) for c in uncovered])
        if nulls.size:
            total += nulls[inverse]
        return xp.ldexp(total, exponent)

    def _reduce_sum(self, axis):
        if axis == 1:
            return self._rowsums()
        return self._colsums() if axis == 0 else self._total()

    @pool.operator
    def sum(
        self,
        axis: int | None = None,
        dtype: Any = None,
        out: Array | None = None,
        keepdims: bool = False,
    ) -> float | Array:
        """Sum over all cells (axis=None), down columns (0) or along rows (1).

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Sum over all cells (None), down columns (0) or along rows (1).
        dtype : dtype, optional
            Cast the result to it.
        out : array, optional
            Written into when given.
        keepdims : bool, default False
            Keep the reduced axis with length one (sum of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            The total for axis=None, else the column sums (0) or row sums (1).

        Raises
        ------
        ValueError
            For an axis out of range.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> float(T.sum()), T.sum(axis=1).tolist()
        (16.0, [4.0, 9.0, 3.0])
        """
        base_axis = self._axis(axis)
        result = self._base()._reduce_sum(base_axis)
        if dtype is not None:
            result = result.astype(dtype)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    def _view_axis(self, axis):
        return None if axis is None or isinstance(axis, tuple) else axis % 2

    def _count(self, base_axis):
        n, d = self._shape
        return n * d if base_axis is None else (n if base_axis == 0 else d)

    @pool.operator
    def mean(
        self,
        axis: int | None = None,
        dtype: Any = None,
        out: Array | None = None,
        keepdims: bool = False,
    ) -> float | Array:
        """Mean over all cells (axis=None), down columns (0) or along rows (1).

        Parameters
        ----------
        axis, out, keepdims
            As for :meth:`sum`.
        dtype : dtype, optional
            Accepted for NumPy compatibility; the mean is computed in the result type of T.

        Returns
        -------
        float or array
            The mean of all cells, or one mean per column or row.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.mean(axis=0).tolist()
        [2.0, 1.3333333333333333, 2.0]
        """
        base_axis = self._axis(axis)
        base = self._base()
        with np.errstate(divide="ignore", invalid="ignore"):
            result = base._reduce_sum(base_axis) / np.float64(base._count(base_axis))
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    @pool.operator
    def var(
        self,
        axis: int | None = None,
        dtype: Any = None,
        out: Array | None = None,
        ddof: float = 0,
        keepdims: bool = False,
    ) -> float | Array:
        """Variance by NumPy's two-pass definition: Σ (x − mean)² / max(count − ddof, 0).

        Down columns and over all cells the mean is one number per column, so the second pass
        runs on the sources (each source row weighed by how many target rows take it, NULL cells
        as b); along rows each source row's centre, centred sum of squares and residual combine
        exactly into the row's sum. Huge values give inf as NumPy does (never inf − inf = NaN),
        and a large mean with a small spread keeps the digits of its variance.

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Variance over all cells (None), down columns (0) or along rows (1).
        dtype : dtype, optional
            Accepted for NumPy compatibility.
        out : array, optional
            Receives the variance(s) when given.
        ddof : int, default 0
            Delta degrees of freedom.
        keepdims : bool, default False
            Keep the reduced axis with length one (var of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            Variances: one float, or one per column or row.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.var(axis=0), T.toarray().var(axis=0))
        True
        """
        base_axis = self._axis(axis)
        result = self._base()._var(base_axis, ddof)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    def _var(self, axis, ddof):
        """Σ (x − mean)² over the reduced cells / max(count − ddof, 0), NumPy's two-pass form."""
        xp = self._kernels.xp
        n, d = self._shape
        count = np.float64(max(self._count(axis) - ddof, 0))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if axis == 1:
                return self._row_squares() / count
            if axis == 0:
                return self._centred_squares(self._colsums() / np.float64(n)) / count
            squares = self._centred_squares(self._total() / np.float64(n * d))
            return xp.sum(squares) / count

    def _row_squares(self):
        """Σ_j (T_ij − μ_i)² per row, μ_i the row's mean.

        Row i's cells split into groups: the columns of each part present in the row, and the NULL
        columns. A group of k cells v_j with any centre c has Σ (v_j − μ)² = M2 + (c − μ)·(2R +
        k·(c − μ)), with M2 = Σ (v_j − c)² and R = Σ (v_j − c) (an identity: R carries the
        rounding of c, so no digits are lost however close the group means are); c, M2 and R are
        per source row, gathered once. A row where this is not finite (huge or non-finite cells)
        is summed from its cells as NumPy does.
        """
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            mu = self._rowsums() / np.float64(d)
            total = xp.zeros(n)
            for part in self._parts:
                k = part.cols.size
                if not k:
                    continue
                source, ap, bp = part.source, a[part.cols], b[part.cols]
                centre = _row_cell_sums(kernels, source, lambda v, r: v, ap, bp) / k
                m2 = _row_cell_sums(kernels, source, lambda v, r: (v - centre[r]) ** 2, ap, bp)
                residual = _row_cell_sums(kernels, source, lambda v, r: v - centre[r], ap, bp)
                ind = part.indicator
                gap = kernels.gather(centre, ind) - mu
                group = kernels.gather(m2, ind) + gap * (
                    2 * kernels.gather(residual, ind) + k * gap
                )
                total += xp.where(xp.asarray(ind.present()), group, 0.0)
            inverse, uncovered = self._null_patterns()
            for pattern, columns in enumerate(uncovered):
                if columns.size:
                    nulls = b[columns]
                    deviation = nulls - nulls.mean()
                    rows = inverse == pattern
                    gap = nulls.mean() - mu[rows]
                    total[rows] += (deviation * deviation).sum() + gap * (
                        2 * deviation.sum() + columns.size * gap
                    )
            total = xp.maximum(total, 0.0)  # R's rounding can take a zero sum just below 0
            bad = xp.flatnonzero(~xp.isfinite(total))
            if bad.size:
                total[bad] = self._row_squares_from_cells(bad, mu[bad])
        return total

    def _row_squares_from_cells(self, rows, means):
        """Σ_j (T_ij − means_i)² of the given rows from their cells, in blocks of rows (each row's
        mean from its overflow-free sum, as NumPy's two-pass takes the mean first)."""
        xp = self._kernels.xp
        step = max(1, CHUNK_CELLS // max(self._shape[1], 1))
        out = []
        for start in range(0, int(rows.shape[0]), step):
            block = self._select_rows(rows[start : start + step]).toarray()
            deviation = block - means[start : start + step, None]
            out.append((deviation * deviation).sum(axis=1))
        return xp.concatenate(out)

    @pool.operator
    def sum_of_squares(self, axis: int | None = None) -> float | Array:
        """Σ T_ij² over all cells, down columns (0) or along rows (1), without squaring a copy.

        Σ_j T_ij² = ‖b‖² + Σ_p g(Σ_{j∈cols_p} a_j s_j (a_j s_j + 2 b_j), rows_p), and down columns
        n·b_j² + Σ_p cnt_pᵀ (a s (a s + 2 b)): each part adds what its cells hold beyond b².

        Parameters
        ----------
        axis : {None, 0, 1}
            Over all cells (None), down columns (0) or along rows (1).

        Returns
        -------
        float or array
            Σ T_ij² as a float (axis=None), length d (axis=0) or length n (axis=1).

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.sum_of_squares(axis=1).tolist()
        [6.0, 29.0, 9.0]
        """
        base_axis = self._axis(axis)
        return self._base()._square_sums(base_axis)

    def _square_sums(self, axis):
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        if self._shift is not None and bool((self._shift != 0).any()):
            return self._shifted_square_sums(axis)
        if axis is None:  # each source row's sum weighed by its count: no n-long pass
            total = n * float((b * b).sum())
            for part in self._parts:
                excess = kernels.square_excess(part.summable(), a[part.cols], b[part.cols])
                with pool.blas(kernels):
                    total += float(excess @ part.indicator.counts())
            return total
        if axis == 0:
            out = n * b * b
            for part in self._parts:
                out[part.cols] += kernels.square_excess(
                    part.operand(), a[part.cols], b[part.cols], part.indicator.counts()
                )
            return out
        out = xp.full(n, float((b * b).sum()))
        for part in self._parts:
            out += kernels.gather(
                kernels.square_excess(part.source, a[part.cols], b[part.cols]), part.indicator
            )
        return out

    def _shifted_square_sums(self, axis):
        """Σ T_ij² from the cells a·s + b themselves: with a shift, n·b² + Σ (a·s)(a·s + 2b)
        would cancel (cells near 0 beside a large b) or overflow (b² beyond float64)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        with np.errstate(over="ignore", invalid="ignore"):
            if axis is not None and axis != 1:
                return self._cell_column_sums(lambda v, c: v * v)
            if axis is None:
                return float(xp.sum(self._cell_column_sums(lambda v, c: v * v)))
            out = xp.zeros(self._shape[0])
            for part in self._parts:
                if part.cols.size:
                    sums = _row_cell_sums(
                        kernels, part.source, lambda v, r: v * v, a[part.cols], b[part.cols]
                    )
                    out += xp.where(
                        xp.asarray(part.indicator.present()),
                        kernels.gather(sums, part.indicator),
                        0.0,
                    )
            inverse, uncovered = self._null_patterns()
            nulls = xp.asarray([float((b[c] * b[c]).sum()) for c in uncovered])
            if nulls.size:
                out += nulls[inverse]
            return out

    @pool.operator
    def std(
        self,
        axis: int | None = None,
        dtype: Any = None,
        out: Array | None = None,
        ddof: float = 0,
        keepdims: bool = False,
    ) -> float | Array:
        """Standard deviation: the square root of :meth:`var` (same parameters).

        Parameters
        ----------
        axis, dtype, out, ddof, keepdims
            As for :meth:`var`.

        Returns
        -------
        float or array
            The square root of :meth:`var`.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> np.allclose(T.std(), T.toarray().std())
        True
        """
        with np.errstate(invalid="ignore"):
            result = self._kernels.xp.sqrt(self.var(axis, dtype, None, ddof, keepdims))
        if out is not None:
            out[...] = result
            return out
        return result

    @pool.operator
    def min(
        self, axis: int | None = None, out: Array | None = None, keepdims: bool = False
    ) -> float | Array:
        """Minimum over cells, counting NULL cells (value b) and only source rows T uses.

        Parameters
        ----------
        axis : {None, 0, 1, -1, -2} or tuple of both axes
            Minimum over all cells (None), down columns (0) or along rows (1).
        out : array, optional
            Receives the minimum(s) when given.
        keepdims : bool, default False
            Keep the reduced axis with length one (min of shape (1, d) or (n, 1)).

        Returns
        -------
        float or array
            A float for axis=None; per column (0) or per row (1) otherwise.

        Raises
        ------
        ValueError
            For an empty T.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.min(axis=0).tolist()
        [1.0, 0.0, 0.0]
        """
        base_axis = self._axis(axis)
        result = self._base()._min(base_axis)
        return self._finish(result, self._view_axis(axis), keepdims, out, self.shape)

    @pool.operator
    def max(
        self, axis: int | None = None, out: Array | None = None, keepdims: bool = False
    ) -> float | Array:
        """Maximum over cells, as :meth:`min` of −T.

        Parameters
        ----------
        axis, out, keepdims
            As for :meth:`min`.

        Returns
        -------
        float or array
            Same shapes as :meth:`min`.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T.max(axis=1).tolist()
        [2.0, 4.0, 3.0]
        """
        result = (-self).min(axis=axis, keepdims=keepdims)
        result = -result
        if out is not None:
            out[...] = result
            return out
        return result

    def _min(self, axis):
        n, d = self._shape
        if (n if axis == 0 else d if axis == 1 else n * d) == 0:
            raise ValueError("zero-size array to reduction operation minimum which has no identity")
        if axis == 1:
            return self._row_min()
        col_min = self._column_min()
        return col_min if axis == 0 else col_min.min()

    def _column_min(self):
        """min down column j = min(min over parts of a_j·S_p[used rows, j] + b_j, b_j if NULLs)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        out = xp.full(self._shape[1], xp.inf)
        for part in self._parts:
            ind = part.indicator
            used = kernels.select_rows(
                part.source, ind.present() if ind.is_identity else ind.counts() > 0
            )
            if used.shape[0] == 0:
                continue
            low, high = kernels.column_min_max(used)
            scale, shift = a[part.cols], b[part.cols]
            out[part.cols] = xp.minimum(
                out[part.cols], xp.minimum(scale * low, scale * high) + shift
            )
        has_null = self._column_coverage() < self._shape[0]
        out[has_null] = xp.minimum(out[has_null], b[has_null])
        return out

    def _row_min(self):
        """min along row i = min over parts present in row i, and over its uncovered cells (b)."""
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        out = xp.full(n, xp.inf)
        for part in self._parts:
            if not part.cols.size:
                continue
            per_source_row = kernels.row_min(part.source, a[part.cols], b[part.cols])
            gathered = kernels.gather(per_source_row, part.indicator).copy()
            if part.indicator.n_absent:
                gathered[~part.indicator.present()] = xp.inf
            out = xp.minimum(out, gathered)
        inverse, uncovered = self._null_patterns()
        null_min = xp.asarray([float(b[c].min()) if c.size else np.inf for c in uncovered])
        return xp.minimum(out, null_min[inverse])

    def _null_patterns(self):
        """Rows grouped by which parts are present: (group of each row, NULL columns per group)."""
        kernels = self._kernels
        group, patterns = group_rows(
            [kernels.asnumpy(part.indicator.present()) for part in self._parts], self._shape[0]
        )
        uncovered = []
        for present in patterns:
            covered = np.zeros(self._shape[1], dtype=bool)
            for part, on in zip(self._parts, present):
                if on:
                    covered[part.cols] = True
            uncovered.append(kernels.xp.asarray(np.flatnonzero(~covered)))
        return kernels.xp.asarray(group), uncovered

    def _column_coverage(self):
        """How many target rows some part covers, per column (n where no cell is NULL)."""
        coverage = np.zeros(self._shape[1], dtype=np.int64)
        for part in self._parts:
            coverage[part.cols] += part.indicator.n_present
        return self._kernels.xp.asarray(coverage)
