"""Selection in a NormalizedMatrix: ``T[rows]``, ``T[rows, cols]`` and pointwise ``T[i, j]``.

:class:`SelectionMixin` is one of the mixins :class:`~ilargi.rewriter.NormalizedMatrix` is made of,
kept apart so that each kind of operator reads on its own. Rows are selected in the index vectors
(sources untouched; a contiguous slice shares them as views, and cuts a dense fact source to a view
of its rows), columns in the sources and the mappings; the module's functions read a NumPy index
into one key per axis.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from ilargi.metadata import Indicator, Part

from .operators import point_index
from .state import MatrixState


class SelectionMixin(MatrixState):
    """Row, column and cell selection of :class:`~ilargi.rewriter.NormalizedMatrix` (a mixin: it
    reads the matrix's parts, shape and affine state)."""

    def __getitem__(self, key: Any) -> Any:
        """Row selection ``T[rows]`` (int array, slice, bool mask) and ``T[rows, cols]``.

        Rows: new index vectors, sources untouched (train/test splits, mini-batches); a slice of
        step 1 shares the index vectors as views and cuts a dense fact source to a view. Columns:
        sources restricted to the kept columns. An integer on an axis drops it, as in NumPy.
        Index arrays may be lists or NumPy arrays of any integer dtype; an Ellipsis stands for
        the axes not given (``T[idx, ...]``, as scikit-learn's ``_safe_indexing`` passes).
        Two index arrays select cells pointwise, as in NumPy: ``T[[0, 1], [2, 0]]`` is the
        array ``[T[0, 2], T[1, 0]]`` (the arrays broadcast against each other).

        Parameters
        ----------
        key : index or tuple of up to two indices (one may be ``...``)

        Returns
        -------
        NormalizedMatrix, or a dense array where an integer drops an axis or two index arrays
        select cells

        Raises
        ------
        IndexError
            For out-of-range indices, a mask of the wrong length, too many indices or
            ``None`` (new axes).
        TypeError
            For indices that are neither integers, slices nor boolean masks.

        Examples
        --------
        >>> T = NormalizedMatrix.from_parts(
        ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
        ...     [None, np.array([0, 1, -1])], [[0], [1, 2]], (3, 3))
        >>> T[np.array([2, 0])].toarray().tolist()
        [[3.0, 0.0, 0.0], [1.0, 1.0, 2.0]]
        >>> T[1].tolist()
        [2.0, 3.0, 4.0]
        """
        key = _two_axes(key)
        row_key, col_key = key[::-1] if self._transposed else key
        n, d = self._shape
        if _is_array_index(row_key) and _is_array_index(col_key):
            return self._base()._cells(
                point_index(row_key, n, "row"), point_index(col_key, d, "column")
            )
        row_scalar, rows = _row_index(row_key, n)
        col_scalar, cols = _index(col_key, d, "column")
        out = self._base()
        if rows is not None:
            out = out._select_rows(rows)
        if cols is not None:
            out = out._select_columns(cols)
        if self._transposed:
            out = out.T
        if row_scalar or col_scalar:
            dense = out.toarray()
            drop = (row_scalar, col_scalar)[::-1] if self._transposed else (row_scalar, col_scalar)
            return dense[tuple(0 if dropped else slice(None) for dropped in drop)]
        return out

    def _cells(self, rows, cols):
        """The cells (rows[k], cols[k]) of T, broadcast as NumPy does, each a·s + b (or b for a
        NULL cell) exactly as :meth:`materialize` computes it; only the cells asked for are
        read."""
        kernels, xp = self._kernels, self._kernels.xp
        try:
            rows, cols = np.broadcast_arrays(rows, cols)
        except ValueError:
            raise IndexError(
                f"shape mismatch: row index of shape {np.shape(rows)} and column "
                f"index of shape {np.shape(cols)} cannot be broadcast together"
            ) from None
        shape, r, c = rows.shape, rows.ravel(), cols.ravel()
        a, b = self._full_scale(), self._full_shift()
        out = xp.zeros(r.size, dtype=self.dtype)
        for part in self._parts:
            position = np.full(self._shape[1], -1)
            position[part.cols] = np.arange(part.cols.size)
            j = position[c]
            taken = np.asarray(kernels.asnumpy(part.indicator.index_vector()))[r]
            mine = np.flatnonzero((j >= 0) & (taken >= 0))
            if mine.size:
                values = part.source[xp.asarray(taken[mine]), xp.asarray(j[mine])]
                values = kernels.to_dense(values) if kernels.is_sparse(values) else values
                out[xp.asarray(mine)] = xp.asarray(values).reshape(-1)
        with np.errstate(all="ignore"):
            out = out * a[xp.asarray(c)] + b[xp.asarray(c)]
        return kernels.asnumpy(out).reshape(shape)

    def _select_rows(self, idx):
        """T[idx] = Σ_p I_p[idx] S_p M_pᵀ: take idx from every index vector (once per table)."""
        if isinstance(idx, slice):
            return self._slice_rows(idx.start, idx.stop)
        xp = self._kernels.xp
        idx = xp.asarray(idx)
        taken = {}
        for p in self._parts:
            taken.setdefault(id(p.indicator), p.indicator.take(idx))
        parts = [p.with_indicator(taken[id(p.indicator)]) for p in self._parts]
        return self._derive(parts=tuple(parts), shape=(int(idx.shape[0]), self._shape[1]))

    def _slice_rows(self, start, stop):
        """T[start:stop] without a gather or a row range: every index vector cut to a view of its
        rows, and so is the fact table's source where that is a contiguous view; a fact table
        whose sources are not (CSR, column-major) takes the rows start..stop-1 as before."""
        tables = {}
        for p in self._parts:  # parts sharing an indicator (one table) share the new one
            tables.setdefault(id(p.indicator), []).append(p)
        sliced = {}
        for parts in tables.values():
            ind = parts[0].indicator
            if not ind.is_identity:
                view = ind.sliced(start, stop)
                sliced.update((id(p), p.with_indicator(view)) for p in parts)
            elif all(p.slices_to_view() for p in parts):
                identity = Indicator(None, stop - start)
                sliced.update((id(p), p.sliced(identity, start, stop)) for p in parts)
            else:
                taken = ind.take(self._kernels.xp.arange(start, stop))
                sliced.update((id(p), p.with_indicator(taken)) for p in parts)
        parts = tuple(sliced[id(p)] for p in self._parts)
        return self._derive(parts=parts, shape=(stop - start, self._shape[1]))

    def _select_columns(self, keep):
        """T[:, keep]: each part keeps the source columns that land in kept columns."""
        d = self._shape[1]
        kernels = self._kernels
        new_positions = np.arange(keep.size)
        parts = []
        for part in self._parts:
            source_of = np.full(d, -1)
            source_of[part.cols] = np.arange(part.cols.size)
            taken = source_of[keep]
            mine = taken >= 0
            if mine.any():
                source = kernels.select_columns(part.source, taken[mine])
                parts.append(
                    Part(
                        part.name,
                        source,
                        part.indicator,
                        new_positions[mine],
                        part.finite,
                        part.origin,
                    )
                )
        columns = None if self._columns is None else [self._columns[j] for j in keep]
        return self._derive(
            parts=tuple(parts),
            shape=(self._shape[0], keep.size),
            scale=None if self._scale is None else self._scale[keep],
            shift=None if self._shift is None else self._shift[keep],
            columns=columns,
        )


def _two_axes(key):
    """An index as (row key, column key): Ellipsis expanded, a missing column key is ':'."""
    key = key if isinstance(key, tuple) else (key,)
    if any(k is None for k in key):
        raise IndexError(
            "a NormalizedMatrix has 2 axes: None (np.newaxis) cannot add one; materialize first"
        )
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if len(key) - len(ellipses) > 2:
        raise IndexError(
            f"too many indices for a NormalizedMatrix: it has 2 axes, got "
            f"{len(key) - len(ellipses)}"
        )
    if ellipses:
        i = ellipses[0]
        key = key[:i] + (slice(None),) * (3 - len(key)) + key[i + 1 :]
    return key + (slice(None),) * (2 - len(key))


def _is_array_index(key):
    """An index array (list, ndarray, ...) rather than a slice or a scalar."""
    return not isinstance(key, (slice, numbers.Integral, bool, np.bool_)) and np.ndim(key) > 0


def _row_index(key, length):
    """As :func:`_index` for the row axis, but a non-empty slice of step 1 stays a slice
    ``slice(start, stop)`` within the rows, which row selection serves with views."""
    if isinstance(key, slice) and key != slice(None) and key.step in (None, 1):
        start, stop, _ = key.indices(length)
        if start < stop:
            return False, slice(start, stop)
    return _index(key, length, "row")


def _index(key, length, axis):
    """(is_scalar, int index array or None for 'everything') for one axis of a selection."""
    if isinstance(key, (bool, np.bool_)):
        raise IndexError(
            f"a boolean scalar is not a {axis} index (NumPy would add an axis); "
            "use a boolean mask of the axis' length"
        )
    if isinstance(key, slice):
        # Only the rows the slice takes: a view of a full-length range would keep it all alive.
        return False, (None if key == slice(None) else np.arange(*key.indices(length)))
    if np.ndim(key) == 0 and hasattr(key, "dtype") and key.dtype.kind in "iu":
        key = int(key)  # a 0-d integer array indexes like an integer
    if isinstance(key, numbers.Integral):
        key = [key]
        scalar = True
    else:
        scalar = False
    xp = np
    if type(key).__module__.startswith("cupy"):
        import cupy as xp  # lazy: CuPy is optional, and a CuPy key means it is loaded
    idx = xp.asarray(key)
    if idx.dtype == bool:
        if idx.shape != (length,):
            raise IndexError(f"boolean {axis} mask has shape {idx.shape}, expected ({length},)")
        return False, xp.flatnonzero(idx)
    if idx.size == 0:
        return scalar, idx.astype(np.intp)
    if idx.dtype.kind not in "iu":
        raise TypeError(
            f"{axis} index must be integers, a slice or a boolean mask, got dtype {idx.dtype}"
        )
    if idx.ndim != 1:
        raise IndexError(f"{axis} index must be 1-D, got shape {idx.shape}")
    low, high = int(idx.min()), int(idx.max())
    if low < -length or high >= length:
        raise IndexError(
            f"{axis} index {low if low < -length else high} is out of bounds for {length} {axis}s"
        )
    idx = idx.astype(np.intp)  # before wrapping: idx + length must not overflow a small dtype
    return scalar, xp.where(idx < 0, idx + length, idx)
