"""Where the rows of a :class:`~ilargi.table.Table` live: pandas frames, Parquet files, DuckDB.

Every source offers the same small surface: a name, its row count, its column labels, the *kind* of each
column, and ``read(columns)``, which returns a pandas DataFrame whose row ``j`` is the source row ``j``
that index vectors point at. Only ``read`` touches data; Parquet and DuckDB sources read just the columns
asked for, so building join metadata pulls key columns (or, in DuckDB, int64 codes) and nothing else.

Column kinds decide how ``to_matrix`` encodes a column: ``"numeric"`` (ints, floats, decimals: one
float64 column), ``"bool"`` and ``"string"`` (one-hot by level; ``"string"`` also covers a pandas
categorical whatever its categories -- ints, dates, booleans --, an object column of strings and
booleans mixed, and DuckDB enums), ``"datetime"``, ``"empty"`` (all missing object values,
compatible with anything) and ``"unsupported"`` (complex numbers, which a real matrix cannot hold,
lists, dicts, other mixed objects).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

NUMERIC, BOOL, STRING, DATETIME, EMPTY, UNSUPPORTED = (
    "numeric",
    "bool",
    "string",
    "datetime",
    "empty",
    "unsupported",
)

_INFERRED_KINDS = {
    "string": STRING,
    "empty": EMPTY,
    "boolean": BOOL,
    "integer": NUMERIC,
    "floating": NUMERIC,
    "mixed-integer-float": NUMERIC,
    "decimal": NUMERIC,
    "date": DATETIME,
    "datetime": DATETIME,
    "datetime64": DATETIME,
    "timedelta": DATETIME,
    "timedelta64": DATETIME,
    "time": DATETIME,
    "period": DATETIME,
}


def arrow_kind(pa_type):
    """The column kind of a pyarrow type (Parquet schemas, ``ArrowDtype`` columns).

    Parameters
    ----------
    pa_type : pyarrow.DataType
        The type.

    Returns
    -------
    str
        One of the kinds of the module docstring.
    """
    types = pa.types
    if types.is_dictionary(pa_type):  # read by pandas as a categorical: by level, as there
        return STRING
    if types.is_boolean(pa_type):
        return BOOL
    if types.is_integer(pa_type) or types.is_floating(pa_type) or types.is_decimal(pa_type):
        return NUMERIC
    if (
        types.is_string(pa_type)
        or types.is_large_string(pa_type)
        or getattr(types, "is_string_view", lambda t: False)(pa_type)
    ):
        return STRING
    if types.is_temporal(pa_type):
        return DATETIME
    if types.is_null(pa_type):
        return EMPTY
    return UNSUPPORTED


def series_kind(series):
    """The column kind of a pandas column; object columns are classified by their values.

    Parameters
    ----------
    series : pandas.Series
        The column.

    Returns
    -------
    str
        One of the kinds of the module docstring.

    Examples
    --------
    >>> import pandas as pd
    >>> from ilargi.table.sources import series_kind
    >>> series_kind(pd.Series([1, 2])), series_kind(pd.Series(["a", None]))
    ('numeric', 'string')
    """
    dtype = series.dtype
    if isinstance(dtype, pd.CategoricalDtype):
        # a categorical is the user's "encode me by level" (the encoding guide's advice for a
        # numeric code), whatever its categories hold
        return STRING
    if isinstance(dtype, pd.ArrowDtype):
        return arrow_kind(dtype.pyarrow_dtype)
    if isinstance(dtype, pd.StringDtype):
        return STRING
    if pd.api.types.is_bool_dtype(dtype):
        return BOOL
    if dtype.kind == "c":  # numeric to pandas, but a float64 column would drop the imaginary part
        return UNSUPPORTED
    if pd.api.types.is_numeric_dtype(dtype):
        return NUMERIC
    if dtype.kind in "mM" or isinstance(dtype, (pd.DatetimeTZDtype, pd.PeriodDtype)):
        return DATETIME
    if pd.api.types.is_object_dtype(dtype):
        inferred = pd.api.types.infer_dtype(series, skipna=True)
        if inferred == "mixed" and _strings_and_booleans(series):
            return STRING  # levels of two types, one-hot all the same (see encode.sorted_levels)
        return _INFERRED_KINDS.get(inferred, UNSUPPORTED)
    return UNSUPPORTED


def unsupported_values(source, column):
    """What an ``"unsupported"`` column holds, in words, for an error message.

    Parameters
    ----------
    source : Source
        The source.
    column : label
        A column of kind ``"unsupported"``.

    Returns
    -------
    str
        E.g. ``"complex numbers"``.
    """
    dtype = source.pandas_dtype(column)
    complex_values = getattr(dtype, "kind", "") == "c" or (
        pd.api.types.is_object_dtype(dtype)
        and isinstance(source, FrameSource)
        and pd.api.types.infer_dtype(source.frame[column], skipna=True) == "complex"
    )
    if complex_values:
        return (
            "complex numbers, which a real matrix cannot hold (encode .real and .imag, or "
            "abs(), as columns of their own)"
        )
    return "unsupported values (nested or mixed objects)"


def _strings_and_booleans(series):
    """Whether every present value of an object column is a string or a boolean."""
    present = series[series.notna()].to_numpy()
    return all(isinstance(value, (str, bool, np.bool_)) for value in present)


def series_representatives(values, referenced=None):
    """:meth:`Source.representatives` of a pandas column already in memory."""
    rows = np.arange(len(values)) if referenced is None else np.flatnonzero(referenced)
    values = values.take(rows) if referenced is not None else values
    missing = values.isna().to_numpy()
    if values.dtype == object:
        # one row per Python type (None and NaN are types too): what infer_dtype looks at
        kinds = pd.Series([type(value) for value in values.to_numpy()], dtype=object)
        first = ~kinds.duplicated().to_numpy()
    else:
        first = np.zeros(len(values), dtype=bool)
        for mask in (~missing, missing):
            hit = np.flatnonzero(mask)
            if len(hit):
                first[hit[0]] = True
    return rows[first].astype(np.int64)


class Source:
    """What every source offers a Table; only :meth:`read` touches data.

    Attributes
    ----------
    name : str
        The source's name.
    nrows : int
        Its number of rows.
    columns : list
        Its column labels.
    """

    def dtype(self, column):
        """The source's type name of a column, for messages.

        Parameters
        ----------
        column : label
            A column of the source.

        Returns
        -------
        str
            The dtype (pandas), Arrow type (Parquet) or SQL type (DuckDB).
        """
        raise NotImplementedError

    def kind(self, column):
        """The kind of a column: which keys it can match and how it is encoded.

        Parameters
        ----------
        column : label
            A column of the source.

        Returns
        -------
        str
            One of the kinds of the module docstring.
        """
        raise NotImplementedError

    def read(self, columns, levels_only=()):
        """Read some columns.

        Parameters
        ----------
        columns : list of labels
            Columns of the source.
        levels_only : collection of labels
            Columns whose values an encoder only takes as levels: a source that stores strings
            by dictionary (Parquet) may give these as a pandas Categorical of the same values,
            never building the strings of every row.

        Returns
        -------
        pandas.DataFrame
            The columns, row ``j`` being the source row ``j`` that index vectors point at.
        """
        raise NotImplementedError

    def pandas_dtype(self, column):
        """The pandas dtype :meth:`read` gives a column (what ``pandas.merge`` would see).

        Parameters
        ----------
        column : label
            A column of the source.

        Returns
        -------
        dtype
            A NumPy or pandas extension dtype.
        """
        raise NotImplementedError

    def representatives(self, column, referenced=None):
        """A few source rows that show every kind of value a column holds.

        ``pandas.merge`` decides whether two key columns can match from their dtypes and, for
        object columns, from the Python types of their values (``infer_dtype(skipna=False)``),
        missing values included. These rows carry the same evidence: one row per Python type
        (object columns) or one present value (typed columns), plus one missing value if any.

        Parameters
        ----------
        column : label
            A column of the source.
        referenced : ndarray of bool, optional
            Only rows where this mask is True (the rows a joined table uses); None: all rows.

        Returns
        -------
        ndarray of int64
            Source row numbers, sorted.
        """
        raise NotImplementedError

    def read_rows(self, columns, rows):
        """Read some columns at a few rows.

        Parameters
        ----------
        columns : list of labels
            Columns of the source.
        rows : ndarray of int64
            Source row numbers.

        Returns
        -------
        pandas.DataFrame
            ``len(rows)`` rows, in the order of ``rows``.
        """
        return self.read(columns).take(rows).reset_index(drop=True)

    def describe(self):
        """How :meth:`ilargi.Table.save` refers to the source.

        Returns
        -------
        dict
            ``{"kind": ...}`` plus the path (Parquet) or query (DuckDB) to reopen it.
        """
        raise NotImplementedError

    def write_parquet(self, path):
        """Write the whole source as a Parquet file.

        Parameters
        ----------
        path : str or path-like
            The file to write.
        """
        raise NotImplementedError


class FrameSource(Source):
    """A pandas DataFrame, held as a shallow copy (copy-on-write keeps it immune to later edits).

    Parameters
    ----------
    frame : pandas.DataFrame
        The data.
    name : str
        The source's name.

    Raises
    ------
    TypeError
        If ``frame`` is not a DataFrame or has MultiIndex columns.
    ValueError
        If column names repeat.
    """

    def __init__(self, frame, name):
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(
                f"table {name!r}: expected a pandas DataFrame, got {type(frame).__name__}"
            )
        if isinstance(frame.columns, pd.MultiIndex):
            raise TypeError(f"table {name!r}: MultiIndex columns are not supported")
        duplicated = frame.columns[frame.columns.duplicated()].unique().tolist()
        if duplicated:
            raise ValueError(f"table {name!r}: duplicate column names {duplicated}")
        self.frame = frame.copy(deep=False)
        self.name = name
        self.nrows = len(frame)
        self.columns = list(frame.columns)
        self._kinds = {}

    def dtype(self, column):
        return str(self.frame[column].dtype)

    def pandas_dtype(self, column):
        return self.frame[column].dtype

    def representatives(self, column, referenced=None):
        return series_representatives(self.frame[column], referenced)

    def read_rows(self, columns, rows):
        return pd.DataFrame(
            {column: self.frame[column].take(rows).reset_index(drop=True) for column in columns},
            index=pd.RangeIndex(len(rows)),
            copy=False,
        )

    def kind(self, column):
        if column not in self._kinds:
            self._kinds[column] = series_kind(self.frame[column])
        return self._kinds[column]

    def read(self, columns, levels_only=()):
        # Column by column: selecting a list of columns copies them (costly on a large table),
        # single columns are views (copy-on-write keeps the caller's frame safe).
        return pd.DataFrame(
            {column: self.frame[column].reset_index(drop=True) for column in columns},
            index=pd.RangeIndex(self.nrows),
            copy=False,
        )

    def describe(self):
        return {"kind": "frame"}

    def write_parquet(self, path):
        self.frame.to_parquet(path, index=False)


# How many bytes of numbers a Parquet source reads at a time (ParquetSource.read).
READ_BYTES = 64 << 20


class ParquetSource(Source):
    """A Parquet file, read lazily: only the columns asked for.

    Columns are read as ``pandas.read_parquet`` reads them, except that decimal columns become
    float64 (not Python ``Decimal`` objects, which cost far more memory and time and which no
    estimator computes with).

    Parameters
    ----------
    path : str or path-like
        The file.
    name : str
        The source's name.

    Raises
    ------
    FileNotFoundError
        If there is no such file.
    ValueError
        If the file is not Parquet (truncated or foreign).
    """

    def __init__(self, path, name):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"table {name!r}: no Parquet file {self.path}")
        try:
            metadata = pq.ParquetFile(self.path)
        except (OSError, pa.ArrowException) as error:  # a missing, truncated or foreign file
            raise ValueError(
                f"table {name!r}: cannot read the Parquet file {self.path}: {error}"
            ) from error
        self.schema = metadata.schema_arrow
        self.name = name
        self.nrows = metadata.metadata.num_rows
        self.columns = list(self.schema.names)
        self._metadata = metadata.metadata
        self._dtypes = {}

    def dtype(self, column):
        return str(self.schema.field(column).type)

    def _has_nulls(self, column):
        """Whether the column holds a null, from the row groups' statistics (no read); None
        where a row group has none (or the column is nested)."""
        metadata = self._metadata
        if metadata.num_row_groups == 0:
            return False
        chunks = metadata.row_group(0)
        at = [j for j in range(chunks.num_columns) if chunks.column(j).path_in_schema == column]
        if len(at) != 1:
            return None
        nulls = 0
        for group in range(metadata.num_row_groups):
            statistics = metadata.row_group(group).column(at[0]).statistics
            if statistics is None or not statistics.has_null_count:
                return None
            nulls += statistics.null_count
        return nulls > 0

    def kind(self, column):
        return arrow_kind(self.schema.field(column).type)

    def _arrow(self, columns, levels_only=()):
        strings = [c for c in columns if c in levels_only and self.kind(c) == STRING]
        return _converted(
            pq.read_table(self.path, columns=list(columns), read_dictionary=strings or None)
        )

    def read(self, columns, levels_only=()):
        # A few columns at a time (about READ_BYTES of numbers): a read's Arrow buffers, and the
        # casts of decimal and view columns, are then never held for every column at once, and a
        # file of many short columns is not opened once a column. Numbers may stay in Arrow's
        # buffers (pandas views them): whoever drops them hands them back
        # (release_arrow_memory). Strings read for their levels come by dictionary: codes and
        # the distinct strings, as Parquet stores them.
        columns = list(columns)
        step = max(1, READ_BYTES // (8 * max(self.nrows, 1)))
        read = {}
        for at in range(0, len(columns), step):
            piece = arrow_to_pandas(self._arrow(columns[at : at + step], levels_only))
            read.update((column, piece[column]) for column in columns[at : at + step])
        return pd.DataFrame(read, columns=columns, index=pd.RangeIndex(self.nrows), copy=False)

    def pandas_dtype(self, column):
        # pyarrow's conversion depends on the type and on whether the column holds a null (an
        # int column with nulls becomes float64): the row groups' null counts say which where the
        # file has them (no read); else one present and one null value are read and converted
        if column not in self._dtypes:
            field = self.schema.field(column)
            # (a dictionary column's dtype holds its levels: read)
            nulls = None if pa.types.is_dictionary(field.type) else self._has_nulls(column)
            if nulls is None:
                array = self._arrow([column]).column(0)
                valid = np.asarray(array.is_valid())
                hits = (np.flatnonzero(valid), np.flatnonzero(~valid))
                array = array.take(pa.array([hit[0] for hit in hits if len(hit)], type=pa.int64()))
            else:
                array = _converted(pa.table({column: pa.nulls(int(nulls), field.type)})).column(0)
            self._dtypes[column] = array.to_pandas().dtype
        return self._dtypes[column]

    def representatives(self, column, referenced=None):
        return series_representatives(self.read([column])[column], referenced)

    def read_rows(self, columns, rows):
        return arrow_to_pandas(
            self._arrow(columns).take(pa.array(np.asarray(rows, dtype=np.int64)))
        )

    def describe(self):
        return {"kind": "parquet", "path": os.path.abspath(self.path)}

    def write_parquet(self, path):
        shutil.copyfile(self.path, path)


def _converted(table):
    """A table read from Parquet with decimals as float64 and view types as large ones."""
    for position, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type):
            table = table.set_column(
                position, field.name, table.column(position).cast(pa.float64())
            )
        elif _is_view(field.type):  # pyarrow cannot take() rows of string_view (tpchgen's)
            table = table.set_column(
                position,
                field.name,
                table.column(position).cast(
                    pa.large_string() if pa.types.is_string_view(field.type) else pa.large_binary()
                ),
            )
    return table


def _in_rowid_order(rowid, series):
    """A column read from DuckDB, its rows put in rowid order (a scan may return them otherwise)."""
    if not np.array_equal(rowid, np.arange(len(rowid))):
        series = series.take(np.argsort(rowid, kind="stable"))
    return series.reset_index(drop=True)


def release_arrow_memory():
    """Hand what Arrow's memory pool holds unused back to the OS.

    Arrow's pool (mimalloc or jemalloc) keeps freed memory for reuse, so the buffers of a Parquet
    read, which pandas views, would otherwise stay resident for the rest of the process, through
    a whole fit. Called wherever such columns are dropped: it is cheap, and next to nothing where
    nothing is unused.
    """
    pa.default_memory_pool().release_unused()


def arrow_to_pandas(table):
    """A DataFrame of an Arrow table read from a file for it alone: each column's Arrow buffers
    freed once converted (those pandas does not view) and handed back
    (:func:`release_arrow_memory`); rows in the file's order and every column of the table a
    column under its own name, whatever index the file's pandas metadata names
    (:func:`_without_pandas_index`).

    Parameters
    ----------
    table : pyarrow.Table
        Read for this conversion alone (it is emptied).

    Returns
    -------
    pandas.DataFrame
    """
    table = _without_pandas_index(table)
    names = table.column_names
    frame = table.to_pandas(self_destruct=True)
    del table
    release_arrow_memory()
    frame.columns = names  # pandas metadata may name a column otherwise (an unnamed index: None)
    return frame


def _without_pandas_index(table):
    """The table with no index in its pandas metadata, the dtypes kept: a file written from a
    DataFrame may name an index (a column of the file, or a range) that pandas would make the
    frame's index, taking the column out of the frame and numbering the rows from its start;
    a source's rows are positions, and each of its columns a column."""
    metadata = table.schema.metadata or {}
    if b"pandas" not in metadata:
        return table
    described = json.loads(metadata[b"pandas"])
    if not described.get("index_columns"):
        return table
    described["index_columns"] = []
    return table.replace_schema_metadata({**metadata, b"pandas": json.dumps(described).encode()})


def _is_view(pa_type):
    """Arrow's string_view and binary_view (pyarrow >= 16)."""
    return getattr(pa.types, "is_string_view", lambda t: False)(pa_type) or getattr(
        pa.types, "is_binary_view", lambda t: False
    )(pa_type)


_DUCKDB_KINDS = [
    (re.compile(r"^(U?(TINY|SMALL|BIG|HUGE)?INT(EGER)?|FLOAT|DOUBLE|REAL|DECIMAL.*)$"), NUMERIC),
    (re.compile(r"^BOOLEAN$"), BOOL),
    (re.compile(r"^(VARCHAR|ENUM.*)$"), STRING),
    (re.compile(r"^(DATE|TIME.*|INTERVAL)$"), DATETIME),
    (re.compile(r"^\"?NULL\"?$"), EMPTY),
]
_INTEGER = re.compile(r"^U?(TINY|SMALL|BIG)?INT(EGER)?$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)?$")
_temp_names = itertools.count()


def _quote(identifier):
    return '"' + str(identifier).replace('"', '""') + '"'


class DuckDBSource(Source):
    """A table in a DuckDB connection; rows are numbered by DuckDB's ``rowid``.

    The rows are those of the moment the source is made: index vectors point at row numbers, so
    a row deleted, inserted or updated in the database afterwards would pair keys with the wrong
    rows. A query, a view or a table of a writable database is therefore copied into a temporary
    DuckDB table first (a snapshot, which stays inside DuckDB); only a table of a database
    opened read-only -- which nothing can change while it is open -- is used in place (copied
    too if its rowids are not 0..n-1). The data never leaves DuckDB unless ``read`` asks for it.

    Parameters
    ----------
    connection : duckdb.DuckDBPyConnection
        The connection that holds the table.
    table_or_query : str
        A table name (optionally ``schema.table``) or a SQL query.
    name : str
        The source's name.

    Raises
    ------
    ValueError
        If DuckDB cannot read the table or query.
    """

    def __init__(self, connection, table_or_query, name):
        self.connection = connection
        self.name = name
        text = str(table_or_query).strip()
        if _IDENTIFIER.match(text):
            self.table = ".".join(_quote(part) for part in text.split("."))
            read_only = self._read_only_base_table(text)
            if read_only is None:  # a view (a name is never run as SQL text)
                self.table = self._copy(f"SELECT * FROM {self.table}")
            elif not read_only or not self._rowids_dense():  # a snapshot (see the docstring)
                self.table = self._copy(f"SELECT * FROM {self.table} ORDER BY rowid")
        else:
            self.table = self._copy(text)
        self.query = text
        described = connection.sql(f"DESCRIBE {self.table}").fetchall()
        self.columns = [row[0] for row in described]
        self._types = {row[0]: row[1] for row in described}
        self._dtypes = {}
        self.nrows = self._scalar(f"SELECT count(*) FROM {self.table}")

    def _read_only_base_table(self, text):
        """Whether the base table of this name lives in a database opened read-only (every one
        holding such a table); None if no base table has the name (a view)."""
        *schema, table = text.split(".")
        query = (
            "SELECT bool_and(d.readonly) FROM duckdb_tables() t "
            "JOIN duckdb_databases() d USING (database_name) WHERE t.table_name = ?"
        )
        params = [table]
        if schema:
            query += " AND t.schema_name = ?"
            params += schema
        return self._scalar(query, params)

    def _rowids_dense(self):
        count, low, high = self.connection.execute(
            f"SELECT count(*), min(rowid), max(rowid) FROM {self.table}"
        ).fetchall()[0]
        return count == 0 or (low == 0 and high == count - 1)

    def _scalar(self, query, params=()):
        # fetchall drains the result: DuckDB 2 refuses new work on a half-read execute()
        return self.connection.execute(query, list(params)).fetchall()[0][0]

    def _copy(self, query):
        table = _quote(f"__ilargi_source_{os.getpid()}_{next(_temp_names)}")
        try:
            self.connection.execute(f"CREATE TEMP TABLE {table} AS {query}")
        except Exception as error:  # duckdb raises many error classes; name the table in every one
            raise ValueError(
                f"table {self.name!r}: DuckDB could not read {query!r}: {error}"
            ) from error
        return table

    def dtype(self, column):
        return self._types[column]

    def representatives(self, column, referenced=None):
        # SQL columns hold one type: a present row and a missing one tell it all (``referenced``
        # is not applied: it would pull the index vector into DuckDB)
        missing = f"{_quote(column)} IS NULL" + (
            f" OR isnan({_quote(column)})" if self.is_float(column) else ""
        )
        first = self.connection.execute(
            f"SELECT min(rowid) FILTER (WHERE NOT ({missing})), min(rowid) FILTER (WHERE {missing}) "
            f"FROM {self.table}"
        ).fetchall()[0]
        return np.array(sorted(row for row in first if row is not None), dtype=np.int64)

    def pandas_dtype(self, column):
        # DuckDB's conversion depends on the values (VARCHAR: str, or object when all NULL)
        if column not in self._dtypes:
            self._dtypes[column] = self.read_rows([column], self.representatives(column))[
                column
            ].dtype
        return self._dtypes[column]

    def read_rows(self, columns, rows):
        rows = np.asarray(rows, dtype=np.int64)
        selected = ", ".join(["rowid AS __ilargi_rowid"] + [_quote(c) for c in columns])
        wanted = ", ".join(map(str, np.unique(rows))) or "NULL"
        frame = self.connection.sql(
            f"SELECT {selected} FROM {self.table} WHERE rowid IN ({wanted})"
        ).df()
        position = pd.Index(frame.pop("__ilargi_rowid").to_numpy()).get_indexer(rows)
        return frame.take(position).reset_index(drop=True)

    def kind(self, column):
        kind_name = self._types[column]
        return next(
            (kind for pattern, kind in _DUCKDB_KINDS if pattern.match(kind_name)), UNSUPPORTED
        )

    def is_float(self, column):
        """Whether a column holds floating-point values (which may be NaN).

        Parameters
        ----------
        column : str
            A column of the table.

        Returns
        -------
        bool
            True for FLOAT, DOUBLE and REAL columns.
        """
        return self._types[column] in ("FLOAT", "DOUBLE", "REAL")

    def read(self, columns, levels_only=()):
        # One column at a time, so that the conversions never hold every column at once. Strings
        # read for their levels come through Arrow, dictionary-encoded there: DuckDB's pandas
        # conversion would build a Python string for every row.
        return pd.DataFrame(
            {
                column: (
                    self._levels(column)
                    if column in levels_only and self.kind(column) == STRING
                    else self._column(column)
                )
                for column in columns
            },
            columns=list(columns),
            index=pd.RangeIndex(self.nrows),
            copy=False,
        )

    def _select(self, column):
        return f"SELECT rowid AS __ilargi_rowid, {_quote(column)} FROM {self.table}"

    def _column(self, column):
        frame = self.connection.sql(self._select(column)).df()
        return _in_rowid_order(frame.pop("__ilargi_rowid").to_numpy(), frame[column])

    def _levels(self, column):
        result = self.connection.sql(self._select(column)).arrow()
        table = result.read_all() if isinstance(result, pa.RecordBatchReader) else result
        rowid = table.column(0).to_numpy()
        codes = pc.dictionary_encode(table.column(1))
        del table, result
        series = pd.Series(codes.to_pandas(), name=column)
        release_arrow_memory()
        return _in_rowid_order(rowid, series)

    def describe(self):
        return {"kind": "duckdb", "query": self.query}

    def write_parquet(self, path):
        target = str(path).replace("'", "''")
        self.connection.execute(
            f"COPY (SELECT * FROM {self.table} ORDER BY rowid) TO '{target}' (FORMAT parquet)"
        )


def duckdb_codes(pieces, sort):
    """Jointly factorize key columns that all live in one DuckDB connection, inside DuckDB.

    Integer keys with a range not much wider than their count are coded ``key - min`` (sorted, no
    dictionary). Other keys get codes in a DuckDB temporary table of the distinct keys (GROUP BY),
    joined with each key column. Either way only ``(rowid, code)`` int64 vectors leave DuckDB.

    Parameters
    ----------
    pieces : list of (DuckDBSource, str)
        The key columns.
    sort : bool
        Codes follow the sorted order of the keys (what an outer join needs).

    Returns
    -------
    codes : list of ndarray
        Per piece, the int64 code of each source row (-1 for NULL/NaN).
    count : int
        The size of the code space.
    """
    connection = pieces[0][0].connection
    union = " UNION ALL ".join(f"SELECT {_quote(c)} AS k FROM {s.table}" for s, c in pieces)
    if all(_INTEGER.match(source.dtype(column)) for source, column in pieces):
        low, high, total = connection.execute(
            f"SELECT min(k), max(k), count(*) FROM ({union})"
        ).fetchall()[0]
        if low is None:
            return [np.full(source.nrows, -1, dtype=np.int64) for source, _ in pieces], 0
        if high - low <= 2 * total + 1024:
            codes = [
                _pull_codes(
                    connection,
                    f"SELECT rowid, coalesce({_quote(column)} - {low}, -1)::BIGINT "
                    f"FROM {source.table}",
                    source.nrows,
                )
                for source, column in pieces
            ]
            return codes, high - low + 1
    floats = any(source.is_float(column) for source, column in pieces)
    not_nan = " AND NOT isnan(k)" if floats else ""
    order = "ORDER BY k" if sort else ""
    dictionary = _quote(f"__ilargi_keys_{os.getpid()}_{next(_temp_names)}")
    connection.execute(
        f"CREATE TEMP TABLE {dictionary} AS SELECT k, (row_number() OVER ({order}) - 1)::BIGINT AS code"
        f" FROM (SELECT k FROM ({union}) WHERE k IS NOT NULL{not_nan} GROUP BY k)"
    )
    try:
        count = connection.execute(f"SELECT count(*) FROM {dictionary}").fetchall()[0][0]
        # an inner join: rows whose key is NULL or NaN find no code and keep -1
        codes = [
            _pull_codes(
                connection,
                f"SELECT s.rowid, d.code FROM {source.table} s "
                f"JOIN {dictionary} d ON s.{_quote(column)} = d.k",
                source.nrows,
            )
            for source, column in pieces
        ]
    finally:
        connection.execute(f"DROP TABLE IF EXISTS {dictionary}")
    return codes, count


def _pull_codes(connection, query, nrows):
    """Scatter the ``(rowid, code)`` rows of ``query`` into a code vector (-1 where none came)."""
    codes = np.full(nrows, -1, dtype=np.int64)
    for batch in connection.sql(query).to_arrow_reader(1 << 20):  # batches: never all pairs at once
        codes[batch.column(0).to_numpy()] = batch.column(1).to_numpy()
    return codes


@dataclass(frozen=True, eq=False)
class Slot:
    """One source table placed in a joined table.

    Parameters
    ----------
    source : Source
        The source table.
    rows : ndarray of int64 or None
        ``rows[i]`` is the source row at joined row ``i`` (-1: absent); None is the identity.
    name : str
        The name of this placement (unique within the joined table).
    nan_missing : bool, default=False
        Missing values read through this placement show as NaN in object columns: the placement
        fills a merged key from the right side, which pandas does with the left key's missing value.
    """

    source: object
    rows: np.ndarray | None
    name: str
    nan_missing: bool = False

    def row_vector(self, nrows):
        """The index vector, with the identity spelled out.

        Parameters
        ----------
        nrows : int
            Rows of the joined table.

        Returns
        -------
        ndarray of int64
            ``rows``, or ``arange(nrows)`` for the identity.
        """
        return np.arange(nrows, dtype=np.int64) if self.rows is None else self.rows


def unique_name(name, taken):
    """A name not taken yet, which is then taken.

    Parameters
    ----------
    name : str
        The wanted name.
    taken : set of str
        Names in use; the result is added.

    Returns
    -------
    str
        ``name``, or ``name_2``, ``name_3``, ... if taken.

    Examples
    --------
    >>> from ilargi.table.sources import unique_name
    >>> taken = {"dim"}
    >>> unique_name("dim", taken), unique_name("dim", taken), sorted(taken)
    ('dim_2', 'dim_3', ['dim', 'dim_2', 'dim_3'])
    """
    candidate, number = name, 2
    while candidate in taken:
        candidate, number = f"{name}_{number}", number + 1
    taken.add(candidate)
    return candidate
