"""``Table``: a lazy joined table that speaks ``pandas.merge`` and ``pandas.concat``, never built.

A Table is a list of *slots* and a list of target columns. A slot is one source table (a pandas
DataFrame, a Parquet file or a DuckDB table) plus an int64 index vector over the target rows: row ``i`` of
the joined table takes row ``rows[i]`` of the source, -1 = absent (a left/outer join miss, a row of another
table in a union), None = identity. A target column is a tuple of *pieces* ``(slot, source column)`` that
cover disjoint rows: one piece usually, two for the key of an outer join (pandas coalesces it from both
sides), one per input for a union. A merge derives the new index vectors by composing the old ones with
the join's row pairs (``rows_new = rows_old[left_take]``, -1 propagating), so snowflakes, role-playing
dimensions and many-to-many joins are all just index vectors; no joined row exists until ``to_pandas``.

``to_pandas()`` equals the matching ``pandas.merge`` / ``pandas.concat(ignore_index=True)`` chain:
values, dtypes, column names and order, row order. Each column carries the dtype pandas would give it
(:mod:`ilargi.table.dtypes`); where pandas' rules look at values -- which key pairs it refuses or
coerces, and the dtype of a merged key column -- ``merge`` asks pandas itself on a few representative
rows of the key columns (one per kind of value, one missing), never on the joined rows.
"""
from __future__ import annotations

import importlib
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from .dtypes import CommonDtype, Fixed, SourceDtype, UnionDtype, WithMissing, empty_array
from .encode import column_levels, to_matrix
from .join import combine_codes, factorize_jointly, first_duplicate, gather_codes, join_indexers
from .persist import load_table, save_table
from .sources import DuckDBSource, FrameSource, ParquetSource, Slot, duckdb_codes, unique_name

_HOWS = ("inner", "left", "right", "outer")
_OVERLAPS = ("suffix", "first", "coalesce")
# validate -> (left keys must be unique, right keys must be unique)
_VALIDATE = {
    "one_to_one": (True, True), "1:1": (True, True),
    "one_to_many": (True, False), "1:m": (True, False),
    "many_to_one": (False, True), "m:1": (False, True),
    "many_to_many": (False, False), "m:m": (False, False),
}


class Table:
    """A joined table described by index vectors over its sources, never built.

    It speaks ``pandas.merge`` and ``pandas.concat`` (see :meth:`merge` and :func:`concat`) and
    becomes a :class:`~ilargi.rewriter.NormalizedMatrix` with :meth:`to_matrix`, one encoded part
    per source table; see the module docstring for how the index vectors are kept.

    Parameters
    ----------
    data : pandas.DataFrame
        The source table (held as a shallow copy-on-write copy; never modified).
    name : str, optional
        Names the table in error messages, part names and saved metadata (default ``"table"``).

    Attributes
    ----------
    name : str
        The table's name (a merge keeps the left table's).
    columns : list
        Column labels of the joined table, in pandas' order.
    shape : tuple of int
        ``(rows, columns)`` of the joined table.
    tables : list of str
        Names of the source tables placed in the join, in order.

    See Also
    --------
    concat : The union of Tables, like ``pandas.concat``.
    ilargi.NormalizedMatrix : What :meth:`to_matrix` returns.

    Examples
    --------
    >>> import pandas as pd
    >>> from ilargi import Table
    >>> sales = pd.DataFrame({"store_id": [1, 2, 2, 3, 1], "units": [3.0, 1.0, 4.0, 1.0, 5.0]})
    >>> stores = pd.DataFrame({"store_id": [1, 2], "region": ["north", "south"]})
    >>> joined = Table(sales, name="sales").merge(Table(stores, name="stores"), on="store_id",
    ...                                           how="left", validate="many_to_one")
    >>> joined
    Table('sales': 5 rows x 3 columns from sales, stores)
    >>> joined.columns, joined.tables
    (['store_id', 'units', 'region'], ['sales', 'stores'])
    >>> X, y = joined.to_matrix(columns=["region"], target="units")
    >>> X.shape, X.columns, y
    ((5, 2), ['region=north', 'region=south'], array([3., 1., 4., 1., 5.]))
    """

    def __init__(self, data, name=None):
        name = "table" if name is None else str(name)
        self._set(*_single(FrameSource(data, name)))

    @classmethod
    def from_parquet(cls, path, name=None, chunks=None):
        """A Table over a Parquet file, read lazily.

        Columns are read only when needed (keys for a merge, encoded columns), as
        ``pandas.read_parquet`` reads them except that decimals become float64.

        Parameters
        ----------
        path : str or path-like
            The Parquet file (with ``chunks``: also a folder of them, a glob or a list).
        name : str, optional
            The table's name (default: the file name without its suffix).
        chunks : "row_groups", int or str, optional
            Read the table in partitions on Dask workers, never on the client: one per row
            group, this many rows, or row groups up to a byte size such as ``"128MiB"``. Gives
            an :class:`ilargi.scaleout.ChunkedTable` (the optional ``dask`` extra), whose
            ``to_matrix`` returns a Dask-backed matrix.

        Returns
        -------
        Table
            A single-source Table (a ChunkedTable with ``chunks``).

        Examples
        --------
        >>> import tempfile, pathlib
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "stores.parquet"
        >>> pd.DataFrame({"store_id": [1, 2], "size": [10.0, 20.0]}).to_parquet(path)
        >>> Table.from_parquet(path)
        Table('stores': 2 rows x 2 columns from stores)
        """
        if chunks is not None:
            from ilargi.scaleout.tables import ChunkedTable  # lazy: Dask is an optional extra
            return ChunkedTable(path, name, chunks)
        return cls._assemble(*_single(ParquetSource(path, Path(path).stem if name is None else str(name))))

    @classmethod
    def from_duckdb(cls, connection, table_or_query, name=None):
        """A Table over a DuckDB table name or SQL query; its data stays in DuckDB.

        Key matching runs inside DuckDB when both sides of a merge live in the same connection: only
        int64 key codes are pulled out. A query or view is first stored as a temporary DuckDB table.

        Parameters
        ----------
        connection : duckdb.DuckDBPyConnection
            The connection that holds the table.
        table_or_query : str
            A table name (optionally ``schema.table``) or a SQL query.
        name : str, optional
            The table's name (default: the table name, or ``"query"`` for a query).

        Returns
        -------
        Table
            A single-source Table.

        Raises
        ------
        ValueError
            If DuckDB cannot read the table or query.

        Examples
        --------
        >>> import duckdb
        >>> from ilargi import Table
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE stores AS SELECT * FROM range(3) t(store_id)")
        >>> Table.from_duckdb(con, "stores")
        Table('stores': 3 rows x 1 columns from stores)
        """
        if name is None:
            text = str(table_or_query).strip()
            name = text if text.replace(".", "").replace("_", "").isalnum() else "query"
        return cls._assemble(*_single(DuckDBSource(connection, table_or_query, str(name))))

    @classmethod
    def _assemble(cls, name, slots, columns, nrows, dtypes):
        table = object.__new__(cls)
        table._set(name, slots, columns, nrows, dtypes)
        return table

    def _set(self, name, slots, columns, nrows, dtypes):
        self.name = name
        self._slots = tuple(slots)
        self._columns = dict(columns)
        self._nrows = int(nrows)
        self._dtypes = dict(dtypes)  # column -> DtypeSpec (ilargi.table.dtypes)

    # ------------------------------------------------------------------ description
    @property
    def columns(self):
        """Column labels of the joined table, in pandas' order (a list)."""
        return list(self._columns)

    @property
    def shape(self):
        """``(rows, columns)`` of the joined table."""
        return self._nrows, len(self._columns)

    @property
    def dtypes(self):
        """The dtype of each column, as the matching pandas chain gives it (a pandas Series).

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> fact = Table(pd.DataFrame({"k": [1, 2], "x": [3, 4]}))
        >>> fact.merge(pd.DataFrame({"k": [1], "z": [5]}), on="k", how="left").dtypes.tolist()
        [dtype('int64'), dtype('int64'), dtype('float64')]
        """
        return pd.Series({column: spec.resolve() for column, spec in self._dtypes.items()}, dtype=object)

    def __len__(self):
        return self._nrows

    @property
    def tables(self):
        """Names of the source tables as placed in the join (made unique), in order."""
        return [slot.name for slot in self._slots]

    def __repr__(self):
        return (f"Table({self.name!r}: {self._nrows} rows x {len(self._columns)} columns "
                f"from {', '.join(self.tables)})")

    def _pieces(self, column, side="the"):
        """Pieces ``[(slot, source column)]`` of a target column; a clear error if it is missing."""
        if column not in self._columns:
            if len(self._slots) == 1:
                raise ValueError(f"key column {column!r} is missing from table {self.name!r} "
                                 f"(columns: {self.columns})")
            raise ValueError(f"merge key {column!r} refers to no table: none of the tables on {side} side "
                             f"({', '.join(self.tables)}) has a column {column!r}")
        return [(self._slots[index], source_column) for index, source_column in self._columns[column]]

    # ------------------------------------------------------------------ merge
    def merge(self, other, on=None, left_on=None, right_on=None, how="inner", suffixes=("_x", "_y"),
              validate=None, overlap="suffix", sort=False):
        """Join with another table like ``pandas.merge``; nothing is materialized.

        Only the index vectors of the sources are composed with the join's row pairs, so snowflakes
        (a left key that is a column of a table joined before), role-playing dimensions and
        many-to-many joins all stay index vectors. Missing keys (NaN/None) match each other, as in
        pandas. Keys with the same name on both sides give one key column, coalesced from the right
        side for rows the left side lacks (right and outer joins).

        Parameters
        ----------
        other : Table or pandas.DataFrame
            The right side (itself possibly joined).
        on : label or list of labels, optional
            Key column(s) on both sides. Without ``on``, ``left_on`` and ``right_on``, the common
            columns are the key, as in pandas.
        left_on, right_on : label or list of labels, optional
            Key column(s) of each side, given together and pairing up.
        how : {"inner", "left", "right", "outer"}, default="inner"
            The join kind, with pandas' row order.
        suffixes : pair of str, default=("_x", "_y")
            Appended to overlapping non-key columns when ``overlap="suffix"``.
        validate : str, optional
            pandas' check that keys are unique: "one_to_one"/"1:1", "one_to_many"/"1:m",
            "many_to_one"/"m:1" or "many_to_many"/"m:m".
        overlap : {"suffix", "first", "coalesce"}, default="suffix"
            Non-key columns on both sides: "suffix" (pandas: ``suffixes`` are appended), "first"
            (keep the left column, drop the right one) or "coalesce" (one column: per row, the left
            value where the left column's row is present -- even if that value is NaN -- else the
            right value).
        sort : bool, default=False
            Sort the rows by the join keys (missing keys last), as ``pandas.merge(sort=True)``.
            An outer join always sorts them.

        Returns
        -------
        Table
            The joined table.

        Raises
        ------
        ValueError
            For an unknown ``how``, ``validate`` or ``overlap``, missing or unpaired keys, or key
            columns pandas refuses to merge (numbers with strings, datetimes with timedeltas, dates
            or naive datetimes, ...): the message is pandas' and names both columns.
        TypeError
            For keys that are not column labels, or key values pandas cannot hash or sort.
        pandas.errors.MergeError
            If ``validate`` fails, or suffixes make duplicate column names.

        Notes
        -----
        Keys of different dtypes follow pandas: refused where ``pandas.merge`` refuses them
        (numbers with strings, datetimes with timedeltas, ``date`` objects or datetimes of the other
        time-zone kind), coerced and matched where it accepts them (int with float, bool with int
        as objects, categoricals with other categories as their categories' values), as pandas'
        own checks decide on a few representative rows of each key column. Missing keys match each
        other; an outer or sorted join lists them last, or first for datetime, timedelta and
        categorical keys, which pandas compares as integers. Where pandas' result depends on its
        internal join path, ilargi picks one answer: keys the two sides order differently
        (categoricals with other categories) are sorted by value; keys of types that cannot be
        compared (dates and numbers in one object column) are refused with a TypeError in an outer
        or sorted join (pandas answers only when both sides happen to be sorted already); a missing
        value in an object key column may show as None where pandas shows NaN or ``pd.NA``.

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> fact = Table(pd.DataFrame({"k": [1, 2, 2, 9], "x": [1.0, 2.0, 3.0, 4.0]}), name="fact")
        >>> dim = pd.DataFrame({"k": [1, 2], "z": [10.0, 20.0]})
        >>> fact.merge(dim, on="k", how="left").to_pandas()
           k    x     z
        0  1  1.0  10.0
        1  2  2.0  20.0
        2  2  3.0  20.0
        3  9  4.0   NaN
        >>> len(fact.merge(dim, on="k"))  # inner: the row with key 9 has no match
        3
        """
        right = _as_table(other, "right")
        if how not in _HOWS:
            raise ValueError(f"unknown how={how!r}; expected one of {', '.join(map(repr, _HOWS))}")
        if validate is not None and validate not in _VALIDATE:
            raise ValueError(f"unknown validate={validate!r}; expected one of {', '.join(map(repr, _VALIDATE))}")
        if overlap not in _OVERLAPS:
            raise ValueError(f"unknown overlap={overlap!r}; expected one of {', '.join(map(repr, _OVERLAPS))}")
        left_keys, right_keys = _merge_keys(self, right, on, left_on, right_on)
        sort = bool(sort)
        # pandas refuses key pairs before checking validate=, and sorts the keys after: a sort
        # error waits for the validation, as in pandas
        unsortable = [_check_key_pair(self, left_key, right, right_key, how, sort)
                      for left_key, right_key in zip(left_keys, right_keys)]
        unsortable = next((error for error in unsortable if error is not None), None)
        sorted_keys = (how == "outer" or sort) and unsortable is None
        try:
            left_codes, right_codes, size = _key_codes(self, left_keys, right, right_keys, sort=sorted_keys)
        except TypeError as error:  # keys that cannot be sorted (unhashable ones fail unsorted too)
            if not sorted_keys:
                raise
            unsortable = error
            left_codes, right_codes, size = _key_codes(self, left_keys, right, right_keys, sort=False)
        if validate is not None:
            _check_unique(self, left_keys, left_codes, size, validate, "left", _VALIDATE[validate][0])
            _check_unique(right, right_keys, right_codes, size, validate, "right", _VALIDATE[validate][1])
        if unsortable is not None:
            raise unsortable
        left_take, right_take = join_indexers(left_codes, right_codes, size, how)
        if sort and how != "outer":
            left_take, right_take = _sorted_by_key(left_codes, right_codes, left_take, right_take, how)
        del left_codes, right_codes
        merged = _Merged(self, right, _identity_or(left_take, len(self)), _identity_or(right_take, len(right)))
        return merged.table(left_keys, right_keys, suffixes, overlap, how, sort)

    # ------------------------------------------------------------------ materialization
    def read_columns(self, columns):
        """The source data behind some columns, each source read once.

        Parameters
        ----------
        columns : iterable of labels
            Columns of the joined table.

        Returns
        -------
        dict
            ``{slot index: DataFrame of the source columns it provides}``, over the source's own
            rows (slots that place one source twice share one read).
        """
        slot_columns = {}
        for column in columns:
            for index, source_column in self._columns[column]:
                slot_columns.setdefault(index, []).append(source_column)
        by_source = {}
        for index, columns in slot_columns.items():
            source = self._slots[index].source
            wanted = by_source.setdefault(id(source), (source, {}))[1]
            wanted.update(dict.fromkeys(columns))
        frames = {key: source.read(list(columns)) for key, (source, columns) in by_source.items()}
        return {index: frames[id(self._slots[index].source)] for index in slot_columns}

    def column_pieces(self, column):
        """Where a column's values come from (for encoders).

        Parameters
        ----------
        column : label
            A column of the joined table.

        Returns
        -------
        list of tuple
            ``[(slot index, source column)]``: pieces covering disjoint rows.
        """
        return list(self._columns[column])

    def slot(self, index):
        """One source table as placed in the join.

        Parameters
        ----------
        index : int
            Position in :attr:`tables`.

        Returns
        -------
        ilargi.table.sources.Slot
            The source and its index vector over the joined rows.
        """
        return self._slots[index]

    def gather(self, column, frames):
        """The values of one column over the joined rows.

        Parameters
        ----------
        column : label
            A column of the joined table.
        frames : dict
            Source data by slot index, as :meth:`read_columns` returns them.

        Returns
        -------
        pandas.Series
            The column, missing where its row is absent from every piece.
        """
        dtype = self._dtypes[column].resolve()
        pieces = self._columns[column]
        if self._nrows == 0:  # no values to cast (a tz-aware source may not even cast to naive)
            return pd.Series(empty_array(dtype), dtype=dtype)
        if len(pieces) == 1:
            index, source_column = pieces[0]
            rows, values = self._slots[index].rows, _series(frames[index][source_column].array)
            if rows is not None:
                # the rows' values, cast, then missing rows: pandas coerces a key column before
                # the join takes its rows, so a missing row is the NA of the column's dtype (NaN in
                # object), not of the source's (pd.NA of a boolean column cast to object)
                present = rows >= 0
                if not present.any():
                    return pd.Series(pd.api.extensions.take(empty_array(dtype), np.full(len(rows), -1),
                                                            allow_fill=True), dtype=dtype)
                values = values.take(np.where(present, rows, rows[present][0])).reset_index(drop=True)
                values = (values if values.dtype == dtype else values.astype(dtype)).where(present)
            return values if values.dtype == dtype else values.astype(dtype)
        # Several row-disjoint pieces (a union, a coalesced key): each piece's present values are
        # cast to the column's dtype first, so pieces of different dtypes (categoricals with other
        # categories, int and float) combine as pandas combines them; rows no piece covers hold the
        # dtype's missing value.
        parts, positions = [], []
        for index, source_column in pieces:
            rows, array = self._slots[index].rows, frames[index][source_column].array
            where = np.arange(self._nrows) if rows is None else np.flatnonzero(rows >= 0)
            if len(where) == 0:  # a piece of no row (its values may not even cast to the dtype)
                continue
            taken = _series(array if rows is None else array.take(rows[where])).astype(dtype)
            if self._slots[index].nan_missing and pd.api.types.is_object_dtype(dtype):
                taken = taken.where(taken.notna(), np.nan)
            parts.append(taken)
            positions.append(where)
        covered = np.zeros(self._nrows, dtype=bool)
        covered[np.concatenate(positions or [np.empty(0, dtype=np.int64)])] = True
        if not covered.all():
            where = np.flatnonzero(~covered)
            parts.append(pd.Series(pd.api.extensions.take(empty_array(dtype), np.full(len(where), -1),
                                                          allow_fill=True), dtype=dtype))
            positions.append(where)
        if not parts:  # no rows at all
            return pd.Series(empty_array(dtype), dtype=dtype)
        values = pd.concat(parts, ignore_index=True)
        order = np.argsort(np.concatenate(positions), kind="stable")
        return values.take(order).reset_index(drop=True).astype(dtype)

    def _representative_rows(self, column):
        """A few joined rows that show every kind of value a column holds (see
        :meth:`~ilargi.table.sources.Source.representatives`), and one missing row if any."""
        found, covered = [], np.zeros(self._nrows, dtype=bool)
        for index, source_column in self._columns[column]:
            slot = self._slots[index]
            if slot.rows is None:
                found.append(slot.source.representatives(source_column))
                covered[:] = True
                continue
            present = slot.rows >= 0
            referenced = np.bincount(slot.rows[present], minlength=slot.source.nrows) > 0
            wanted = slot.source.representatives(source_column, referenced)
            hits = np.flatnonzero(np.isin(slot.rows, wanted))
            found.append(hits[np.unique(slot.rows[hits], return_index=True)[1]])
            covered |= present
        uncovered = np.flatnonzero(~covered)
        found.append(uncovered[:1])
        return np.unique(np.concatenate(found).astype(np.int64))

    def _sample(self, columns, rows):
        """Some joined rows of some columns as a DataFrame, reading only those source rows."""
        slots, pieces, number = [], {}, {}
        for column in columns:
            for index, source_column in self._columns[column]:
                if index not in number:
                    slot = self._slots[index]
                    taken = rows if slot.rows is None else slot.rows.take(rows)
                    needed = np.unique(taken[taken >= 0])
                    source_columns = list(dict.fromkeys(
                        piece_column for c in columns for i, piece_column in self._columns[c] if i == index))
                    frame = slot.source.read_rows(source_columns, needed)
                    local = np.where(taken >= 0, np.searchsorted(needed, taken), -1)
                    number[index] = len(slots)
                    slots.append(Slot(FrameSource(frame, slot.name), local, slot.name, slot.nan_missing))
                pieces.setdefault(column, []).append((number[index], source_column))
        sample = Table._assemble(self.name, slots, {c: tuple(pieces[c]) for c in columns}, len(rows),
                                 {c: Fixed(self._dtypes[c].resolve()) for c in columns})
        return sample.to_pandas()

    def to_pandas(self):
        """Materialize the joined table as pandas would have built it.

        Returns
        -------
        pandas.DataFrame
            Equal to the matching ``pandas.merge`` / ``pandas.concat`` chain: values, dtypes,
            column names and order, row order.

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> Table(pd.DataFrame({"a": [1, 2]})).to_pandas()
           a
        0  1
        1  2
        """
        frames = self.read_columns(self._columns)
        # Series, not arrays: from arrays, pandas would infer str for object columns of strings
        data = {column: self.gather(column, frames) for column in self._columns}
        return pd.DataFrame(data, index=pd.RangeIndex(self._nrows), columns=self.columns, copy=False)

    def to_matrix(self, columns=None, target=None, categorical="onehot", missing="zero", allow_nonfinite=False,
                  chunks=None):
        """Encode the joined table as ``(NormalizedMatrix, y)`` without building the join.

        Each source table is encoded once (dense float64 for numeric columns, CSR for one-hot and
        indicator columns) and reused through its index vector; ``nm.columns`` names every column.

        Parameters
        ----------
        columns : list, optional
            Target columns to encode, in this order (default: every column but ``target``).
        target : str, optional
            A column of any table in the join; ``y`` is its value per joined row as a float64
            ndarray (NaN where missing). A string/bool target gives the codes 0..k-1 of its sorted
            levels (``self.levels(target)``). None gives ``y = None``.
        categorical : "onehot" | "ordinal" | "error"
            String, bool and categorical columns: "onehot" -> one column ``"col=level"`` per level
            present in the joined rows (sorted), a CSR part per source table; "ordinal" -> one column
            of level codes 0..k-1 (sorted levels), treated as numeric from then on; "error" ->
            TypeError. Numeric columns always become float64 columns named as the column.
        missing : "zero" | "indicator" | "mean"
            A cell is missing when its row is absent from the column's table (left/outer join miss,
            another table's block of a union) or its source value is NaN/None. "zero": 0, and a
            missing categorical cell is an all-zero one-hot row. "indicator": the same, plus a column
            ``"col__missing"`` (1 = missing) right after each column that has a missing cell; it is
            built from parts (per source its missing values, plus one part for the absent rows),
            never per joined row. "mean": a missing numeric cell holds the column mean over its
            present joined cells (0 if none; computed exactly from the index vectors), stored in the
            source parts and one part for the absent rows; categorical cells as with "zero".
        allow_nonfinite : bool, default=False
            Keep ±inf in numeric columns (NaN is always a missing value, see ``missing``). By
            default an infinite value is refused with an error naming its column, as the matrix
            operators and estimators would otherwise propagate it silently.
        chunks : int or sequence of int, optional
            Split the result into Dask partitions of this many rows
            (:meth:`ilargi.NormalizedMatrix.to_dask`; y becomes a Dask array chunked alike).
            A table read with ``Table.from_parquet(..., chunks=...)`` is read by the workers
            instead (:class:`ilargi.scaleout.ChunkedTable`).

        Returns
        -------
        nm : NormalizedMatrix
            The encoded features, one or more parts per source table.
        y : ndarray of shape (n_rows,) or None
            The encoded target, or None without ``target``.

        Raises
        ------
        ValueError
            For unknown ``categorical``/``missing`` values, unknown or repeated columns,
            encoded column names that collide, or ±inf in a numeric column without
            ``allow_nonfinite=True``.
        TypeError
            For columns that cannot be encoded (dates, nested values), or non-numeric columns
            with ``categorical="error"``.

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> fact = pd.DataFrame({"k": [0, 1, 1, 2], "x": [1.0, 2.0, 3.0, 4.0]})
        >>> dim = pd.DataFrame({"k": [0, 1], "color": ["red", "blue"]})
        >>> X, y = Table(fact).merge(dim, on="k", how="left").to_matrix(
        ...     columns=["color"], target="x", missing="indicator")
        >>> X.columns
        ['color=blue', 'color=red', 'color__missing']
        >>> X.toarray()
        array([[0., 1., 0.],
               [1., 0., 0.],
               [1., 0., 0.],
               [0., 0., 1.]])
        >>> y
        array([1., 2., 3., 4.])
        """
        matrix, y = to_matrix(self, columns, target, categorical, missing, allow_nonfinite)
        if chunks is None:
            return matrix, y
        matrix = matrix.to_dask(chunks)
        return matrix, None if y is None else matrix.align(y, "y")

    # ------------------------------------------------------------------ persistence
    def save(self, folder, sources=False):
        """Save the join metadata (and optionally the sources) into a folder.

        The metadata take the format of :class:`ilargi.metadata.Metadata` (``metadata.json`` +
        ``indices.npz``, one part per source table placed in the join), the table layout in its
        ``extra`` field.

        Parameters
        ----------
        folder : str or path-like
            Created if needed; an earlier save there is replaced as a whole (written beside it,
            then renamed into place), and a folder holding anything else is refused.
        sources : bool, default=False
            Also write every source as Parquet under ``folder/sources``, as
            ``<safe name>.parquet``: the table's name never becomes a path (characters other
            than letters, digits, ``-`` and ``_`` become ``_``; names are made unique ignoring
            case), so nothing is written outside ``folder``. Otherwise Parquet sources are
            referenced by path and the others must be passed to :meth:`load`; a DuckDB source
            is saved as its query text, for information only.

        See Also
        --------
        load : Read it back.

        Examples
        --------
        >>> import tempfile
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> table = Table(pd.DataFrame({"k": [1, 2], "x": [0.5, 1.5]}), name="t")
        >>> folder = tempfile.mkdtemp()
        >>> table.save(folder, sources=True)
        >>> Table.load(folder).to_pandas().equals(table.to_pandas())
        True
        """
        save_table(self, folder, sources)

    @classmethod
    def load(cls, folder, sources=None):
        """A Table saved by :meth:`save`.

        Parameters
        ----------
        folder : str or path-like
            The folder :meth:`save` wrote.
        sources : dict, optional
            Source name (as in :attr:`tables` of the saved table) to a DataFrame, a Parquet path,
            a single-source Table (e.g. ``Table.from_duckdb(connection, query)``) or a
            ``(connection, table_or_query)`` pair. SQL read from a file is never run: a bare
            DuckDB connection is accepted only where the saved text is a plain table name, which
            is read through quoted identifiers. Sources saved beside the metadata need no entry;
            a Parquet source saved by reference (``save`` without ``sources``) is passed here by
            its path: a path read from a file is followed only inside the folder.

        Returns
        -------
        Table
            The saved joined table.

        Raises
        ------
        FileNotFoundError
            If the folder holds no saved metadata.
        ValueError
            If the folder holds no saved Table, a file is truncated, foreign or disagrees with its
            header (the message names the file and the field), a saved path leads outside the
            folder, a source is missing, or a source's rows or columns differ from the saved ones.
        TypeError
            If a given source is of an unsupported type.
        """
        return load_table(cls, folder, sources or {})

    def levels(self, column):
        """The one-hot levels of a column: its sorted distinct non-missing values over the joined rows.

        Parameters
        ----------
        column : label
            A column of the joined table.

        Returns
        -------
        pandas.Index
            The levels, sorted.

        Raises
        ------
        ValueError
            If the table has no such column.

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> list(Table(pd.DataFrame({"c": ["b", "a", None, "b"]})).levels("c"))
        ['a', 'b']
        """
        self._pieces(column)
        return column_levels(self, column)


def _series(array):
    """A Series over an array, keeping an object dtype (pandas would infer str for strings)."""
    return pd.Series(array, dtype=object if pd.api.types.is_object_dtype(array.dtype) else None, copy=False)


def _single(source):
    return (source.name, [Slot(source, None, source.name)], {c: ((0, c),) for c in source.columns},
            source.nrows, {c: SourceDtype(source, c) for c in source.columns})


def _as_table(data, name):
    if isinstance(data, Table):
        return data
    if isinstance(data, pd.DataFrame):
        return Table(data, name=name)
    raise TypeError(f"expected an ilargi.Table or a pandas DataFrame, got {type(data).__name__}")


def _identity_or(take, nrows):
    if take is not None and len(take) == nrows and np.array_equal(take, np.arange(nrows)):
        return None
    return take


def _compose(rows, take):
    """Index vector after a join: ``rows[take]`` with -1 (in ``take`` or ``rows``) propagating."""
    if take is None:
        return rows
    if rows is None:
        return take
    return np.append(rows, -1).take(take)


def _key_list(keys, argument):
    keys = list(keys) if isinstance(keys, (list, tuple)) else [keys]
    for key in keys:
        if isinstance(key, (np.ndarray, pd.Series, pd.Index, list, dict, set)):
            raise TypeError(f"{argument}= must name columns; got a {type(key).__name__}")
    return keys


def _merge_keys(left, right, on, left_on, right_on):
    if on is not None:
        if left_on is not None or right_on is not None:
            raise ValueError("pass either on= or left_on=/right_on=, not both")
        left_keys = right_keys = _key_list(on, "on")
    elif left_on is None and right_on is None:
        shared = set(right.columns)
        left_keys = right_keys = [c for c in left.columns if c in shared]
        if not left_keys:
            raise ValueError(f"no common columns to merge {left.name!r} and {right.name!r} on; "
                             "pass on= or left_on=/right_on=")
    elif left_on is None or right_on is None:
        raise ValueError("left_on= and right_on= must be given together")
    else:
        left_keys, right_keys = _key_list(left_on, "left_on"), _key_list(right_on, "right_on")
        if len(left_keys) != len(right_keys):
            raise ValueError(f"left_on has {len(left_keys)} keys but right_on has {len(right_keys)}; "
                             "they must pair up")
    if not left_keys:
        raise ValueError("no merge keys given")
    for key in left_keys:
        left._pieces(key, "the left")
    for key in right_keys:
        right._pieces(key, "the right")
    return left_keys, right_keys


def _describe_key(table, key, side, dtype=False):
    """``left column 'k' of table 'fact'``: where a key column's values come from."""
    tables = ", ".join(sorted({repr(slot.name) for slot, _ in table._pieces(key)}))
    return f"{side} column {key!r} of table {tables}" + (f" ({table._dtypes[key].resolve()})" if dtype else "")


def _check_key_pair(left, left_key, right, right_key, how, sort):
    """Refuse a key pair where ``pandas.merge`` refuses it, with pandas' message naming both columns.

    pandas decides from the key dtypes and, for object columns, from the Python types of the values
    (``_maybe_coerce_merge_keys``); an outer or sorted join also sorts the keys, which fails on
    values that cannot be ordered. Rather than re-implementing those rules, pandas runs them on a few
    representative rows of each key column (:meth:`Table._representative_rows`: one row per kind of
    value, one missing value): same dtypes, same kinds of values, so the same decision.

    Returns the TypeError to raise after ``validate`` when the keys cannot be sorted (pandas sorts
    after validating), else None. pandas failures that depend on the join's rows are left to the
    sample of :meth:`_Merged._key_dtypes`, which keeps its structure.
    """
    if left._dtypes[left_key].resolve() == right._dtypes[right_key].resolve():
        return None  # pandas merges keys of one dtype as they are (the usual case: no rows read)
    probe_left = left._sample([left_key], left._representative_rows(left_key))
    probe_right = right._sample([right_key], right._representative_rows(right_key))
    keys = {"on": left_key} if left_key == right_key else {"left_on": left_key, "right_on": right_key}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. int vs float keys with fractions: pandas only warns
        try:  # pandas' checks before validate= (its merge object's construction)
            operation = _MERGE_OPERATION(probe_left, probe_right, how=how, sort=sort, **keys)
        except (ValueError, TypeError) as error:
            raise _pandas_failure(error, left, [left_key], right, [right_key]) from None
        try:  # the join itself, after validate=
            operation.get_result()
        except (ValueError, TypeError) as error:
            if "unhashable" in str(error) or str(error).startswith("You are trying to merge on"):
                raise _pandas_failure(error, left, [left_key], right, [right_key]) from None
            if isinstance(error, TypeError) and "not supported between instances" in str(error):
                return _pandas_failure(error, left, [left_key], right, [right_key])
    return None


class _Merge:
    """``pandas.merge`` in its two steps, where pandas' private ``_MergeOperation`` is missing."""

    def __init__(self, left, right, **kwargs):
        self.arguments = left, right, kwargs

    def get_result(self):
        left, right, kwargs = self.arguments
        return pd.merge(left, right, **kwargs)


# pandas' merge object: checks and coerces the keys when built, joins in get_result()
_MERGE_OPERATION = getattr(importlib.import_module("pandas.core.reshape.merge"), "_MergeOperation", _Merge)


def _pandas_failure(error, left, left_keys, right, right_keys):
    """pandas' error on a few rows of the key columns, as ilargi's: same class, columns named."""
    message = str(error)
    refused = message.startswith("You are trying to merge on")
    columns = " and ".join(
        f"{_describe_key(left, lk, 'left', not refused)} and {_describe_key(right, rk, 'right', not refused)}"
        for lk, rk in zip(left_keys, right_keys))
    if refused:
        message = (f"{message.split('. If you wish')[0]}: {columns}. Convert one side (e.g. with astype) "
                   "so that both hold the same kind of values")
    else:
        message = f"cannot merge on {columns}: pandas fails on these keys ({message})"
    return type(error)(message)


def _key_codes(left, left_keys, right, right_keys, sort):
    """Target-level int64 codes of the (composite) keys of both sides, in one code space."""
    per_key = [_column_codes(left, left_key, right, right_key, sort)
               for left_key, right_key in zip(left_keys, right_keys)]
    left_codes, right_codes, sizes = zip(*per_key)
    return combine_codes(left_codes, right_codes, sizes, sort)


def _sorted_by_key(left_codes, right_codes, left_take, right_take, how):
    """``sort=True``: the rows of an inner, left or right join stably ordered by their (sorted) key
    codes, which is pandas' order: by key, then as the unsorted join lists them."""
    codes, take = (right_codes, right_take) if how == "right" else (left_codes, left_take)
    order = np.argsort(codes if take is None else codes.take(take), kind="stable")
    return (order if left_take is None else left_take.take(order),
            order if right_take is None else right_take.take(order))


def _column_codes(left, left_key, right, right_key, sort):
    left_pieces, right_pieces = left._pieces(left_key), right._pieces(right_key)
    distinct = {}
    for slot, column in left_pieces + right_pieces:
        distinct.setdefault((id(slot.source), column), (slot.source, column))
    try:
        try:
            codes, count = _source_codes(list(distinct.values()), sort)
        except TypeError:
            if not sort:
                raise
            # values no joined row takes (a row an earlier join dropped) may be what cannot be
            # sorted: sort only the values the joined rows hold, as pandas does
            codes, count = _referenced_codes(left_pieces + right_pieces, distinct, sort)
    except TypeError as error:  # unhashable values (lists, dicts), or values that cannot be sorted
        raise TypeError(f"cannot merge on {_describe_key(left, left_key, 'left', True)} and "
                        f"{_describe_key(right, right_key, 'right', True)}: their values cannot be "
                        f"{'sorted' if sort and 'hashable' not in str(error) else 'hashed'} ({error}); "
                        "keys must be numbers, strings, booleans or dates") from None
    # Missing values join the NA code, first or last in key order. Into new arrays: integer keys
    # are their own codes (factorize_jointly), so a code array may be the caller's column.
    na_first = _missing_sorts_first(left._dtypes[left_key].resolve(), right._dtypes[right_key].resolve())
    for i, piece_codes in enumerate(codes):
        if na_first:
            codes[i] = piece_codes + 1  # -1 (missing) becomes 0
        else:
            missing = piece_codes < 0
            if missing.any():
                codes[i] = np.where(missing, count, piece_codes)
    na = 0 if na_first else count
    code_of = dict(zip(distinct, codes))

    def target_codes(table, pieces):
        return gather_codes([(code_of[id(slot.source), column], slot.rows) for slot, column in pieces],
                            len(table), na)

    return target_codes(left, left_pieces), target_codes(right, right_pieces), count + 1


def _missing_sorts_first(left_dtype, right_dtype):
    """Whether pandas orders missing keys first when it sorts them (outer joins, ``sort=True``).

    pandas matches datetimes of both sides (naive or both tz-aware), timedeltas of one dtype and
    categoricals of one dtype on their integer representation, where NaT is the smallest int64 and a
    missing category the code -1; every other key puts missing values last.
    """
    kinds = {getattr(left_dtype, "kind", None), getattr(right_dtype, "kind", None)}
    both_tz = isinstance(left_dtype, pd.DatetimeTZDtype) and isinstance(right_dtype, pd.DatetimeTZDtype)
    if both_tz or (kinds == {"M"} and not isinstance(left_dtype, pd.DatetimeTZDtype)
                   and not isinstance(right_dtype, pd.DatetimeTZDtype)):
        return True
    return left_dtype == right_dtype and (kinds == {"m"} or isinstance(left_dtype, pd.CategoricalDtype))


def _referenced_codes(pieces, distinct, sort):
    """Like :func:`_source_codes` over the source rows some joined row takes only (-1 elsewhere)."""
    masks = {}
    for slot, column in pieces:
        key = (id(slot.source), column)
        mask = masks.setdefault(key, np.zeros(slot.source.nrows, dtype=bool))
        if slot.rows is None:
            mask[:] = True
        else:
            mask[slot.rows[slot.rows >= 0]] = True
    values = [source.read([column])[column][masks[key]] for key, (source, column) in distinct.items()]
    taken, count = factorize_jointly(values, sort)
    codes = []
    for key, piece_codes in zip(distinct, taken):
        full = np.full(len(masks[key]), -1, dtype=np.int64)
        full[masks[key]] = piece_codes
        codes.append(full)
    return codes, count


def _source_codes(pieces, sort):
    """Joint codes of source key columns: inside DuckDB when they all live in one connection."""
    connections = {id(getattr(source, "connection", None)) for source, _ in pieces}
    if all(isinstance(source, DuckDBSource) for source, _ in pieces) and len(connections) == 1:
        return duckdb_codes(pieces, sort)
    return factorize_jointly([source.read([column])[column] for source, column in pieces], sort)


def _check_unique(table, keys, codes, size, validate, side, required):
    if not required:
        return
    duplicate = first_duplicate(codes, size)
    if duplicate is None:
        return
    row, count = duplicate
    value = tuple(_value_at(table, key, row) for key in keys)
    kind = validate if "_" in validate else {"1:1": "one_to_one", "1:m": "one_to_many",
                                               "m:1": "many_to_one"}[validate]
    raise pd.errors.MergeError(
        f"validate={validate!r}: merge keys {keys} are not unique in the {side} table {table.name!r}: "
        f"key {value[0] if len(value) == 1 else value!r} appears {count} times; not a {kind} merge")


def _value_at(table, key, row):
    for slot, column in table._pieces(key):
        source_row = row if slot.rows is None else int(slot.rows[row])
        if source_row >= 0:
            value = slot.source.read([column])[column].iloc[source_row]
            return value.item() if isinstance(value, np.generic) else value
    return None


def _suffix_pair(suffixes):
    if isinstance(suffixes, (set, frozenset, dict, str)) or len(suffixes) != 2:
        raise TypeError(f"suffixes must be a pair like ('_x', '_y'), got {suffixes!r}")
    return tuple("" if suffix is None else str(suffix) for suffix in suffixes)


class _Merged:
    """Builds the Table of one merge from the two sides and the join's row pairs."""

    def __init__(self, left, right, left_take, right_take):
        self.left, self.right = left, right
        self.left_take, self.right_take = left_take, right_take
        self.nrows = len(left) if left_take is None and right_take is None else len(
            left_take if left_take is not None else right_take)
        taken = set()
        self.slots = [Slot(s.source, _compose(s.rows, left_take), unique_name(s.name, taken), s.nan_missing)
                      for s in left._slots]
        self.offset = len(self.slots)
        self.slots += [Slot(s.source, _compose(s.rows, right_take), unique_name(s.name, taken), s.nan_missing)
                       for s in right._slots]
        self.taken = taken
        self.masked = {}

    def table(self, left_keys, right_keys, suffixes, overlap, how, sort):
        left, right = self.left, self.right
        shared_keys = {lk for lk, rk in zip(left_keys, right_keys) if lk == rk}
        # pandas fills a left key column from the right key where the left row is absent when both
        # keys have one name -- or when either label is not a string (pandas' _should_fill)
        filled = {lk: rk for lk, rk in zip(left_keys, right_keys)
                  if lk == rk or not (isinstance(lk, str) and isinstance(rk, str))}
        right_columns = [c for c in right.columns if c not in shared_keys]
        overlapping = set(left.columns) & set(right_columns)
        left_suffix, right_suffix = _suffix_pair(suffixes)
        if overlapping and overlap == "suffix" and not left_suffix and not right_suffix:
            raise ValueError(f"columns overlap but no suffix specified: {sorted(map(str, overlapping))}")
        left_absent = None if self.left_take is None else self.left_take < 0
        left_missing = left_absent is not None and bool(left_absent.any())
        right_missing = self.right_take is not None and bool((self.right_take < 0).any())
        columns, specs, keyed = [], [], []
        for column in left.columns:
            pieces, spec = tuple(left._columns[column]), left._dtypes[column]
            spec = WithMissing(spec) if left_missing else spec
            if column in filled and left_missing:
                # (when every left row is absent, pandas takes the right values as they are)
                nan_missing = not left_absent.all() and _strings_only(right, filled[column])
                pieces += self._masked_right(filled[column], left_absent, nan_missing)
            elif column in overlapping and overlap == "coalesce":
                more = self._masked_right(column, self._uncovered(pieces))
                spec = CommonDtype([left._dtypes[column], right._dtypes[column]],
                                   bool(self._uncovered(pieces + more).any()))
                pieces += more
            renamed = column in overlapping and overlap == "suffix"
            name = f"{column}{left_suffix}" if renamed and left_suffix else column
            columns.append((name, pieces))
            specs.append(spec)
            keyed.append(column in left_keys or column in right_keys)
        for column in right_columns:
            if column in overlapping and overlap != "suffix":
                continue
            renamed = column in overlapping and right_suffix
            columns.append((f"{column}{right_suffix}" if renamed else column, self._right_pieces(column)))
            spec = right._dtypes[column]
            specs.append(WithMissing(spec) if right_missing else spec)
            keyed.append(column in left_keys or column in right_keys)
        names = [name for name, _ in columns]
        duplicated = sorted(str(name) for name, count in Counter(names).items() if count > 1)
        if duplicated:
            raise pd.errors.MergeError(
                f"Passing 'suffixes' which cause duplicate columns {duplicated} is not allowed.")
        coerced = any(left._dtypes[lk].resolve() != right._dtypes[rk].resolve()
                      for lk, rk in zip(left_keys, right_keys))
        if any(keyed) and (coerced or left_missing):  # else pandas keeps the key columns as they are
            pandas_dtypes = self._key_dtypes(left_keys, right_keys, how,
                                             suffixes if overlap == "suffix" else ("", "\0ilargi"), sort)
            specs = [Fixed(pandas_dtypes[name]) if is_key and name in pandas_dtypes else spec
                     for (name, _), spec, is_key in zip(columns, specs, keyed)]
        return self._pruned(columns, specs)

    def _key_dtypes(self, left_keys, right_keys, how, suffixes, sort):
        """The dtypes pandas gives the key columns of this merge, from pandas itself on a few rows.

        A key column's dtype depends on pandas' coercion of the pair (bool vs int: object;
        categoricals with other categories: the categories' dtype), decided from the dtypes and the
        kinds of values, and on which side misses rows (the key is filled from the other side). The
        sample keeps both: the representative rows of each key column, and one joined row of each
        kind present (matched, left only, right only), each row with its partner, so the sample
        has no kind of joined row the join does not have.
        """
        left, right = self.left, self.right
        left_take = np.arange(self.nrows) if self.left_take is None else self.left_take
        right_take = np.arange(self.nrows) if self.right_take is None else self.right_take
        chosen = [np.flatnonzero(mask)[:1] for mask in ((left_take >= 0) & (right_take >= 0), left_take < 0,
                                                        right_take < 0)]
        alone = []
        for table, take, keys in ((left, left_take, left_keys), (right, right_take, right_keys)):
            # pandas' coercion looks at the kinds of values: keep the representative rows, each in
            # a joined row of its own (with its partner), or alone if the join drops it
            wanted = np.unique(np.concatenate([table._representative_rows(key) for key in keys]))
            hits = np.flatnonzero(np.isin(take, wanted))
            first = hits[np.unique(take[hits], return_index=True)[1]]
            chosen.append(first)
            alone.append(np.setdiff1d(wanted, take[first]))
        if self.left_take is not None or self.right_take is not None:
            # pandas skips filling the key when both of its row indexers are the identity, which
            # changes the key dtype of datetimes of different units: the sample must not be an
            # identity join where this join is not one
            side = 0 if self.left_take is not None else 1
            rows, lonely = _identity_witness((left_take, right_take)[side], len((left, right)[side]))
            chosen.append(rows)
            alone[side] = np.union1d(alone[side], lonely)
        chosen = np.unique(np.concatenate(chosen))
        samples = []
        for table, take, own, other, more in ((left, left_take, left_keys, right_keys, alone[0]),
                                              (right, right_take, right_keys, left_keys, alone[1])):
            rows = np.concatenate([take.take(chosen), more])
            # pandas also coerces a column of one side named like a key of the other
            columns = list(dict.fromkeys([*own, *(c for c in other if c in table._columns)]))
            samples.append(table._sample(columns, np.unique(rows[rows >= 0])))
        keys = ({"on": list(left_keys)} if list(left_keys) == list(right_keys)
                else {"left_on": list(left_keys), "right_on": list(right_keys)})
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                merged = pd.merge(*samples, how=how, suffixes=suffixes, sort=sort, **keys)
        except (ValueError, TypeError) as error:  # pandas fails on these keys, whatever the rows
            raise _pandas_failure(error, left, left_keys, right, right_keys) from None
        return merged.dtypes.to_dict()

    def _right_pieces(self, column):
        return tuple((self.offset + index, c) for index, c in self.right._columns[column])

    def _uncovered(self, pieces):
        uncovered = np.ones(self.nrows, dtype=bool)
        for index, _ in pieces:
            uncovered &= self.slots[index].row_vector(self.nrows) < 0
        return uncovered

    def _masked_right(self, column, keep, nan_missing=False):
        """The right column's pieces restricted to the rows in ``keep`` (new slots, row-disjoint).

        ``nan_missing``: the pieces fill a merged key whose right values pandas turns into str on the
        way (object strings), so a missing right value shows as NaN, never None."""
        pieces = []
        for index, source_column in self._right_pieces(column):
            slot = self.slots[index]
            cache_key = (index, keep.tobytes(), nan_missing)
            if cache_key not in self.masked:
                rows = np.where(keep, slot.row_vector(self.nrows), -1)
                self.masked[cache_key] = None
                if (rows >= 0).any():
                    self.slots.append(Slot(slot.source, rows, unique_name(f"{slot.name}.{column}", self.taken),
                                           nan_missing or slot.nan_missing))
                    self.masked[cache_key] = len(self.slots) - 1
            if self.masked[cache_key] is not None:
                pieces.append((self.masked[cache_key], source_column))
        return tuple(pieces)

    def _pruned(self, columns, specs):
        """Drop slots no column uses (e.g. a right table that only held the key) and renumber."""
        used = sorted({index for _, pieces in columns for index, _ in pieces})
        number = {old: new for new, old in enumerate(used)}
        return Table._assemble(
            self.left.name, [self.slots[i] for i in used],
            [(name, tuple((number[i], c) for i, c in pieces)) for name, pieces in columns], self.nrows,
            {name: spec for (name, _), spec in zip(columns, specs)})


def _strings_only(table, column):
    """Whether an object key column holds only strings (and missing values).

    pandas fills a merged key with ``Index.where(mask, right values)``, which infers a str array
    from object strings: their missing values come out as NaN, where other object keys keep None.
    """
    if not pd.api.types.is_object_dtype(table._dtypes[column].resolve()):
        return False
    values = table._sample([column], table._representative_rows(column))[column]
    return pd.api.types.infer_dtype(values, skipna=True) == "string"


def _identity_witness(take, nrows):
    """Why a row indexer of a join is not the identity: ``(joined rows, rows of the side alone)``
    that, kept in a sample of the join, keep the sample's indexer from being the identity."""
    none = np.empty(0, dtype=np.int64)
    if (take < 0).any():  # a row the side misses
        return np.flatnonzero(take < 0)[:1], none
    counts = np.bincount(take, minlength=nrows)
    if (counts == 0).any():  # a row of the side the join drops
        return none, np.flatnonzero(counts == 0)[:1]
    if (counts > 1).any():  # a row of the side the join repeats
        return np.flatnonzero(take == np.flatnonzero(counts > 1)[0])[:2], none
    back = np.flatnonzero(np.diff(take) < 0)[:1]  # rows out of order
    return np.concatenate([back, back + 1]), none


def concat(tables, name=None):
    """Union of Tables (or DataFrames) like ``pandas.concat(tables, ignore_index=True)``.

    Columns are the union in order of first appearance; each input's sources keep their index
    vectors over the input's own block of rows and are -1 elsewhere, so cells of a column an input
    lacks are missing. Nothing is materialized.

    Parameters
    ----------
    tables : iterable of Table or pandas.DataFrame
        The inputs, stacked in order.
    name : str, optional
        The result's name (default: the first input's).

    Returns
    -------
    Table
        The union.

    Raises
    ------
    ValueError
        If ``tables`` is empty.

    Examples
    --------
    >>> import pandas as pd
    >>> from ilargi import concat
    >>> a = pd.DataFrame({"x": [1.0, 2.0]})
    >>> b = pd.DataFrame({"x": [3.0], "y": ["u"]})
    >>> concat([a, b]).to_pandas()
         x    y
    0  1.0  NaN
    1  2.0  NaN
    2  3.0    u
    """
    tables = [_as_table(t, f"table{i}") for i, t in enumerate(tables)]
    if not tables:
        raise ValueError("concat needs at least one table")
    nrows = sum(len(t) for t in tables)
    slots, columns, taken, offset = [], {}, set(), 0
    for table in tables:
        base = len(slots)
        for slot in table._slots:
            rows = np.full(nrows, -1, dtype=np.int64)
            rows[offset:offset + len(table)] = slot.row_vector(len(table))
            slots.append(Slot(slot.source, _identity_or(rows, slot.source.nrows), unique_name(slot.name, taken),
                              slot.nan_missing))
        for column, pieces in table._columns.items():
            columns.setdefault(column, []).extend((base + index, c) for index, c in pieces)
        offset += len(table)
    dtypes = {column: UnionDtype(tables, column) for column in columns}
    return Table._assemble(tables[0].name if name is None else str(name), slots,
                           {column: tuple(pieces) for column, pieces in columns.items()}, nrows, dtypes)
