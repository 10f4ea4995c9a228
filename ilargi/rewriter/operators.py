"""What the in-memory NormalizedMatrix and its Dask counterpart share at the Python level: the
arithmetic operators (through each class's ``_binary(ufunc, other, reflected=False)``) and the
reading of a reduction's ``axis``."""

import numbers

import numpy as np


def complex_error(what):
    return TypeError(
        f"{what} is complex; a NormalizedMatrix holds real numbers (complex values "
        "are refused rather than cast, which would drop the imaginary part)"
    )


def per_column_operand(other, d, shape, transposed, xp=np):
    """``other`` as a scalar or a length-d vector over the d columns of T, or NotImplemented
    (a type the caller's reflected operator may handle). ``shape`` is the view's, for the
    message; a transposed view takes a (d, 1) column."""
    if isinstance(other, numbers.Number):
        if not isinstance(other, numbers.Real):
            raise complex_error("the operand")
        return other
    try:
        value = xp.asarray(other)
    except (TypeError, ValueError):
        return NotImplemented
    if value.dtype.kind == "c":
        raise complex_error("the operand")
    if value.dtype.kind not in "biuf":
        return NotImplemented
    if value.size == 1 and value.ndim <= 2:
        return value.reshape(()).item()
    per_column = [(d, 1)] if transposed else [(d,), (1, d)]
    if value.shape not in per_column:
        raise ValueError(
            f"operand of shape {value.shape} does not broadcast per column of T (shape "
            f"{shape}{', transposed' if transposed else ''}): a NormalizedMatrix combines "
            f"elementwise only with scalars and one value per column of T (shape "
            f"{per_column[0]}); materialize for other shapes"
        )
    return value.reshape(d)


def reduced_axis(axis, transposed):
    """The axis of the untransposed T that ``axis`` of a (possibly transposed) view reduces:
    0, 1 or None (every entry)."""
    if isinstance(axis, tuple):
        if sorted(a % 2 for a in axis) != [0, 1]:
            raise ValueError(f"axis {axis} is not valid for a 2-D matrix")
        return None
    if axis is None:
        return None
    if not isinstance(axis, numbers.Integral) or not -2 <= axis < 2:
        raise ValueError(f"axis {axis} is out of bounds for a 2-D matrix")
    axis %= 2
    return 1 - axis if transposed else axis


class BinaryOperators:
    """``+ - * / **`` (and their reflected forms) through ``self._binary``."""

    __slots__ = ()

    def __add__(self, other):
        return self._binary(np.add, other)

    def __radd__(self, other):
        return self._binary(np.add, other, reflected=True)

    def __sub__(self, other):
        return self._binary(np.subtract, other)

    def __rsub__(self, other):
        return self._binary(np.subtract, other, reflected=True)

    def __mul__(self, other):
        return self._binary(np.multiply, other)

    def __rmul__(self, other):
        return self._binary(np.multiply, other, reflected=True)

    def __truediv__(self, other):
        return self._binary(np.true_divide, other)

    def __rtruediv__(self, other):
        return self._binary(np.true_divide, other, reflected=True)

    def __pow__(self, other):
        return self._binary(np.power, other)

    def __rpow__(self, other):
        return self._binary(np.power, other, reflected=True)


def point_index(key, length, axis):
    """An integer index array of any shape (a 1-D mask: its positions), wrapped, for pointwise
    selection."""
    if type(key).__module__.startswith("cupy"):
        key = key.get()
    idx = np.asarray(key)
    if idx.dtype == bool:
        if idx.shape != (length,):
            raise IndexError(f"boolean {axis} mask has shape {idx.shape}, expected ({length},)")
        return np.flatnonzero(idx)
    if idx.size == 0:
        return idx.astype(np.intp)
    if idx.dtype.kind not in "iu":
        raise TypeError(
            f"{axis} index must be integers, a slice or a boolean mask, got dtype {idx.dtype}"
        )
    low, high = int(idx.min()), int(idx.max())
    if low < -length or high >= length:
        raise IndexError(
            f"{axis} index {low if low < -length else high} is out of bounds for {length} {axis}s"
        )
    idx = idx.astype(np.intp)
    return np.where(idx < 0, idx + length, idx)
