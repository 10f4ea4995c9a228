"""The pandas dtype of every column of a lazy joined table, as the matching pandas chain would give it.

A :class:`~ilargi.Table` never builds its rows, but ``to_pandas()`` must return the dtypes that
``pandas.merge`` / ``pandas.concat`` would: a merge promotes the columns of the side that misses rows
(int -> float64, bool -> object), coerces key columns of different dtypes (bool vs int -> object,
categoricals with different categories -> their categories' dtype), and a union takes the common
dtype of its inputs. Each column therefore carries a small *dtype spec*, resolved lazily (so a Parquet
column is not read just to learn its dtype) and cached:

* :class:`SourceDtype` -- the dtype a source gives the column when read;
* :class:`WithMissing` -- that dtype after pandas' ``take`` with missing rows (promotion);
* :class:`Fixed` -- a dtype pandas itself computed on a few representative rows (merge keys);
* :class:`UnionDtype` -- ``pandas.concat``'s dtype over the inputs that have the column (and the
  missing cells of the inputs that lack it);
* :class:`CommonDtype` -- the common dtype of several pieces (``overlap="coalesce"``).

Where pandas decides from dtypes alone, the rule is applied to dtypes; where it would look at values,
ilargi asks pandas itself on a few rows (see ``Table.merge``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def with_missing(dtype):
    """The dtype pandas gives a column of ``dtype`` after a take with missing rows (-1).

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi.table.dtypes import with_missing
    >>> with_missing(np.dtype("int64")), with_missing(np.dtype("bool")), with_missing(np.dtype("float32"))
    (dtype('float64'), dtype('O'), dtype('float32'))
    """
    return pd.api.extensions.take(empty_array(dtype), np.array([-1]), allow_fill=True).dtype


def empty_array(dtype):
    """A 0-length array of ``dtype`` (NumPy or extension)."""
    if isinstance(dtype, np.dtype):
        return np.empty(0, dtype=dtype)
    return dtype.construct_array_type()._from_sequence([], dtype=dtype)


def filler(dtype, length):
    """``length`` values of ``dtype``: missing where the dtype can hold missing values, else zeros.

    pandas' dtype rules for concat and merge do not look at values, so any value of the right
    dtype stands for a whole column.
    """
    if isinstance(dtype, np.dtype):
        return np.zeros(length, dtype=dtype)
    return empty_array(dtype).take(np.full(length, -1), allow_fill=True)


class DtypeSpec:
    """How to compute a column's pandas dtype; :meth:`resolve` computes it once."""

    _resolved = None

    def resolve(self):
        """The dtype (computed on first use, then cached)."""
        if self._resolved is None:
            self._resolved = self._compute()
        return self._resolved

    def _compute(self):
        raise NotImplementedError


class Fixed(DtypeSpec):
    """A dtype known already."""

    def __init__(self, dtype):
        self._resolved = dtype


class SourceDtype(DtypeSpec):
    """The dtype of a source column as the source reads it."""

    def __init__(self, source, column):
        self.source, self.column = source, column

    def _compute(self):
        return self.source.pandas_dtype(self.column)


class WithMissing(DtypeSpec):
    """A column's dtype after pandas' take with missing rows."""

    def __init__(self, spec):
        self.spec = spec

    def _compute(self):
        return with_missing(self.spec.resolve())


class UnionDtype(DtypeSpec):
    """``pandas.concat(ignore_index=True)``'s dtype of one column over the inputs.

    pandas' concat looks at values here and there (a categorical of integers with a missing value
    becomes float64 beside an int64 column, int64 without one), so each input contributes the
    representative rows of the column (one per kind of value, one missing), and an input that
    lacks the column contributes one row of missing cells.

    Parameters
    ----------
    inputs : list of (Table, label)
        The inputs, each with the column's label in it (absent: the input lacks the column).
    column : label
        The column.
    """

    def __init__(self, inputs, column):
        self.inputs, self.column = inputs, column

    def _compute(self):
        frames = []
        for table in self.inputs:
            if self.column in table._columns:
                frames.append(table._sample([self.column], table._representative_rows(self.column)))
            else:  # a frame with other columns (even without rows) gives the column missing cells
                nrows = min(len(table), 1)
                frames.append(
                    pd.DataFrame({"\0other": np.zeros(nrows)})
                    if table._columns
                    else pd.DataFrame(index=pd.RangeIndex(nrows))
                )
        return pd.concat(frames, ignore_index=True)[self.column].dtype


def pieces_dtype(dtypes, missing):
    """The common dtype of row-disjoint pieces (``pandas.concat``'s), promoted if rows are missing."""
    dtype = pd.concat([pd.Series(filler(d, 1)) for d in dtypes], ignore_index=True).dtype
    return with_missing(dtype) if missing else dtype


class CommonDtype(DtypeSpec):
    """The common dtype of a column made of several row-disjoint pieces (``overlap="coalesce"``).

    Parameters
    ----------
    specs : list of DtypeSpec
        The pieces' specs.
    missing : bool
        Some rows are covered by no piece.
    """

    def __init__(self, specs, missing):
        self.specs, self.missing = specs, missing

    def _compute(self):
        return pieces_dtype([spec.resolve() for spec in self.specs], self.missing)
