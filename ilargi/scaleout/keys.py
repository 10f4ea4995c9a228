"""Join keys on the workers, matched by the in-memory merge's rule.

:meth:`ilargi.Table.merge` decides two things about a key pair, and a ChunkedTable decides them the
same way:

* which pairs are refused (numbers with strings, ...): the in-memory merge itself is run on a few
  representative rows of each key column (:func:`representatives`), when the merge is recorded;
* which values match: the in-memory engine codes both key columns jointly
  (:func:`ilargi.table.join.factorize_jointly`: pandas' coercion of the two columns, then one
  code per value, missing values matching each other). :class:`KeyIndex` does exactly that for a
  partition's foreign keys against a dimension's keys, and takes a shortcut only where it cannot
  differ: both columns of one numeric or datetime dtype, looked up in a hash index of the
  dimension's keys (no coercion; NaN and NaT match each other in both).
"""

import numpy as np
import pandas as pd

from ilargi.table.join import factorize_jointly


def representatives(values):
    """The first row of each kind of value of a key column (each Python type, for object
    columns) and its first missing row: what pandas' key checks look at, in a few rows.

    Parameters
    ----------
    values : array-like

    Returns
    -------
    pandas.Series
        Of the column's dtype.

    Examples
    --------
    >>> representatives(pd.Series([1, "a", 2, None, "b"], dtype=object)).tolist()
    [1, 'a', None]
    """
    values = pd.Series(values).reset_index(drop=True)
    missing = values.isna().to_numpy()
    present = np.flatnonzero(~missing)
    if pd.api.types.is_object_dtype(values.dtype) and present.size:
        kinds = pd.Series([type(v) for v in values.to_numpy()[present]])
        rows = present[np.flatnonzero(~kinds.duplicated().to_numpy())]
    else:
        rows = present[:1]
    rows = np.concatenate([rows, np.flatnonzero(missing)[:1]])
    return values.take(np.sort(rows)).reset_index(drop=True)


class KeyIndex:
    """A dimension's key column, in which foreign keys are looked up (many-to-one).

    Parameters
    ----------
    values : array-like
        The dimension's keys, one per row.
    table : str
        The dimension's name, for errors.

    Raises
    ------
    pandas.errors.MergeError
        If a key occurs twice (two missing keys count as the same key, as in the merge).

    Examples
    --------
    >>> keys = KeyIndex(pd.Series([10, 20, None], dtype=object), "dim")
    >>> keys.rows(pd.Series([20.0, np.nan, 5.0])).tolist()
    [1, 2, -1]
    """

    def __init__(self, values, table):
        self.values = pd.Series(values).reset_index(drop=True)
        missing = self.values.isna().to_numpy()
        # one hash index, for the check and (numbers) the lookups: a table read by key range
        # builds one per partition and pass
        self._index = pd.Index(self.values)
        if missing.sum() > 1 or not self._index.is_unique:
            raise pd.errors.MergeError(
                f"Merge keys are not unique in right dataset {table!r}; not a many-to-one merge"
            )
        self.missing_row = int(np.flatnonzero(missing)[0]) if missing.any() else -1

    def _same_numbers(self, keys):
        dtype = self.values.dtype
        return isinstance(dtype, np.dtype) and dtype.kind in "iufmM" and keys.dtype == dtype

    def rows(self, keys):
        """The dimension row of each key (-1: no match).

        Parameters
        ----------
        keys : array-like
            Foreign keys.

        Returns
        -------
        ndarray of intp
        """
        keys = pd.Series(keys).reset_index(drop=True)
        if not len(keys):
            return np.zeros(0, dtype=np.intp)
        if self._same_numbers(keys):
            if self._index is None:  # built once per worker (the payload is shared)
                self._index = pd.Index(self.values)
            return self._index.get_indexer(keys).astype(np.intp, copy=False)
        (codes, own), count = factorize_jointly([keys, self.values], sort=False)
        row_of = np.full(count + 1, -1, dtype=np.intp)  # code -1 (missing) reads the last entry
        present = own >= 0
        row_of[own[present]] = np.flatnonzero(present)
        row_of[-1] = self.missing_row
        return row_of[codes]

    def __getstate__(self):
        return {"values": self.values, "missing_row": self.missing_row, "_index": None}
