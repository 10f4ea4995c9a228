"""The elementwise operations of a NormalizedMatrix: arithmetic with scalars and per-column
values, NumPy ufuncs, comparisons and the unary operators.

:class:`ElementwiseMixin` is one of the mixins :class:`~ilargi.rewriter.NormalizedMatrix` is made
of, kept apart so that each kind of operator reads on its own. An operation with an exact affine
form changes only the affine state (a, b); any other function runs on the sources by the
f(0)-correction rule; comparisons and non-float results are NumPy's arrays of the materialized
table.
"""

from __future__ import annotations

import numbers
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from ilargi.metadata import Indicator, Part, is_finite

from .operators import complex_error, per_column_operand
from .state import MatrixState

if TYPE_CHECKING:
    from typing import Self

# Elementwise operations with an exact affine form: T op c = T₀·diag(a') + 1·b'ᵀ.
_AFFINE_UFUNCS = {np.add, np.subtract, np.multiply, np.true_divide}

# Comparisons are elementwise, as for a NumPy array: a boolean ndarray of the materialized table.
_COMPARISONS = {
    np.equal: operator.eq,
    np.not_equal: operator.ne,
    np.less: operator.lt,
    np.less_equal: operator.le,
    np.greater: operator.gt,
    np.greater_equal: operator.ge,
}


class ElementwiseMixin(MatrixState):
    """Arithmetic, ufuncs, comparisons, ``-T``, ``abs(T)``, ``len`` and ``bool`` of
    :class:`~ilargi.rewriter.NormalizedMatrix` (a mixin: the arithmetic operators of
    :class:`~ilargi.rewriter.operators.BinaryOperators` call its ``_binary``)."""

    def _affine(self, scale, shift):
        """(T₀·diag(a) + 1·bᵀ)·c + e = T₀·diag(a·c) + 1·(b·c + e)ᵀ for per-column c and e."""
        xp = self._kernels.xp
        d = self._shape[1]
        a, b = self._full_scale(), self._full_shift()
        new_scale = xp.broadcast_to(a * scale, (d,)).copy()
        new_shift = xp.broadcast_to(b * scale + shift, (d,)).copy()
        return self._derive(scale=new_scale, shift=new_shift)

    def _map(self, f):
        """f(T) for an elementwise f(values, target columns), by the f(0)-correction rule.

        Push a, b into each source and keep f(S_p·a_p + b_p) − f(b_p) there; the rank-1 term
        1·f(b)ᵀ restores every cell, so a NULL cell (value b) becomes f(b) exactly as in the
        materialized table, and sparse sources stay sparse. Only columns where the value b occurs
        (NULL cells, sparse implicit zeros) need that term; the others keep f(S_p·a_p + b_p) as is,
        which avoids cancellation. A non-finite f(b_j) in NULL cells goes into a filler part.
        """
        kernels, xp = self._kernels, self._kernels.xp
        d = self._shape[1]
        a, b = self._full_scale(), self._full_shift()
        with np.errstate(all="ignore"):
            null_value = f(b, xp.arange(d))
        if null_value.dtype.kind != "f":
            raise TypeError(
                f"elementwise result has dtype {null_value.dtype}; a NormalizedMatrix "
                "holds floating-point numbers (materialize first)"
            )
        needed = self._needs_shift()
        finite = xp.isfinite(null_value)
        fillers = self._null_fillers(xp.flatnonzero(needed & ~finite), null_value)
        shift = xp.where(needed & finite, null_value, 0.0)

        def corrected(values, cols):
            return f(values, cols) - shift[cols]

        parts = []
        for part in self._parts:
            with np.errstate(all="ignore"):
                source = kernels.map_source(
                    part.source, corrected, a[part.cols], b[part.cols], part.cols
                )
            parts.append(part.with_source(source, is_finite(source)))
        return self._derive(
            parts=tuple(parts) + fillers,
            scale=None,
            derived=True,
            shift=shift if bool((shift != 0).any()) else None,
        )

    def _needs_shift(self):
        """Columns where the value b occurs in some cell: NULL cells or sparse implicit zeros."""
        needed = self._column_coverage() < self._shape[0]
        for part in self._parts:
            if self._kernels.is_sparse(part.source):
                needed[part.cols] = True
        return needed

    def _null_fillers(self, columns, null_value):
        """Parts holding a non-finite f(b_j) in the NULL cells of columns j, which 1·f(b)ᵀ cannot.

        Columns covered by the same parts have the same NULL rows; each such group gets one part:
        a 1 × k source of f(b) taken by exactly the rows no covering part is present in. Implicit
        zeros of a sparse part would need f(b) too, which only a dense copy could hold: refused.
        """
        kernels, xp = self._kernels, self._kernels.xp
        columns = np.asarray(kernels.asnumpy(columns))
        if columns.size == 0:
            return ()
        covering = {}
        for j in columns.tolist():
            covering[j] = tuple(k for k, part in enumerate(self._parts) if j in part.cols)
            sparse = [
                self._parts[k].name for k in covering[j] if kernels.is_sparse(self._parts[k].source)
            ]
            if sparse:
                name = f" ({self._columns[j]!r})" if self._columns else ""
                raise ValueError(
                    f"the elementwise result is not finite on the zero cells of column {j}{name} "
                    f"(f(0) = {float(null_value[j])}), which sparse part {sparse[0]!r} stores "
                    "implicitly; the factorized form cannot hold it: materialize first"
                )
        fillers = []
        for group in set(covering.values()):
            cols = np.array([j for j, g in covering.items() if g == group])
            present = xp.zeros(self._shape[0], dtype=bool)
            for k in group:
                present |= xp.asarray(self._parts[k].indicator.present())
            if bool(present.all()):
                continue
            rows = xp.where(present, -1, 0)
            source = null_value[xp.asarray(cols)][None, :]
            fillers.append(
                Part("null", source, Indicator(rows, 1, validate=False), cols, finite=False)
            )
        return tuple(fillers)

    def _operand_per_column(self, other):
        """``other`` as a scalar or a length-d vector over the columns of T, or NotImplemented."""
        from .normalized import NormalizedMatrix

        if isinstance(other, NormalizedMatrix) or self._kernels.is_sparse(other):
            return NotImplemented
        return per_column_operand(
            other, self._shape[1], self.shape, self._transposed, self._kernels.xp
        )

    def _binary(self, ufunc, other, reflected=False):
        c = self._operand_per_column(other)
        if c is NotImplemented:
            return NotImplemented
        xp = self._kernels.xp
        finite = bool(xp.isfinite(xp.asarray(c)).all())
        if ufunc in _AFFINE_UFUNCS and finite:
            with np.errstate(all="ignore"):
                out = self._affine_binary(ufunc, c, reflected)
            # A non-finite a or b (1/c overflowing, a·c beyond the largest float) would give
            # 0·inf = NaN in cells the materialized table holds as 0 or inf, and finite a, b whose
            # cells a·s + b overflow would be multiplied in another order than the table's
            # (a·(s·x) finite where (a·s)·x is inf): such results take the elementwise rule
            # below, which evaluates every cell as the table does.
            if (
                out is not None
                and bool(xp.isfinite(out._scale).all())
                and bool(xp.isfinite(out._shift).all())
                and not any(out._may_overflow(part) for part in out._parts)
            ):
                return out
        per_column = not isinstance(c, numbers.Number)

        def f(values, cols):
            other_values = c[cols] if per_column else c
            return ufunc(other_values, values) if reflected else ufunc(values, other_values)

        return self._map(f)

    def _affine_binary(self, ufunc, c, reflected):
        """T op c as an affine map of T, or None where op has no such form."""
        if ufunc is np.add:
            return self._affine(1.0, c)
        if ufunc is np.subtract:
            return self._affine(-1.0, c) if reflected else self._affine(1.0, -c)
        if ufunc is np.multiply:
            return self._affine(c, 0.0)
        xp = self._kernels.xp
        if not reflected and bool((xp.asarray(c) != 0).all()):
            return self._affine(1.0 / xp.asarray(c, dtype=np.float64), 0.0)
        return None

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = f"np.{ufunc.__name__}"
        if "out" in kwargs:
            raise TypeError(
                f"{name}(..., out=...) is not supported on a NormalizedMatrix: the "
                "result is a new matrix (T.dot(X, out=...) writes a product into a "
                "buffer)"
            )
        if method != "__call__":
            raise TypeError(
                f"{name}.{method} is not supported on a NormalizedMatrix; use its "
                "methods (sum, min, max, ...) or materialize first"
            )
        if kwargs:
            raise TypeError(
                f"{name}: keyword arguments {sorted(kwargs)} are not supported on a "
                "NormalizedMatrix"
            )
        if ufunc is np.matmul:
            left, right = inputs
            return self.__matmul__(right) if left is self else self.__rmatmul__(left)
        if ufunc in _COMPARISONS or not self._float_result(ufunc, inputs):
            return self._on_table(ufunc, inputs)
        if ufunc.nin == 1:
            if ufunc is np.negative:
                return -self
            if ufunc is np.positive:
                return self
            return self._map(lambda values, cols: ufunc(values))
        if ufunc.nin == 2 and len(inputs) == 2:
            if inputs[0] is self:
                out = self._binary(ufunc, inputs[1])
            else:
                out = self._binary(ufunc, inputs[0], reflected=True)
            if out is not NotImplemented:
                return out
        others = ", ".join(type(x).__name__ for x in inputs if x is not self)
        raise TypeError(
            f"{name} of a NormalizedMatrix and {others or 'nothing else'} is not "
            "supported: it combines elementwise with scalars and one value per "
            "column; materialize first for other operands"
        )

    def _float_result(self, ufunc, inputs):
        """Whether ufunc maps T's values to one real floating-point result (so that the
        elementwise rule applies), from one sample value; complex results are refused."""
        from .normalized import NormalizedMatrix

        samples = []
        for x in inputs:
            if x is self:
                samples.append(np.ones(1, dtype=self.dtype))
            elif isinstance(x, NormalizedMatrix):
                samples.append(np.ones(1, dtype=x.dtype))
            elif isinstance(x, numbers.Number) or self._kernels.is_sparse(x):
                samples.append(x)
            else:
                try:
                    value = np.asarray(self._kernels.asnumpy(x))
                except (TypeError, ValueError):
                    return True  # not an operand: _binary refuses it
                samples.append(value.reshape(-1)[:1] if value.size else value)
        try:
            with np.errstate(all="ignore"):
                result = ufunc(*samples)
        except Exception:  # e.g. a sparse operand: the elementwise rule gives its own error
            return True
        if ufunc.nout != 1:
            return False
        kind = np.asarray(result).dtype.kind
        if kind == "c":
            raise complex_error(f"np.{ufunc.__name__}'s result")
        return kind == "f"

    def _on_table(self, ufunc, inputs):
        """ufunc on the materialized table: comparisons and results that are not real floats
        (np.isnan, np.signbit, np.frexp) are n × d arrays, as NumPy returns them."""
        from .normalized import NormalizedMatrix

        tables = [x.toarray() if isinstance(x, NormalizedMatrix) else x for x in inputs]
        return ufunc(*tables)

    def _compare(self, op, other):
        from .normalized import NormalizedMatrix

        if isinstance(other, NormalizedMatrix):
            other = other.toarray()
        return op(self.toarray(), other)

    def __eq__(self, other: object) -> Any:
        return self._compare(operator.eq, other)

    def __ne__(self, other: object) -> Any:
        return self._compare(operator.ne, other)

    def __lt__(self, other: object) -> Any:
        return self._compare(operator.lt, other)

    def __le__(self, other: object) -> Any:
        return self._compare(operator.le, other)

    def __gt__(self, other: object) -> Any:
        return self._compare(operator.gt, other)

    def __ge__(self, other: object) -> Any:
        return self._compare(operator.ge, other)

    # Equality is elementwise (as for NumPy arrays), but a matrix stays hashable by identity:
    # caches of its features are keyed on it.
    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(
                f"The truth value of a NormalizedMatrix with {self.size} elements is "
                "ambiguous (as for a NumPy array); use nm.toarray().any() or .all()"
            )
        return bool(self.toarray().reshape(-1)[0])

    def __len__(self) -> int:
        return self.shape[0]

    def __neg__(self) -> Self:
        return self._affine(-1.0, 0.0)

    def __pos__(self) -> Self:
        return self

    def __abs__(self) -> Self:
        return np.abs(self)
