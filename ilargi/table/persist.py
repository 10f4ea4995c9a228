"""Save and load a Table's join metadata in the core's format (:class:`ilargi.metadata.Metadata`).

Each slot is one part: its index vector is the part's ``rows`` and the target positions of the source
columns it provides are the part's ``cols`` (a Table's slots already satisfy the core's invariants:
injective mappings, row-disjoint coverage). What the core format has no field for -- which source
table each slot reads, the source column names, the original column labels -- goes into ``extra``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ilargi.metadata import Metadata

from .dtypes import CommonDtype, SourceDtype, WithMissing
from .sources import DuckDBSource, FrameSource, ParquetSource, Slot, unique_name

FORMAT = "ilargi-table"


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
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    sources, keys = [], {}
    for index in range(len(table.tables)):
        source = table.slot(index).source
        if id(source) not in keys:
            keys[id(source)] = len(sources)
            sources.append(source)
    taken = set()
    names = [unique_name(source.name, taken) for source in sources]
    descriptors = [_write(source, name, folder) if with_sources else {"name": name, **source.describe()}
                   for source, name in zip(sources, names)]
    for descriptor, source in zip(descriptors, sources):
        descriptor["nrows"] = int(source.nrows)
    position = {column: i for i, column in enumerate(table.columns)}
    slots, cols, shapes, rows = [], [], [], []
    for index, name in enumerate(table.tables):
        slot = table.slot(index)
        provided = [(position[column], source_column) for column in table.columns
                    for piece_slot, source_column in table.column_pieces(column) if piece_slot == index]
        slots.append({"source": keys[id(slot.source)], "columns": [c for _, c in provided]})
        cols.append(np.array([target for target, _ in provided], dtype=np.int64))
        shapes.append((slot.source.nrows, len(provided)))
        rows.append(slot.rows)
    extra = {"format": FORMAT, "name": table.name, "labels": table.columns, "sources": descriptors,
             "slots": slots}
    Metadata(table.shape, table.tables, shapes, rows, cols, [str(c) for c in table.columns],
             extra=extra).save(folder)


def _write(source, name, folder):
    """Write a source as Parquet under ``folder/sources``; returns its descriptor (relative path)."""
    directory = folder / "sources"
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.parquet"
    source.write_parquet(path)
    return {"name": name, "kind": "parquet", "path": str(path.relative_to(folder))}


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
    extra = metadata.extra
    if extra.get("format") != FORMAT:
        raise ValueError(f"{folder} holds ilargi metadata but not a saved Table (use NormalizedMatrix.load)")
    sources = [_open(descriptor, folder, given, table_class) for descriptor in extra["sources"]]
    slots, pieces = [], {}
    for slot_info, name, rows, cols in zip(extra["slots"], metadata.names, metadata.rows, metadata.cols):
        source = sources[slot_info["source"]]
        missing = [c for c in slot_info["columns"] if c not in source.columns]
        if missing:
            raise ValueError(f"source {source.name!r} lacks columns {missing} that the saved table uses")
        for target, source_column in zip(cols, slot_info["columns"]):
            pieces.setdefault(int(target), []).append((len(slots), source_column))
        slots.append(Slot(source, rows, name))
    labels = extra["labels"]
    columns = {label: tuple(pieces[i]) for i, label in enumerate(labels)}
    return table_class._assemble(extra["name"], slots, columns, metadata.shape[0],
                                 {label: _derived_dtype(slots, columns[label]) for label in labels})


def _derived_dtype(slots, pieces):
    """A loaded column's dtype: its sources' dtypes, promoted where rows are missing."""
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
        path = Path(descriptor["path"])
        value = path if path.is_absolute() else folder / path
    if value is None:
        what = f"the DuckDB query {descriptor['query']!r}" if kind == "duckdb" else "a DataFrame"
        raise ValueError(f"Table.load needs its source {name!r} ({what}, not saved): pass "
                         f"sources={{{name!r}: ...}}, or save with sources=True")
    source = _source_of(value, name, descriptor, table_class)
    if source.nrows != descriptor["nrows"]:
        raise ValueError(f"source {name!r} has {source.nrows} rows; the saved table expects "
                         f"{descriptor['nrows']}")
    return source


def _source_of(value, name, descriptor, table_class):
    if isinstance(value, table_class):
        if len(value.tables) != 1 or value.slot(0).rows is not None:
            raise ValueError(f"source {name!r} must be a single, unjoined Table")
        return value.slot(0).source
    if isinstance(value, pd.DataFrame):
        return FrameSource(value, name)
    if isinstance(value, (str, Path)):
        return ParquetSource(value, name)
    if hasattr(value, "sql") and descriptor["kind"] == "duckdb":
        return DuckDBSource(value, descriptor["query"], name)
    raise TypeError(f"source {name!r}: expected a DataFrame, a Parquet path, a Table or a DuckDB "
                    f"connection, got {type(value).__name__}")
