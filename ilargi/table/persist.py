"""Save and load a Table's join metadata in the core's format (:class:`ilargi.metadata.Metadata`).

Each slot is one part: its index vector is the part's ``rows`` and the target positions of the source
columns it provides are the part's ``cols`` (a Table's slots already satisfy the core's invariants:
injective mappings, row-disjoint coverage). What the core format has no field for -- which source
table each slot reads, the source column names, the original column labels, the columns' dtypes --
goes into ``extra``.

Files are data, never instructions:

* a table's name never becomes a path: sources saved with ``sources=True`` go to
  ``folder/sources/<safe name>.parquet``, where the safe name keeps letters, digits, ``-`` and ``_``
  of the table's name (anything else, ``..`` and path separators included, becomes ``_``), is never
  empty or a reserved device name, and is unique in the folder even on a case-insensitive file
  system; on load, a saved path is read only as a member of the folder (inside it; a link only to a
  file inside it), and an absolute one -- the reference ``save(sources=False)`` writes to a
  caller's own Parquet file -- is never read from the file: the caller passes that source;
* a save is written into a private folder beside the target and put in its place as a whole
  (:func:`ilargi.metadata.saving.staged`): nothing goes through a link found in the target, and no
  member of an earlier save stays behind;
* a DuckDB source is saved as its query text, for information only: ``Table.load`` never runs SQL
  read from a file. The caller passes the source (a DataFrame, a Table such as
  ``Table.from_duckdb(connection, query)``, or a ``(connection, table_or_query)`` pair of their own);
  a bare connection is accepted only when the saved text is a plain table name, which is then read
  through quoted identifiers, never as SQL;
* everything read back is checked against the header (:meth:`Metadata.load` for the arrays, here for
  the table layout), with errors naming the file and the field.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ilargi.metadata import Metadata
from ilargi.metadata.io import member

from .dtypes import CommonDtype, Fixed, SourceDtype, WithMissing
from .sources import DuckDBSource, FrameSource, ParquetSource, Slot, unique_name

FORMAT = "ilargi-table"
KINDS = ("frame", "parquet", "duckdb")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_RESERVED = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"com{i}" for i in range(10)),
    *(f"lpt{i}" for i in range(10)),
}
_PLAIN_TABLE = re.compile(r"^[A-Za-z_][\w$]*(\.[A-Za-z_][\w$]*)?$")


def safe_file_name(name, taken):
    """A file name for a source named ``name``: safe characters only, unique ignoring case.

    Parameters
    ----------
    name : str
        The source's name (any text).
    taken : set of str
        Lower-cased names in use; the result's lower-cased form is added.

    Returns
    -------
    str
        The name without suffix.

    Examples
    --------
    >>> from ilargi.table.persist import safe_file_name
    >>> taken = set()
    >>> [safe_file_name(n, taken) for n in ["../../x", "/etc/passwd", "Sales", "sales", "", "con"]]
    ['x', 'etc_passwd', 'Sales', 'sales_2', 'source', '_con']
    """
    stem = _UNSAFE.sub("_", str(name)).strip("_")[:80] or "source"
    if stem.lower() in _RESERVED:
        stem = f"_{stem}"
    candidate, number = stem, 2
    while candidate.lower() in taken:
        candidate, number = f"{stem}_{number}", number + 1
    taken.add(candidate.lower())
    return candidate


def save_table(table, folder, with_sources):
    """Write a Table's metadata (and sources): the work of :meth:`ilargi.Table.save`.

    Parameters
    ----------
    table : Table
        The table to save.
    folder : str or path-like
        Created if needed.
    with_sources : bool
        Also write every source as Parquet under ``folder/sources``.
    """
    check_savable_labels(table, with_sources)  # before anything is written
    folder = Path(folder)
    sources, keys = [], {}
    for index in range(len(table.tables)):
        source = table.slot(index).source
        if id(source) not in keys:
            keys[id(source)] = len(sources)
            sources.append(source)
    taken, files = set(), set()
    names = [unique_name(source.name, taken) for source in sources]
    descriptors = [
        {"name": name, "kind": "parquet", "path": f"sources/{safe_file_name(name, files)}.parquet"}
        if with_sources
        else {"name": name, **source.describe()}
        for source, name in zip(sources, names)
    ]
    for descriptor, source in zip(descriptors, sources):
        descriptor["nrows"] = int(source.nrows)
    position = {column: i for i, column in enumerate(table.columns)}
    slots, cols, shapes, rows = [], [], [], []
    for index, name in enumerate(table.tables):
        slot = table.slot(index)
        provided = [
            (position[column], source_column)
            for column in table.columns
            for piece_slot, source_column in table.column_pieces(column)
            if piece_slot == index
        ]
        slots.append(
            {
                "source": keys[id(slot.source)],
                "columns": [c for _, c in provided],
                "nan_missing": bool(slot.nan_missing),
            }
        )
        cols.append(np.array([target for target, _ in provided], dtype=np.int64))
        shapes.append((slot.source.nrows, len(provided)))
        rows.append(slot.rows)
    extra = {
        "format": FORMAT,
        "name": table.name,
        "labels": table.columns,
        "sources": descriptors,
        "slots": slots,
        "dtypes": [_dtype_text(dtype) for dtype in table.dtypes],
    }

    def write(stage):  # the sources into the save's private staging folder
        if with_sources:
            (stage / "sources").mkdir()
            for source, descriptor in zip(sources, descriptors):
                source.write_parquet(stage / descriptor["path"])

    Metadata(
        table.shape, table.tables, shapes, rows, cols, [str(c) for c in table.columns], extra=extra
    ).save(folder, write=write)


def _dtype_text(dtype):
    """A dtype as text when the text gives it back (not categoricals: their categories are lost)."""
    try:
        return str(dtype) if pd.api.types.pandas_dtype(str(dtype)) == dtype else None
    except TypeError:
        return None


def load_table(table_class, folder, given):
    """Read a saved Table back: the work of :meth:`ilargi.Table.load`.

    Parameters
    ----------
    table_class : type
        The Table class.
    folder : str or path-like
        The folder :func:`save_table` wrote.
    given : dict
        Source name to data, for the sources not saved beside the metadata.

    Returns
    -------
    Table
        The saved table.
    """
    folder = Path(folder)
    metadata = Metadata.load(folder)
    layout = _Layout(folder / "metadata.json", metadata)
    sources = [_open(descriptor, folder, given, table_class) for descriptor in layout.sources]
    slots, pieces = [], {}
    for p, (slot_info, name, rows, cols) in enumerate(
        zip(layout.slots, metadata.names, metadata.rows, metadata.cols)
    ):
        source = sources[slot_info["source"]]
        if metadata.source_shapes[p][0] != source.nrows:
            raise ValueError(
                f"{layout.path}: part {name!r} records {metadata.source_shapes[p][0]} source rows, "
                f"but its source {source.name!r} has {source.nrows}"
            )
        missing = [c for c in slot_info["columns"] if c not in source.columns]
        if missing:
            raise ValueError(
                f"source {source.name!r} lacks columns {missing} that the saved table uses"
            )
        for target, source_column in zip(cols, slot_info["columns"]):
            pieces.setdefault(int(target), []).append((len(slots), source_column))
        slots.append(Slot(source, rows, name, slot_info.get("nan_missing", False)))
    columns = {label: tuple(pieces.get(i, ())) for i, label in enumerate(layout.labels)}
    layout.check_coverage(columns, slots, metadata.shape[0])
    dtypes = {
        label: layout.dtype(i) or _derived_dtype(slots, columns[label])
        for i, label in enumerate(layout.labels)
    }
    return table_class._assemble(layout.name, slots, columns, metadata.shape[0], dtypes)


class _Layout:
    """The table layout in ``extra``, checked field by field (errors name the file and the field)."""

    def __init__(self, path, metadata):
        self.path = path
        extra = metadata.extra
        if extra.get("format") != FORMAT:
            raise ValueError(
                f"{path.parent} holds ilargi metadata but not a saved Table (use NormalizedMatrix.load)"
            )
        n_parts, d = len(metadata.names), metadata.shape[1]
        self.name = self._field(extra, "name", str)
        self.labels = self._field(extra, "labels", list)
        if len(self.labels) != d:
            raise ValueError(
                f"{path}: field 'extra.labels' has {len(self.labels)} labels for {d} columns"
            )
        self.sources = self._field(extra, "sources", list)
        for i, descriptor in enumerate(self.sources):
            where = f"extra.sources[{i}]"
            self._field(descriptor, "name", str, where)
            kind = self._field(descriptor, "kind", str, where)
            if kind not in KINDS:
                raise ValueError(
                    f"{path}: field '{where}.kind' is {kind!r}; expected one of {KINDS}"
                )
            nrows = self._field(descriptor, "nrows", int, where)
            if nrows < 0:
                raise ValueError(f"{path}: field '{where}.nrows' is negative")
            if kind == "parquet":
                self._field(descriptor, "path", str, where)
            if kind == "duckdb":
                self._field(descriptor, "query", str, where)
        self.slots = self._field(extra, "slots", list)
        if len(self.slots) != n_parts:
            raise ValueError(
                f"{path}: field 'extra.slots' has {len(self.slots)} entries for {n_parts} parts"
            )
        for p, (slot, cols) in enumerate(zip(self.slots, metadata.cols)):
            where = f"extra.slots[{p}]"
            source = self._field(slot, "source", int, where)
            if not 0 <= source < len(self.sources):
                raise ValueError(
                    f"{path}: field '{where}.source' is {source}; there are {len(self.sources)} sources"
                )
            columns = self._field(slot, "columns", list, where)
            if len(columns) != len(cols):
                raise ValueError(
                    f"{path}: field '{where}.columns' names {len(columns)} columns but the "
                    f"part maps {len(cols)}"
                )
        self.dtypes = extra.get("dtypes")
        if self.dtypes is not None and (not isinstance(self.dtypes, list) or len(self.dtypes) != d):
            raise ValueError(f"{path}: field 'extra.dtypes' must be a list of {d} dtypes")

    def _field(self, values, key, kind, where="extra"):
        if not isinstance(values, dict):
            raise ValueError(
                f"{self.path}: field {where!r} must be an object, got {type(values).__name__}"
            )
        if key not in values:
            raise ValueError(f"{self.path}: field '{where}.{key}' is missing")
        value = values[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(
                f"{self.path}: field '{where}.{key}' must be a {kind.__name__}, "
                f"got {type(value).__name__}"
            )
        return value

    def dtype(self, index):
        """The saved dtype of a column, or None (not saved, or not a dtype)."""
        text = None if self.dtypes is None else self.dtypes[index]
        if text is None:
            return None
        try:
            return Fixed(pd.api.types.pandas_dtype(text))
        except (TypeError, ValueError):
            raise ValueError(
                f"{self.path}: field 'extra.dtypes[{index}]' is not a dtype: {text!r}"
            ) from None

    def check_coverage(self, columns, slots, nrows):
        """Every column has pieces, and they cover disjoint rows."""
        for index, (label, pieces) in enumerate(columns.items()):
            if not pieces:
                raise ValueError(
                    f"{self.path}: column {label!r} (target column {index}) is provided by no part"
                )
            if len(pieces) > 1:
                covered = np.zeros(nrows, dtype=np.int64)
                for slot_index, _ in pieces:
                    covered += slots[slot_index].row_vector(nrows) >= 0
                if (covered > 1).any():
                    raise ValueError(
                        f"{self.path}: column {label!r} is provided twice at row "
                        f"{int(np.flatnonzero(covered > 1)[0])}; parts must cover disjoint rows"
                    )


def _derived_dtype(slots, pieces):
    """A loaded column's dtype where none was saved: its sources' dtypes, promoted where rows are
    missing."""
    specs = [SourceDtype(slots[index].source, column) for index, column in pieces]
    uncovered = None
    for index, _ in pieces:
        rows = slots[index].rows
        absent = np.zeros(0, dtype=bool) if rows is None else rows < 0
        uncovered = absent if uncovered is None or rows is None else uncovered & absent
    missing = uncovered is not None and bool(np.asarray(uncovered).any())
    if len(specs) == 1:
        return WithMissing(specs[0]) if missing else specs[0]
    return CommonDtype(specs, missing)


def _open(descriptor, folder, given, table_class):
    name, kind = descriptor["name"], descriptor["kind"]
    value = given.get(name)
    if value is None and kind == "parquet":
        value = _saved_path(folder, descriptor["path"], name)
    if value is None:
        what = f"the DuckDB query {descriptor['query']!r}" if kind == "duckdb" else "a DataFrame"
        raise ValueError(
            f"Table.load needs its source {name!r} ({what}, not saved): pass "
            f"sources={{{name!r}: ...}}, or save with sources=True"
        )
    source = _source_of(value, name, descriptor, table_class)
    if source.nrows != descriptor["nrows"]:
        raise ValueError(
            f"source {name!r} has {source.nrows} rows; the saved table expects "
            f"{descriptor['nrows']}"
        )
    return source


def _saved_path(folder, text, name):
    """A saved Parquet path: a member of the folder (:func:`ilargi.metadata.io.member`: inside it,
    a link only to a file inside it). An absolute path is a reference ``save(sources=False)`` wrote
    to the caller's own file: never read from the file, the caller passes it."""
    if Path(text).is_absolute():
        raise ValueError(
            f"{folder / 'metadata.json'}: source {name!r} was saved as a reference to "
            f"{text!r}, outside {folder}; Table.load reads no file outside its folder "
            f"from what a file says: pass it, sources={{{name!r}: {text!r}}}"
        )
    try:
        return member(folder, text)
    except ValueError as error:
        raise ValueError(
            f"{folder / 'metadata.json'}: the path {text!r} of source {name!r} leads "
            f"outside {folder} or to no regular file ({error}); refusing to read it"
        ) from None


def _source_of(value, name, descriptor, table_class):
    if isinstance(value, table_class):
        if len(value.tables) != 1 or value.slot(0).rows is not None:
            raise ValueError(f"source {name!r} must be a single, unjoined Table")
        return value.slot(0).source
    if isinstance(value, pd.DataFrame):
        return FrameSource(value, name)
    if isinstance(value, (str, Path)):
        return ParquetSource(value, name)
    if isinstance(value, tuple) and len(value) == 2 and hasattr(value[0], "sql"):
        return DuckDBSource(value[0], value[1], name)  # the caller's own connection and query
    if hasattr(value, "sql") and descriptor["kind"] == "duckdb":
        return _stored_duckdb(value, descriptor, name)
    raise TypeError(
        f"source {name!r}: expected a DataFrame, a Parquet path, a Table or a "
        f"(DuckDB connection, table or query) pair, got {type(value).__name__}"
    )


def _stored_duckdb(connection, descriptor, name):
    """A bare connection for a saved DuckDB source: only a plain table name is bound (through
    quoted identifiers); SQL text read from a file is never run."""
    text = descriptor["query"].strip()
    if not _PLAIN_TABLE.match(text):
        raise ValueError(
            f"source {name!r} was the DuckDB query {text!r}; Table.load never runs SQL read from a file. "
            f"Pass the source yourself: sources={{{name!r}: (connection, query)}} or "
            f"{{{name!r}: Table.from_duckdb(connection, query)}}"
        )
    *schema, table = text.split(".")
    query = "SELECT count(*) FROM duckdb_tables() WHERE table_name = ?" + (
        " AND schema_name = ?" if schema else ""
    )
    if connection.execute(query, [table, *schema]).fetchall()[0][0] == 0:
        raise ValueError(
            f"source {name!r}: the connection has no table {text!r}; pass "
            f"sources={{{name!r}: (connection, query)}} to read it another way"
        )
    return DuckDBSource(connection, text, name)


def check_savable_labels(table, with_sources):
    """Refuse, before writing anything, a column label that would not load back as itself.

    ``metadata.json`` keeps the labels of the table and of its sources' columns as JSON: strings,
    integers, finite floats and booleans come back as they were, anything else (a tuple, a NumPy
    scalar, None, NaN, a timestamp) would not, or would not be written. A source saved as
    Parquet (``sources=True``) keeps its column names as text: they must be strings.

    Parameters
    ----------
    table : Table
        The table to save.
    with_sources : bool
        Whether the sources are written as Parquet.

    Raises
    ------
    ValueError
        Naming the column, its table and the reason.
    """
    advice = "rename the columns first, e.g. frame.rename(columns=str)"
    for index, name in enumerate(table.tables):
        slot = table.slot(index)
        used = {
            source_column
            for column in table.columns
            for piece, source_column in table.column_pieces(column)
            if piece == index
        }
        parquet = with_sources and isinstance(slot.source, FrameSource)  # the frame is written
        written = slot.source.columns if parquet else []
        for column in list(used) + [c for c in written if c not in used]:
            if parquet and not isinstance(column, str):
                raise ValueError(
                    f"Table.save(sources=True): column {column!r} of table {name!r} "
                    f"({type(column).__name__}) cannot be saved: Parquet stores column names as "
                    f"text, so it would load back as {str(column)!r}; {advice}, or save with "
                    "sources=False and pass the frame to Table.load"
                )
            _check_json_label(column, f"column {column!r} of table {name!r}", advice)
    for column in table.columns:
        _check_json_label(column, f"column {column!r} of the joined table {table.name!r}", advice)


def _check_json_label(label, where, advice):
    exact = type(label) in (str, int, bool) or (type(label) is float and np.isfinite(label))
    if not exact:
        raise ValueError(
            f"Table.save: {where} ({type(label).__name__}) cannot be saved: "
            "metadata.json keeps str, int, float and bool column labels only (it "
            f"would not load back as the same label); {advice}"
        )
