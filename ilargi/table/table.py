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
values, column names and order, row order. Dtypes follow pandas where a column has no missing cells;
where it has, the source dtype is promoted as pandas' ``take`` promotes it (int -> float64 with NaN,
bool -> object), computed once over the final rows, so a column whose missing rows a later inner join
removed keeps its source dtype where pandas would keep the promoted one.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .encode import column_levels, to_matrix
from .join import combine_codes, factorize_jointly, first_duplicate, gather_codes, join_indexers
from .persist import load_table, save_table
from .sources import (EMPTY, UNSUPPORTED, DuckDBSource, FrameSource, ParquetSource, Slot, duckdb_codes,
                      unique_name)

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
    def from_parquet(cls, path, name=None):
        """A Table over a Parquet file, read lazily.

        Columns are read only when needed (keys for a merge, encoded columns), as
        ``pandas.read_parquet`` reads them except that decimals become float64.

        Parameters
        ----------
        path : str or path-like
            The Parquet file.
        name : str, optional
            The table's name (default: the file name without its suffix).

        Returns
        -------
        Table
            A single-source Table.

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
    def _assemble(cls, name, slots, columns, nrows):
        table = object.__new__(cls)
        table._set(name, slots, columns, nrows)
        return table

    def _set(self, name, slots, columns, nrows):
        self.name = name
        self._slots = tuple(slots)
        self._columns = dict(columns)
        self._nrows = int(nrows)

    # ------------------------------------------------------------------ description
    @property
    def columns(self):
        """Column labels of the joined table, in pandas' order (a list)."""
        return list(self._columns)

    @property
    def shape(self):
        """``(rows, columns)`` of the joined table."""
        return self._nrows, len(self._columns)

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
              validate=None, overlap="suffix"):
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

        Returns
        -------
        Table
            The joined table.

        Raises
        ------
        ValueError
            For an unknown ``how``, ``validate`` or ``overlap``, missing or unpaired keys, or keys
            of kinds that cannot match.
        TypeError
            For keys that are not column labels, or key columns of unsupported values.
        pandas.errors.MergeError
            If ``validate`` fails, or suffixes make duplicate column names.

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
        left_codes, right_codes, size = _key_codes(self, left_keys, right, right_keys, sort=how == "outer")
        if validate is not None:
            _check_unique(self, left_keys, left_codes, size, validate, "left", _VALIDATE[validate][0])
            _check_unique(right, right_keys, right_codes, size, validate, "right", _VALIDATE[validate][1])
        left_take, right_take = join_indexers(left_codes, right_codes, size, how)
        del left_codes, right_codes
        return _Merged(self, right, _identity_or(left_take, len(self)),
                       _identity_or(right_take, len(right))).table(left_keys, right_keys, suffixes, overlap)

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
        values, covered, arrays = None, np.zeros(self._nrows, dtype=bool), []
        for index, source_column in self._columns[column]:
            rows = self._slots[index].rows
            array = frames[index][source_column].array
            arrays.append(array)
            piece = pd.Series(array if rows is None else
                              pd.api.extensions.take(array, rows, allow_fill=True), copy=False)
            present = np.ones(self._nrows, dtype=bool) if rows is None else rows >= 0
            values = piece if values is None else values.mask(present, piece)
            covered |= present
        if len(arrays) > 1 and covered.all():
            # pieces that cover every row (a union, a coalesced key) get pandas' common dtype back
            values = values.astype(pd.concat([pd.Series(a[:0]) for a in arrays]).dtype)
        return values

    def to_pandas(self):
        """Materialize the joined table as pandas would have built it.

        Returns
        -------
        pandas.DataFrame
            Equal to the matching ``pandas.merge`` / ``pandas.concat`` chain: values, column names
            and order, row order (dtypes: see the module docstring).

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
        data = {column: self.gather(column, frames).array for column in self._columns}
        return pd.DataFrame(data, index=pd.RangeIndex(self._nrows), columns=self.columns)

    def to_matrix(self, columns=None, target=None, categorical="onehot", missing="zero"):
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

        Returns
        -------
        nm : NormalizedMatrix
            The encoded features, one or more parts per source table.
        y : ndarray of shape (n_rows,) or None
            The encoded target, or None without ``target``.

        Raises
        ------
        ValueError
            For unknown ``categorical``/``missing`` values, unknown or repeated columns, or
            encoded column names that collide.
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
        return to_matrix(self, columns, target, categorical, missing)

    # ------------------------------------------------------------------ persistence
    def save(self, folder, sources=False):
        """Save the join metadata (and optionally the sources) into a folder.

        The metadata take the format of :class:`ilargi.metadata.Metadata` (``metadata.json`` +
        ``indices.npz``, one part per source table placed in the join), the table layout in its
        ``extra`` field.

        Parameters
        ----------
        folder : str or path-like
            Created if needed.
        sources : bool, default=False
            Also write every source as Parquet under ``folder/sources``. Otherwise Parquet sources
            are referenced by path and the others must be passed to :meth:`load`.

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
            a single-source Table or a DuckDB connection (which re-reads the saved table name or
            query). Sources saved beside the metadata or referenced by Parquet path need no entry.

        Returns
        -------
        Table
            The saved joined table.

        Raises
        ------
        ValueError
            If the folder holds no saved Table, a source is missing, or a source's rows or columns
            differ from the saved ones.
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


def _single(source):
    return source.name, [Slot(source, None, source.name)], {c: ((0, c),) for c in source.columns}, source.nrows


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


def _side_kind(table, key):
    """The one value kind of a key column over its pieces; errors for unsupported or mixed kinds."""
    kinds = set()
    for slot, column in table._pieces(key):
        kind = slot.source.kind(column)
        if kind == UNSUPPORTED:
            raise TypeError(f"merge key {column!r} of table {slot.name!r} has unsupported values "
                            f"(dtype {slot.source.dtype(column)}); keys must be numbers, strings, "
                            "booleans or dates")
        kinds.add(kind)
    kinds.discard(EMPTY)
    if len(kinds) > 1:
        raise ValueError(f"merge key {key!r} of {table.name!r} mixes value kinds {sorted(kinds)}")
    return kinds.pop() if kinds else EMPTY


def _describe_key(table, key):
    slot, column = table._pieces(key)[0]
    return f"{slot.name}.{column} ({slot.source.dtype(column)})"


def _key_codes(left, left_keys, right, right_keys, sort):
    """Target-level int64 codes of the (composite) keys of both sides, in one code space."""
    per_key = []
    for left_key, right_key in zip(left_keys, right_keys):
        left_kind, right_kind = _side_kind(left, left_key), _side_kind(right, right_key)
        if EMPTY not in (left_kind, right_kind) and left_kind != right_kind:
            raise ValueError(f"key dtypes cannot match: {_describe_key(left, left_key)} holds "
                             f"{left_kind} values but {_describe_key(right, right_key)} holds "
                             f"{right_kind} values")
        per_key.append(_column_codes(left, left_key, right, right_key, sort))
    left_codes, right_codes, sizes = zip(*per_key)
    return combine_codes(left_codes, right_codes, sizes, sort)


def _column_codes(left, left_key, right, right_key, sort):
    left_pieces, right_pieces = left._pieces(left_key), right._pieces(right_key)
    distinct = {}
    for slot, column in left_pieces + right_pieces:
        distinct.setdefault((id(slot.source), column), (slot.source, column))
    codes, count = _source_codes(list(distinct.values()), sort)
    for piece_codes in codes:  # our own fresh arrays: missing values join the NA code in place
        piece_codes[piece_codes < 0] = count
    code_of = dict(zip(distinct, codes))

    def target_codes(table, pieces):
        return gather_codes([(code_of[id(slot.source), column], slot.rows) for slot, column in pieces],
                            len(table), count)

    return target_codes(left, left_pieces), target_codes(right, right_pieces), count + 1


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
        self.left_take = left_take
        self.nrows = len(left) if left_take is None and right_take is None else len(
            left_take if left_take is not None else right_take)
        taken = set()
        self.slots = [Slot(s.source, _compose(s.rows, left_take), unique_name(s.name, taken))
                      for s in left._slots]
        self.offset = len(self.slots)
        self.slots += [Slot(s.source, _compose(s.rows, right_take), unique_name(s.name, taken))
                       for s in right._slots]
        self.taken = taken
        self.masked = {}

    def table(self, left_keys, right_keys, suffixes, overlap):
        left, right = self.left, self.right
        shared_keys = {lk for lk, rk in zip(left_keys, right_keys) if lk == rk}
        right_columns = [c for c in right.columns if c not in shared_keys]
        overlapping = set(left.columns) & set(right_columns)
        left_suffix, right_suffix = _suffix_pair(suffixes)
        if overlapping and overlap == "suffix" and not left_suffix and not right_suffix:
            raise ValueError(f"columns overlap but no suffix specified: {sorted(map(str, overlapping))}")
        left_absent = None if self.left_take is None else self.left_take < 0
        columns = []
        for column in left.columns:
            pieces = tuple(left._columns[column])
            if column in shared_keys and left_absent is not None:
                pieces += self._masked_right(column, left_absent)
            elif column in overlapping and overlap == "coalesce":
                pieces += self._masked_right(column, self._uncovered(pieces))
            renamed = column in overlapping and overlap == "suffix"
            columns.append((f"{column}{left_suffix}" if renamed and left_suffix else column, pieces))
        for column in right_columns:
            if column in overlapping and overlap != "suffix":
                continue
            renamed = column in overlapping and right_suffix
            columns.append((f"{column}{right_suffix}" if renamed else column, self._right_pieces(column)))
        names = [name for name, _ in columns]
        duplicated = sorted(str(name) for name, count in Counter(names).items() if count > 1)
        if duplicated:
            raise pd.errors.MergeError(
                f"Passing 'suffixes' which cause duplicate columns {duplicated} is not allowed.")
        return self._pruned(columns)

    def _right_pieces(self, column):
        return tuple((self.offset + index, c) for index, c in self.right._columns[column])

    def _uncovered(self, pieces):
        uncovered = np.ones(self.nrows, dtype=bool)
        for index, _ in pieces:
            uncovered &= self.slots[index].row_vector(self.nrows) < 0
        return uncovered

    def _masked_right(self, column, keep):
        """The right column's pieces restricted to the rows in ``keep`` (new slots, row-disjoint)."""
        pieces = []
        for index, source_column in self._right_pieces(column):
            slot = self.slots[index]
            cache_key = (index, keep.tobytes())
            if cache_key not in self.masked:
                rows = np.where(keep, slot.row_vector(self.nrows), -1)
                self.masked[cache_key] = None
                if (rows >= 0).any():
                    self.slots.append(Slot(slot.source, rows, unique_name(f"{slot.name}.{column}", self.taken)))
                    self.masked[cache_key] = len(self.slots) - 1
            if self.masked[cache_key] is not None:
                pieces.append((self.masked[cache_key], source_column))
        return tuple(pieces)

    def _pruned(self, columns):
        """Drop slots no column uses (e.g. a right table that only held the key) and renumber."""
        used = sorted({index for _, pieces in columns for index, _ in pieces})
        number = {old: new for new, old in enumerate(used)}
        return Table._assemble(
            self.left.name, [self.slots[i] for i in used],
            [(name, tuple((number[i], c) for i, c in pieces)) for name, pieces in columns], self.nrows)


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
            slots.append(Slot(slot.source, _identity_or(rows, slot.source.nrows), unique_name(slot.name, taken)))
        for column, pieces in table._columns.items():
            columns.setdefault(column, []).extend((base + index, c) for index, c in pieces)
        offset += len(table)
    return Table._assemble(tables[0].name if name is None else str(name), slots,
                           {column: tuple(pieces) for column, pieces in columns.items()}, nrows)
