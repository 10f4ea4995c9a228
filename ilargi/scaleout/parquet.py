"""Parquet files read in partitions of rows, on the workers.

A table may span several files (a file, a folder of ``*.parquet`` files, or a list, in sorted order).
:meth:`ParquetFiles.partitions` cuts it into row ranges that never cross a file: per row group, a
number of rows, or row groups gathered up to a byte size. Only the file footers are read on the
client (row counts, row-group sizes and key statistics); the rows are read by the workers, which
read only the row groups a range needs and only the columns asked for, decimals as float64 as
:class:`ilargi.table.sources.ParquetSource` reads them.

:meth:`ParquetFiles.read_range` reads the rows whose key lies in [lo, hi] -- only the row groups
whose statistics overlap it: how a partition of a fact table finds the rows of a big dimension
that is stored in key order (TPC-H's orders for a range of lineitem).
"""
import glob
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ilargi.table.sources import arrow_kind

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def parse_bytes(text):
    """``"64MiB"`` -> 67108864 (units B, kB, MB, GB, TB and KiB, MiB, GiB, TiB)."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"chunks={text!r} is neither 'row_groups', a number of rows nor a byte "
                         "size such as '128MiB'")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


def _files(path):
    if isinstance(path, (list, tuple)):
        files = [os.fspath(p) for p in path]
    else:
        path = os.fspath(path)
        files = sorted(glob.glob(os.path.join(path, "*.parquet"))) if os.path.isdir(path) else (
            sorted(glob.glob(path)) if any(ch in path for ch in "*?[") else [path])
    if not files:
        raise FileNotFoundError(f"no Parquet files at {path}")
    for file in files:
        if not os.path.isfile(file):
            raise FileNotFoundError(f"no Parquet file {file}")
    return files


class ParquetFiles:
    """One table stored in one or more Parquet files of the same columns.

    Parameters
    ----------
    path : str, path-like or list
        A file, a folder (its ``*.parquet`` files), a glob pattern, or a list of files.
    name : str
        The table's name, for error messages.
    """

    def __init__(self, path, name):
        self.name = name
        self.files = _files(path)
        self.row_groups = []     # per file: list of (first row, rows, bytes)
        self.schema = None
        for file in self.files:
            try:
                meta = pq.ParquetFile(file).metadata
                schema = pq.read_schema(file)
            except (OSError, pa.ArrowException) as error:
                raise ValueError(f"table {name!r}: cannot read the Parquet file {file}: {error}") \
                    from error
            if self.schema is None:
                self.schema = schema
            elif schema.names != self.schema.names:
                raise ValueError(f"table {name!r}: {file} has columns {schema.names}, the first "
                                 f"file {self.schema.names}")
            groups, start = [], 0
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                groups.append((start, group.num_rows, group.total_byte_size))
                start += group.num_rows
            self.row_groups.append(groups)
        self.columns = list(self.schema.names)
        self.nrows = sum(sum(rows for _, rows, _ in groups) for groups in self.row_groups)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["schema"] = self.schema.serialize().to_pybytes()
        return state

    def __setstate__(self, state):
        state["schema"] = pa.ipc.read_schema(pa.py_buffer(state["schema"]))
        self.__dict__.update(state)

    def kind(self, column):
        """The column kind (numeric, string, bool, ...) of :mod:`ilargi.table.sources`."""
        return arrow_kind(self.schema.field(column).type)

    def dtype(self, column):
        return str(self.schema.field(column).type)

    # ------------------------------------------------------------------------------------------
    # Partitions: (file, first row, end row) within one file

    def partitions(self, chunks):
        """Row ranges ``(file, start, stop)``: one per row group (``"row_groups"``), of ``chunks``
        rows (an int; a file's last one takes the rest), or row groups gathered up to a byte size
        (a string such as ``"128MiB"``, of the row groups' uncompressed size)."""
        out = []
        if isinstance(chunks, str) and chunks == "row_groups":
            for f, groups in enumerate(self.row_groups):
                out += [(f, start, start + rows) for start, rows, _ in groups if rows]
        elif isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
            if chunks < 1:
                raise ValueError(f"chunks must be a positive number of rows, got {chunks}")
            for f, groups in enumerate(self.row_groups):
                total = sum(rows for _, rows, _ in groups)
                out += [(f, start, min(start + int(chunks), total))
                        for start in range(0, total, int(chunks))]
        else:
            limit = parse_bytes(chunks)
            for f, groups in enumerate(self.row_groups):
                first = size = 0
                for start, rows, nbytes in groups:
                    if size and size + nbytes > limit:
                        out.append((f, first, start))
                        first, size = start, 0
                    size += nbytes
                end = sum(rows for _, rows, _ in groups)
                if end > first:
                    out.append((f, first, end))
        if not out:
            out = [(0, 0, 0)]
        return out

    # ------------------------------------------------------------------------------------------
    # Reading (on the workers)

    def read(self, partition, columns):
        """The rows of one partition, only ``columns``, as a pandas DataFrame."""
        f, start, stop = partition
        columns = list(dict.fromkeys(columns))
        groups = [g for g, (first, rows, _) in enumerate(self.row_groups[f])
                  if first < stop and first + rows > start]
        if not groups or stop <= start:
            return _convert(self.schema.empty_table().select(columns)).to_pandas()
        table = pq.ParquetFile(self.files[f]).read_row_groups(groups, columns=columns)
        offset = self.row_groups[f][groups[0]][0]
        return _convert(table.slice(start - offset, stop - start)).to_pandas()

    def key_ranges(self, column):
        """Per file and row group, (min, max) of a numeric column from the footer (None where
        the file has no statistics)."""
        out = []
        for file in self.files:
            meta = pq.ParquetFile(file).metadata
            position = meta.schema.names.index(column)
            ranges = []
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(position).statistics
                ranges.append((stats.min, stats.max) if stats is not None and stats.has_min_max
                              else None)
            out.append(ranges)
        return out

    def read_range(self, key, lo, hi, columns, ranges):
        """The rows whose ``key`` lies in [lo, hi], only ``columns`` (``ranges``: the
        :meth:`key_ranges` of ``key``; row groups outside [lo, hi] are not read)."""
        columns = list(dict.fromkeys([key] + list(columns)))
        tables = []
        for f, file in enumerate(self.files):
            groups = [g for g, bounds in enumerate(ranges[f])
                      if bounds is None or not (bounds[1] < lo or bounds[0] > hi)]
            if groups:
                tables.append(pq.ParquetFile(file).read_row_groups(groups, columns=columns))
        if not tables:
            return _convert(self.schema.empty_table().select(columns)).to_pandas()
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        frame = _convert(table).to_pandas()
        values = frame[key].to_numpy()
        keep = (values >= lo) & (values <= hi)
        return frame if keep.all() else frame.loc[keep].reset_index(drop=True)


def _convert(table):
    """Decimals as float64 (as :class:`ilargi.table.sources.ParquetSource` reads them)."""
    for position, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type):
            table = table.set_column(position, field.name, table.column(position).cast(pa.float64()))
    return table
