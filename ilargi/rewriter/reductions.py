"""The reductions of a NormalizedMatrix: ``sum``, ``mean``, ``var``, ``std``, ``sum_of_squares``,
``min`` and ``max``, over all cells, down columns or along rows.

:class:`ReductionsMixin` is one of the mixins :class:`~ilargi.rewriter.NormalizedMatrix` is made
of, kept apart so that each kind of operator reads on its own. Each reduction is computed from the
sources and the affine state (colSums, rowSums, per-part moments combined by the parallel-axis
rule), counting the NULL cells (value b) and only the source rows T uses, and equals the reduction
of the materialized table.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ilargi.backend.contract import Array
from ilargi.metadata import group_rows

from . import pool, rules
from .operators import reduced_axis
from .state import MatrixState


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
        """colSums(T) = a⊙colSums(T₀) + n·b."""
        out = rules.colsums(self._parts, self._shape[1])
        if self._scale is not None:
            out = out * self._scale
        if self._shift is not None:
            out = out + self._shape[0] * self._shift
        return out

    def _rowsums(self):
        """rowSums(T) = T₀·a + Σb."""
        n = self._shape[0]
        out = (
            rules.rowsums(self._parts, n)
            if self._scale is None
            else rules.lmm(self._parts, n, self._scale)
        )
        if out is None:
            out = self._kernels.xp.zeros(n)
        if self._shift is not None:
            out = out + self._shift.sum()
        return out

    def _reduce_sum(self, axis):
        if axis == 1:
            return self._rowsums()
        sums = self._colsums()
        return sums if axis == 0 else sums.sum()

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
        result = base._reduce_sum(base_axis) / base._count(base_axis)
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
        """Variance, exact through sums of squares of the centred table.

        Down columns (and over all cells) the table is centred in the affine form, then squared
        by the f(0)-correction rule, so no cancellation occurs; along rows the row means are not
        affine, so sums of squares of the table shifted by its overall mean are used.

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
        count = self._count(axis) - ddof
        if axis == 1:
            return self._row_sum_of_squares() / count
        per_column, column_means = self._column_sum_of_squares()
        if axis == 0:
            return per_column / count
        overall = column_means.mean()
        return (per_column.sum() + self._shape[0] * ((column_means - overall) ** 2).sum()) / count

    def _column_sum_of_squares(self):
        """(Σ_i (T_ij − μ_j)², μ_j) per column, combining per-part moments (parallel-axis rule).

        Column j's cells split into groups: the rows each covering part feeds (source rows weighted
        by how many target rows take them) and the NULL cells (value b_j). Each group's centred sum
        of squares comes from the source; Σ = Σ_groups M2 + N·(m − μ_j)²: no cancellation. μ_j is
        taken relative to the first group's mean, so a constant column has variance exactly 0.
        """
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        groups = []  # (columns, count, mean, centred sum of squares) of T's cells
        for part in self._parts:
            ind = part.indicator
            if ind.n_present:
                mean, m2 = kernels.column_moments(part.summable(), ind.counts(), ind.n_present)
                scale, shift = a[part.cols], b[part.cols]
                groups.append((part.cols, ind.n_present, scale * mean + shift, scale**2 * m2))
        groups.append((slice(None), n - self._column_coverage(), b, 0.0))
        reference = xp.full(d, xp.nan)
        for cols, count, mean, _ in groups:
            unset = xp.isnan(reference[cols]) & (xp.asarray(count) > 0)
            reference[cols] = xp.where(unset, mean, reference[cols])
        offset = xp.zeros(d)
        for cols, count, mean, _ in groups:
            offset[cols] += count * (mean - reference[cols])
        mu = reference + offset / n
        total = xp.zeros(d)
        for cols, count, mean, m2 in groups:
            total[cols] += m2 + count * (mean - mu[cols]) ** 2
        return total, mu

    def _row_sum_of_squares(self):
        """Σ_j (T_ij − μ_i)², combining per-part moments with the parallel-axis rule.

        Row i's cells split into groups (the columns of each present part, and the NULL columns);
        with group size k, mean m and centred sum of squares M2 (computed on the source rows),
        Σ_j (T_ij − μ_i)² = Σ_groups M2 + k·(m − μ_i)²: no cancellation, unlike Σ T² − d·μ².
        """
        kernels, xp = self._kernels, self._kernels.xp
        a, b = self._full_scale(), self._full_shift()
        n, d = self._shape
        mu = self._rowsums() / d
        total = xp.zeros(n)
        for part in self._parts:
            mean, m2 = kernels.row_moments(part.source, a[part.cols], b[part.cols])
            ind, k = part.indicator, part.cols.size
            group = kernels.gather(m2, ind) + k * (kernels.gather(mean, ind) - mu) ** 2
            total += xp.where(xp.asarray(ind.present()), group, 0.0)
        inverse, uncovered = self._null_patterns()
        for k, columns in enumerate(uncovered):
            if columns.size:
                nulls = b[columns]
                rows = inverse == k
                total[rows] += ((nulls - nulls.mean()) ** 2).sum() + columns.size * (
                    nulls.mean() - mu[rows]
                ) ** 2
        return xp.maximum(total, 0.0)  # the sparse correction terms can round below zero

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
        if axis is None:  # each source row's sum weighed by its count: no n-long pass
            total = n * float((b * b).sum())
            for part in self._parts:
                excess = kernels.square_excess(part.summable(), a[part.cols], b[part.cols])
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
        return self._kernels.xp.sqrt(self.var(axis, dtype, out, ddof, keepdims))

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
        if n == 0 or d == 0:
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
            [kernels.asnumpy(part.indicator.present()) for part in self._parts]
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
