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
rows of the key columns (one per kind of value, one missing), never on the joined rows. That merge
engine is :mod:`.merge`; :meth:`Table.merge` checks nothing itself and hands it both sides.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Sequence, cast

import numpy as np
import pandas as pd

from .dtypes import Fixed, SourceDtype, UnionDtype, empty_array
from .encode import column_levels, to_binned, to_matrix
from .merge import identity_or, merge_tables
from .persist import load_table, save_table
from .sources import DuckDBSource, FrameSource, ParquetSource, Slot, unique_name

if TYPE_CHECKING:
    import duckdb


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

    def __init__(self, data: pd.DataFrame, name: str | None = None) -> None:
        name = "table" if name is None else str(name)
        self._set(*_single(FrameSource(data, name)))

    @classmethod
    def from_parquet(
        cls,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        name: str | None = None,
        chunks: int | str | None = None,
    ) -> Any:
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
        path = cast("str | os.PathLike[str]", path)  # a single file without chunks
        return cls._assemble(
            *_single(ParquetSource(path, Path(path).stem if name is None else str(name)))
        )

    @classmethod
    def from_duckdb(
        cls, connection: duckdb.DuckDBPyConnection, table_or_query: str, name: str | None = None
    ) -> Table:
        """A Table over a DuckDB table name or SQL query; its data stays in DuckDB.

        Key matching runs inside DuckDB when both sides of a merge live in the same connection: only
        int64 key codes are pulled out.

        The rows are those of the moment ``from_duckdb`` is called (index vectors point at row
        numbers). A query, a view, or a table of a database opened for writing is copied into a
        temporary DuckDB table first -- a snapshot that stays inside DuckDB and lives as long as
        the connection -- so rows deleted, inserted or updated in the database afterwards reach
        neither this Table nor its merges and matrices; build a new Table to see them. Only a
        table of a database opened read-only, which nothing can change, is read in place (copied
        too if its rowids are not 0..n-1).

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
        >>> stores = Table.from_duckdb(con, "stores")
        >>> stores
        Table('stores': 3 rows x 1 columns from stores)
        >>> _ = con.execute("DELETE FROM stores WHERE store_id = 0")  # after: not seen
        >>> stores.to_matrix()[0].toarray().ravel().tolist()
        [0.0, 1.0, 2.0]
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
    def columns(self) -> list[Hashable]:
        """Column labels of the joined table, in pandas' order (a list)."""
        return list(self._columns)

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)`` of the joined table."""
        return self._nrows, len(self._columns)

    @property
    def dtypes(self) -> pd.Series:
        """The dtype of each column, as the matching pandas chain gives it (a pandas Series).

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import Table
        >>> fact = Table(pd.DataFrame({"k": [1, 2], "x": [3, 4]}))
        >>> fact.merge(pd.DataFrame({"k": [1], "z": [5]}), on="k", how="left").dtypes.tolist()
        [dtype('int64'), dtype('int64'), dtype('float64')]
        """
        return pd.Series(
            {column: spec.resolve() for column, spec in self._dtypes.items()}, dtype=object
        )

    def __len__(self) -> int:
        return self._nrows

    @property
    def tables(self) -> list[str]:
        """Names of the source tables as placed in the join (made unique), in order."""
        return [slot.name for slot in self._slots]

    def __repr__(self) -> str:
        return (
            f"Table({self.name!r}: {self._nrows} rows x {len(self._columns)} columns "
            f"from {', '.join(self.tables)})"
        )

    def _pieces(self, column, side="the"):
        """Pieces ``[(slot, source column)]`` of a target column; a clear error if it is missing."""
        if column not in self._columns:
            if len(self._slots) == 1:
                raise ValueError(
                    f"key column {column!r} is missing from table {self.name!r} "
                    f"(columns: {self.columns})"
                )
            raise ValueError(
                f"merge key {column!r} refers to no table: none of the tables on {side} side "
                f"({', '.join(self.tables)}) has a column {column!r}"
            )
        return [
            (self._slots[index], source_column) for index, source_column in self._columns[column]
        ]

    # ------------------------------------------------------------------ merge
    def merge(
        self,
        other: Table | pd.DataFrame,
        on: Hashable | Sequence[Hashable] | None = None,
        left_on: Hashable | Sequence[Hashable] | None = None,
        right_on: Hashable | Sequence[Hashable] | None = None,
        how: str = "inner",
        suffixes: tuple[str, str] = ("_x", "_y"),
        validate: str | None = None,
        overlap: str = "suffix",
        sort: bool = False,
    ) -> Table:
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
        return merge_tables(
            self,
            _as_table(other, "right"),
            on,
            left_on,
            right_on,
            how,
            suffixes,
            validate,
            overlap,
            sort,
        )

    # ------------------------------------------------------------------ materialization
    def read_columns(
        self, columns: Iterable[Hashable], levels_only: Iterable[Hashable] = ()
    ) -> dict[int, pd.DataFrame]:
        """The source data behind some columns, each source read once.

        Parameters
        ----------
        columns : iterable of labels
            Columns of the joined table.
        levels_only : iterable of labels
            Those of ``columns`` whose values are only taken as levels (categorical encodings):
            a source may give their strings as a pandas Categorical (see
            :meth:`ilargi.table.sources.Source.read`).

        Returns
        -------
        dict
            ``{slot index: DataFrame of the source columns it provides}``, over the source's own
            rows (slots that place one source twice share one read).
        """
        columns, levels_only = list(columns), set(levels_only)
        slot_columns: dict[int, list[Hashable]] = {}
        for column in columns:
            for index, source_column in self._columns[column]:
                slot_columns.setdefault(index, []).append(source_column)
        # per source: {source column: whether every joined column that reads it wants levels only}
        by_source: dict[int, tuple[Any, dict[Hashable, bool]]] = {}
        for column in columns:
            for index, source_column in self._columns[column]:
                source = self._slots[index].source
                wanted = by_source.setdefault(id(source), (source, {}))[1]
                wanted[source_column] = wanted.get(source_column, True) and column in levels_only
        frames = {
            key: source.read(list(wanted), levels_only={c for c, only in wanted.items() if only})
            for key, (source, wanted) in by_source.items()
        }
        return {index: frames[id(self._slots[index].source)] for index in slot_columns}

    def column_pieces(self, column: Hashable) -> list[tuple[int, Hashable]]:
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

    def slot(self, index: int) -> Slot:
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

    def gather(self, column: Hashable, frames: dict[int, pd.DataFrame]) -> pd.Series:
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
                    return pd.Series(
                        pd.api.extensions.take(
                            empty_array(dtype), np.full(len(rows), -1), allow_fill=True
                        ),
                        dtype=dtype,
                    )
                values = values.take(np.where(present, rows, rows[present][0])).reset_index(
                    drop=True
                )
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
            parts.append(
                pd.Series(
                    pd.api.extensions.take(
                        empty_array(dtype), np.full(len(where), -1), allow_fill=True
                    ),
                    dtype=dtype,
                )
            )
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
                    source_columns = list(
                        dict.fromkeys(
                            piece_column
                            for c in columns
                            for i, piece_column in self._columns[c]
                            if i == index
                        )
                    )
                    frame = slot.source.read_rows(source_columns, needed)
                    local = np.where(taken >= 0, np.searchsorted(needed, taken), -1)
                    number[index] = len(slots)
                    slots.append(
                        Slot(FrameSource(frame, slot.name), local, slot.name, slot.nan_missing)
                    )
                pieces.setdefault(column, []).append((number[index], source_column))
        sample = Table._assemble(
            self.name,
            slots,
            {c: tuple(pieces[c]) for c in columns},
            len(rows),
            {c: Fixed(self._dtypes[c].resolve()) for c in columns},
        )
        return sample.to_pandas()

    def to_pandas(self) -> pd.DataFrame:
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
        return pd.DataFrame(
            data, index=pd.RangeIndex(self._nrows), columns=self.columns, copy=False
        )

    def to_matrix(
        self,
        columns: Sequence[Hashable] | None = None,
        target: Hashable | None = None,
        categorical: str = "onehot",
        missing: str = "zero",
        allow_nonfinite: bool = False,
        chunks: int | Sequence[int] | None = None,
    ) -> tuple[Any, Any]:
        """Encode the joined table as ``(NormalizedMatrix, y)`` without building the join.

        Each source table is encoded once (dense float64 for numeric columns, CSR for one-hot and
        indicator columns) and reused through its index vector; ``nm.columns`` names every column.

        Parameters
        ----------
        columns : list or label, optional
            Target columns to encode, in this order (default: every column but ``target``). A
            single label that is not a list -- a string, a number, or a tuple that is itself a
            column label -- selects that one column, as in pandas (``columns="ab"`` is the
            column ``"ab"``, never the columns ``"a"`` and ``"b"``); a set or dict is refused
            (TypeError), as its order would be the matrix's column order.
        target : str, optional
            A column of any table in the join; ``y`` is its value per joined row as a float64
            ndarray (NaN where missing). A string/bool target gives the codes 0..k-1 of its sorted
            levels (``self.levels(target)``). None gives ``y = None``.
        categorical : "onehot" | "ordinal" | "error"
            String, bool and categorical columns: "onehot" -> one column ``"col=level"`` per level
            present in the joined rows (sorted), a CSR part per source table; "ordinal" -> one column
            of level codes 0..k-1 (sorted levels), treated as numeric from then on; "error" ->
            TypeError. Numeric columns always become float64 columns named as the column.
        missing : "zero" | "indicator" | "mean" | "nan"
            A cell is missing when its row is absent from the column's table (left/outer join miss,
            another table's block of a union) or its source value is NaN/None. "zero": 0, and a
            missing categorical cell is an all-zero one-hot row. "indicator": the same, plus a column
            ``"col__missing"`` (1 = missing) right after each column that has a missing cell; it is
            built from parts (per source its missing values, plus one part for the absent rows),
            never per joined row. "mean": a missing numeric cell holds the column mean over its
            present joined cells (0 if none; computed exactly from the index vectors), stored in the
            source parts and one part for the absent rows; categorical cells as with "zero".
            "nan": a missing numeric (or ordinal) cell is NaN, as ``pandas.merge`` leaves it, for
            the gradient-boosted trees, which learn where NaN goes (the matrix holds NaN: the
            other estimators refuse it); one-hot cells as with "zero".
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
            For columns that cannot be encoded (dates, nested values), non-numeric columns
            with ``categorical="error"``, or ``columns`` given as a set or dict.

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
        >>> Table(fact).to_matrix(columns="x")[0].columns  # one label, not its characters
        ['x']
        """
        matrix, y = to_matrix(self, columns, target, categorical, missing, allow_nonfinite)
        if chunks is None:
            return matrix, y
        matrix = matrix.to_dask(chunks)
        return matrix, None if y is None else matrix.align(y, "y")

    def to_binned(
        self,
        columns: Sequence[Hashable] | None = None,
        target: Hashable | None = None,
        categorical: str = "onehot",
        missing: str = "zero",
        allow_nonfinite: bool = False,
        max_bin: int = 255,
        min_data_in_bin: int = 3,
        fit_rows: slice | None = None,
        bounds: Sequence[Any] | None = None,
        categorical_features: Iterable[Hashable] | None = None,
    ) -> tuple[Any, Any]:
        """Encode the joined table as the bins a gradient-boosted tree learns from,
        ``(BinnedMatrix, y)``: ``to_matrix`` then ``BinnedMatrix.from_matrix``, a column at a
        time.

        The result equals ``BinnedMatrix.from_matrix(self.to_matrix(...)[0], ...)``, but each
        column is read, encoded and binned before the next is read, so the sources' float64
        blocks never exist: what is held is a byte per row and feature (per source row, or per
        joined row for the few columns of narrow tables that the learner reads by row), and the
        index vectors while this table lives. Fit :class:`ilargi.GradientBoostingRegressor` or
        :class:`ilargi.GradientBoostingClassifier` on it with the same ``max_bin`` and
        ``min_data_in_bin``; ``B[lo:hi]`` selects target rows without a copy.

        Parameters
        ----------
        columns, target, categorical, missing, allow_nonfinite
            As in :meth:`to_matrix`.
        max_bin : int, default=255
            Bins per feature at most (<= 255).
        min_data_in_bin : int, default=3
            Rows a bin holds at least, where the values allow it.
        fit_rows : slice, optional
            The target rows the bins are found from (default: all); the other rows are binned
            with the same bins. ``B[fit_rows]`` is then what binning those rows alone gives: a
            training set, and the rest a held-out set binned as the training set.
        bounds : list of ndarray, optional
            Bins to use instead (a training BinnedMatrix's ``bounds``): new data binned like
            the training data, for prediction.
        categorical_features : list of str, optional
            Encoded columns whose values are categories, binned one category a bin for the
            trees' categorical splits (``categorical_feature`` of the estimators), e.g. string
            columns encoded with ``categorical="ordinal"``; with ``bounds``, the training
            BinnedMatrix's ``categorical``.

        Returns
        -------
        binned : BinnedMatrix
            The features' bins and codes; ``binned.columns`` names them as ``to_matrix`` does.
        y : ndarray of shape (n_rows,) or None
            The encoded target, as :meth:`to_matrix` returns it.

        Raises
        ------
        ValueError, TypeError
            As :meth:`to_matrix` raises them, and for ``max_bin`` outside [2, 255] or bounds for
            another number of features.

        Examples
        --------
        >>> import pandas as pd
        >>> from ilargi import GradientBoostingRegressor, Table
        >>> fact = pd.DataFrame({"k": [0, 1, 1, 2] * 50, "x": range(200), "y": range(200)})
        >>> dim = pd.DataFrame({"k": [0, 1, 2], "size": [1.5, 2.5, 3.5]})
        >>> table = Table(fact).merge(dim, on="k")
        >>> B, y = table.to_binned(["x", "size"], target="y", fit_rows=slice(0, 150))
        >>> B.shape, B.columns
        ((200, 2), ['x', 'size'])
        >>> model = GradientBoostingRegressor(n_estimators=5, plan="factorized")
        >>> model = model.fit(B[:150], y[:150])
        >>> model.predict(B[150:]).shape
        (50,)
        """
        return to_binned(
            self,
            columns,
            target,
            categorical,
            missing,
            allow_nonfinite,
            (max_bin, min_data_in_bin),
            bounds,
            fit_rows,
            categorical_features,
        )

    # ------------------------------------------------------------------ persistence
    def save(self, folder: str | os.PathLike[str], sources: bool = False) -> None:
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
    def load(cls, folder: str | os.PathLike[str], sources: dict[str, Any] | None = None) -> Table:
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

    def levels(self, column: Hashable) -> pd.Index:
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
    return pd.Series(
        array, dtype=object if pd.api.types.is_object_dtype(array.dtype) else None, copy=False
    )


def _single(source):
    return (
        source.name,
        [Slot(source, None, source.name)],
        {c: ((0, c),) for c in source.columns},
        source.nrows,
        {c: SourceDtype(source, c) for c in source.columns},
    )


def _as_table(data, name):
    if isinstance(data, Table):
        return data
    if isinstance(data, pd.DataFrame):
        return Table(data, name=name)
    raise TypeError(f"expected an ilargi.Table or a pandas DataFrame, got {type(data).__name__}")


def concat(tables: Iterable[Table | pd.DataFrame], name: str | None = None) -> Table:
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
    slots: list[Slot] = []
    columns: dict[Hashable, list[tuple[int, Hashable]]] = {}
    taken: set[str] = set()
    offset = 0
    for table in tables:
        base = len(slots)
        for slot in table._slots:
            rows = np.full(nrows, -1, dtype=np.int64)
            rows[offset : offset + len(table)] = slot.row_vector(len(table))
            slots.append(
                Slot(
                    slot.source,
                    identity_or(rows, slot.source.nrows),
                    unique_name(slot.name, taken),
                    slot.nan_missing,
                )
            )
        for column, pieces in table._columns.items():
            columns.setdefault(column, []).extend((base + index, c) for index, c in pieces)
        offset += len(table)
    dtypes = {column: UnionDtype(tables, column) for column in columns}
    return Table._assemble(
        tables[0].name if name is None else str(name),
        slots,
        {column: tuple(pieces) for column, pieces in columns.items()},
        nrows,
        dtypes,
    )
