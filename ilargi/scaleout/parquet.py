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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ilargi.table.sources import arrow_kind, arrow_to_pandas

from .options import parse_bytes, rows_per_partition


def _files(path):
    if isinstance(path, (list, tuple)):
        files = [os.fspath(p) for p in path]
    else:
        path = os.fspath(path)
        files = (
            sorted(glob.glob(os.path.join(path, "*.parquet")))
            if os.path.isdir(path)
            else (sorted(glob.glob(path)) if any(ch in path for ch in "*?[") else [path])
        )
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
        self.row_groups = []  # per file: list of (first row, rows, bytes)
        self.schema = None
        for file in self.files:
            try:
                meta = pq.ParquetFile(file).metadata
                schema = pq.read_schema(file)
            except (OSError, pa.ArrowException) as error:
                raise ValueError(
                    f"table {name!r}: cannot read the Parquet file {file}: {error}"
                ) from error
            if self.schema is None:
                self.schema = schema
            elif schema.names != self.schema.names:
                raise ValueError(
                    f"table {name!r}: {file} has columns {schema.names}, the first "
                    f"file {self.schema.names}"
                )
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
        (a string with its unit such as ``"128MiB"``, of the row groups' uncompressed size); the
        rules of :mod:`ilargi.scaleout.options`."""
        out = []
        rows = rows_per_partition(chunks, parquet=True)
        if isinstance(chunks, str) and chunks == "row_groups":
            for f, groups in enumerate(self.row_groups):
                out += [(f, start, start + count) for start, count, _ in groups if count]
        elif rows is not None:
            for f, groups in enumerate(self.row_groups):
                total = sum(count for _, count, _ in groups)
                out += [(f, start, min(start + rows, total)) for start in range(0, total, rows)]
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
        groups = [
            g
            for g, (first, rows, _) in enumerate(self.row_groups[f])
            if first < stop and first + rows > start
        ]
        if not groups or stop <= start:
            return arrow_to_pandas(_convert(self.schema.empty_table().select(columns)))
        table = pq.ParquetFile(self.files[f]).read_row_groups(groups, columns=columns)
        offset = self.row_groups[f][groups[0]][0]
        return arrow_to_pandas(_convert(table.slice(start - offset, stop - start)))

    def sample(self, column, size=64):
        """A few values of a column as the table's pandas dtype (read on the client): its first
        ``size`` rows, and a missing value where a footer counts one, as
        ``pandas.read_parquet`` of the whole table would type them (an integer column with a
        missing value reads as float64).

        Parameters
        ----------
        column : str
        size : int
            Rows to read at most.

        Returns
        -------
        pandas.Series
        """
        field = self.schema.field(column)
        arrays, missing = [], False
        for f, file in enumerate(self.files):
            meta = pq.ParquetFile(file).metadata
            position = meta.schema.names.index(column)
            for g in range(meta.num_row_groups):
                # a footer without a null count (no writer we know of) counts as none: reading
                # the column to find out is what a ChunkedTable never does on the client
                stats = meta.row_group(g).column(position).statistics
                missing |= (
                    meta.row_group(g).num_rows > 0
                    and stats is not None
                    and stats.has_null_count
                    and stats.null_count > 0
                )
            if not arrays and self.row_groups[f] and sum(r for _, r, _ in self.row_groups[f]):
                batch = next(pq.ParquetFile(file).iter_batches(batch_size=size, columns=[column]))
                arrays.append(batch.column(0).cast(field.type))
        if missing:
            arrays.append(pa.nulls(1, field.type))
        values = pa.chunked_array(arrays, type=field.type)
        frame = arrow_to_pandas(_convert(pa.table({column: values})))
        return frame[column]

    def key_ranges(self, column):
        """Per file and row group, (min, max, may hold missing keys) of a numeric column from the
        footer (None where the file has no min and max)."""
        out = []
        for file in self.files:
            meta = pq.ParquetFile(file).metadata
            position = meta.schema.names.index(column)
            ranges = []
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(position).statistics
                nulls = stats is None or not stats.has_null_count or stats.null_count > 0
                ranges.append(
                    (stats.min, stats.max, nulls)
                    if stats is not None and stats.has_min_max
                    else None
                )
            out.append(ranges)
        return out

    def read_range(self, key, lo, hi, columns, ranges, missing=False):
        """The rows whose ``key`` lies in [lo, hi] (and, with ``missing``, those whose key is
        missing, which a missing foreign key matches), only ``columns`` (``ranges``: the
        :meth:`key_ranges` of ``key``; row groups outside them are not read)."""
        columns = list(dict.fromkeys([key] + list(columns)))
        tables = []
        for f, file in enumerate(self.files):
            groups = [
                g
                for g, bounds in enumerate(ranges[f])
                if bounds is None
                or not (bounds[1] < lo or bounds[0] > hi)
                or (missing and bounds[2])
            ]
            if groups:
                tables.append(pq.ParquetFile(file).read_row_groups(groups, columns=columns))
        if not tables:
            return arrow_to_pandas(_convert(self.schema.empty_table().select(columns)))
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        frame = arrow_to_pandas(_convert(table))
        values = frame[key].to_numpy(dtype=np.float64, na_value=np.nan)
        keep = (values >= lo) & (values <= hi)
        if missing:
            keep |= np.isnan(values)
        return frame if keep.all() else frame.loc[keep].reset_index(drop=True)


def _convert(table):
    """Decimals as float64 (as :class:`ilargi.table.sources.ParquetSource` reads them)."""
    for position, field in enumerate(table.schema):
        if pa.types.is_decimal(field.type):
            table = table.set_column(
                position, field.name, table.column(position).cast(pa.float64())
            )
    return table
