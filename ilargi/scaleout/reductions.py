"""The reductions of :class:`~.matrix.DaskNormalizedMatrix` (sum, mean, var, std, min, max, the
sums of squares and the non-finite check), as a mixin: each is one distributed pass over the
partitions and a tree reduction of d-sized partials (axis 0 or None), or a row-chunked Dask array
(axis 1), taking NumPy's keywords (``dtype``, ``out``, ``keepdims``, ``ddof``) so that
``np.sum(D, axis=0)`` and the like reach them. Kept apart from the matrix's construction and
products, as the in-memory matrix keeps its reductions in :mod:`ilargi.rewriter.reductions`.
"""

import dask.array as da
import numpy as np

from ilargi.rewriter.operators import reduced_axis
from ilargi.rewriter.reductions import scaled_sum

from . import tasks


class DaskReductions:
    """sum, mean, var, std, min, max, sum_of_squares and nonfinite of a DaskNormalizedMatrix."""

    def _axis(self, axis):
        return reduced_axis(axis, self._transposed)

    def _row_reduction(self, name, **kwargs):
        blocks = self._map(tasks.reduce_axis, name, 1, kwargs.get("ddof", 0), prefix=f"{name}-rows")
        return self._rows(blocks, (), np.float64, f"{name}-rows")

    # The reductions take NumPy's keywords, so that np.sum(D, axis=0), np.mean(D), np.var(D,
    # ddof=1), np.min(D, axis=1), ... reach them (NumPy calls the method of an object that has
    # one, with dtype=, out= and keepdims= as it was given them), as on the in-memory matrix.

    def _finish(self, result, axis, dtype=None, out=None, keepdims=False, what="reduction"):
        """A reduction's result with NumPy's ``dtype``, ``keepdims`` and ``out``: ``axis`` is the
        view's (None, 0 or 1); a lazy result (along rows) cannot be written into ``out``."""
        view = None if axis is None or isinstance(axis, tuple) else axis % 2
        lazy = isinstance(result, da.Array)
        if dtype is not None:
            result = (
                result.astype(dtype) if hasattr(result, "astype") else np.dtype(dtype).type(result)
            )
        if keepdims:
            n, d = self.shape
            shape = (1, 1) if view is None else ((1, d) if view == 0 else (n, 1))
            result = result.reshape(shape) if lazy else np.reshape(result, shape)
        if out is None:
            return result
        if lazy:
            raise TypeError(
                f"{what} along the rows of a DaskNormalizedMatrix is a lazy, "
                "row-chunked Dask array and cannot be written into out=; call it "
                "without out= and compute() the result"
            )
        if not isinstance(out, np.ndarray) or out.shape != np.shape(result):
            raise ValueError(
                f"out= must be a NumPy array of shape {np.shape(result)} for this "
                f"{what}, got {type(out).__name__} of shape {np.shape(out)}"
            )
        out[...] = result
        return out

    def _exact_colsums(self):
        """The column sums as (mantissa, exponent): one pass whose partials combine without
        overflow (a sum is ±inf only where the sum of its cells is)."""
        return self._reduce(tasks.exact_colsums, combine=tasks.add_scaled, prefix="colsums")

    def _column_totals(self, base_axis):
        """(column sums, or the total for base_axis None) of the base matrix, overflow-free."""
        mantissa, exponent = self._exact_colsums()
        with np.errstate(over="ignore", invalid="ignore"):
            if base_axis == 0:
                return np.ldexp(mantissa, exponent)
            return scaled_sum(np, mantissa, exponent)

    def sum(self, axis=None, dtype=None, out=None, keepdims=False):
        """Sum over all cells (None), down columns (0, computed) or along rows (1, lazy).

        ``dtype``, ``out`` (computed results only) and ``keepdims`` as in NumPy."""
        base_axis = self._axis(axis)
        base = self._base()
        if base_axis == 1:
            result = base._row_reduction("sum")
        else:
            result = base._column_totals(base_axis)
        return self._finish(result, axis, dtype, out, keepdims, "sum")

    def mean(self, axis=None, dtype=None, out=None, keepdims=False):
        """Mean over all cells, down columns or along rows (as :meth:`sum`)."""
        base_axis = self._axis(axis)
        base = self._base()
        n, d = base.shape
        if base_axis == 1:
            result = base._row_reduction("mean")
        else:
            count = np.float64(n if base_axis == 0 else n * d)
            with np.errstate(divide="ignore", invalid="ignore"):
                result = base._column_totals(base_axis) / count
        return self._finish(result, axis, dtype, out, keepdims, "mean")

    def _variance(self, axis, ddof):
        """NumPy's two-pass variance: the mean from the overflow-free sums (one pass), then
        Σ (x − mean)² per column (a second pass), over max(count − ddof, 0)."""
        base_axis = self._axis(axis)
        base = self._base()
        n, d = base.shape
        if base_axis == 1:
            return base._row_reduction("var", ddof=ddof)
        count = np.float64(n if base_axis == 0 else n * d)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            centre = base._column_totals(base_axis) / count
            squares = base._reduce(tasks.centred_squares, centre, prefix="centred")
            if base_axis == 0:
                return squares / np.float64(max(n - ddof, 0))
            return float(np.sum(squares) / np.float64(max(n * d - ddof, 0)))

    def var(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """Variance by NumPy's two-pass definition (down columns and over all cells: two
        distributed passes; along rows lazily, each partition's rows on their own)."""
        return self._finish(self._variance(axis, ddof), axis, dtype, out, keepdims, "var")

    def std(self, axis=None, dtype=None, out=None, ddof=0, keepdims=False):
        """The square root of :meth:`var`."""
        variance = self._variance(axis, ddof)
        with np.errstate(invalid="ignore"):
            result = da.sqrt(variance) if isinstance(variance, da.Array) else np.sqrt(variance)
        return self._finish(result, axis, dtype, out, keepdims, "std")

    def sum_of_squares(self, axis=None):
        """Σ T_ij² over all cells, down columns (computed) or along rows (lazy)."""
        axis = self._axis(axis)
        base = self._base()
        if axis == 1:
            return base._row_reduction("sum_of_squares")
        sums = base._reduce(tasks.reduce_axis, "sum_of_squares", 0, prefix="squares")
        return sums if axis == 0 else float(sums.sum())

    def min(self, axis=None, out=None, keepdims=False):
        """Minimum over cells (as the in-memory matrix: NULL cells count as b)."""
        return self._finish(
            self._extreme("min", axis, tasks.minimum), axis, None, out, keepdims, "min"
        )

    def max(self, axis=None, out=None, keepdims=False):
        """Maximum over cells."""
        return self._finish(
            self._extreme("max", axis, tasks.maximum), axis, None, out, keepdims, "max"
        )

    def _extreme(self, name, axis, combine):
        axis = self._axis(axis)
        base = self._base()
        if axis == 1:
            return base._row_reduction(name)
        values = base._reduce(tasks.reduce_axis, name, 0, combine=combine, prefix=name)
        return values if axis == 0 else float(getattr(values, name)())

    def nonfinite(self):
        """(has NaN, has ±inf): from the matrix it was made from, else one pass (then cached)."""
        if self._nonfinite is None:
            nan, inf = self._base()._reduce(
                tasks.nonfinite, combine=tasks.any_of, prefix="nonfinite"
            )
            self._nonfinite = (bool(nan), bool(inf))
        return self._nonfinite

    # ------------------------------------------------------------------------------------------
    # Training passes
