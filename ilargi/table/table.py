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
    """A joined table described by index vectors over its sources; see the module docstring.

    Parameters
    ----------
    data : pandas.DataFrame
        The source table (held as a shallow copy-on-write copy; never modified).
    name : str, optional
        Names the table in error messages, part names and saved metadata (default ``"table"``).
    """

    def __init__(self, data, name=None):
        name = "table" if name is None else str(name)
        self._set(*_single(FrameSource(data, name)))

    @classmethod
    def from_parquet(cls, path, name=None):
        """A Table over a Parquet file; columns are read only when needed (keys for a merge), as
        ``pandas.read_parquet`` reads them except that decimals become float64."""
        return cls._assemble(*_single(ParquetSource(path, Path(path).stem if name is None else str(name))))

    @classmethod
    def from_duckdb(cls, connection, table_or_query, name=None):
        """A Table over a DuckDB table name or SQL query; its data stays in DuckDB.

        Key matching runs inside DuckDB when both sides of a merge live in the same connection: only
        int64 key codes are pulled out. A query or view is first stored as a temporary DuckDB table.
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
        """Target column labels, in pandas' order."""
        return list(self._columns)

    @property
    def shape(self):
        return self._nrows, len(self._columns)

    def __len__(self):
        return self._nrows

    @property
    def tables(self):
        """Names of the slots (source tables as placed in the join), in order."""
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
        """Join with ``other`` (a Table, possibly joined itself, or a DataFrame) like ``pandas.merge``.

        ``on`` / ``left_on`` / ``right_on`` name one key column or a list (composite key); a left key may
        be any column of this (joined) table, which is how snowflakes are built. Without keys, the
        common columns are the key, as in pandas. ``how`` is "inner", "left", "right" or "outer" with
        pandas' row order; ``validate`` is pandas' ("one_to_one"/"1:1", "one_to_many"/"1:m",
        "many_to_one"/"m:1", "many_to_many"/"m:m"). Missing keys (NaN/None) match each other, as in
        pandas. Keys with the same name on both sides give one key column, coalesced from the right
        side for rows the left side lacks (right and outer joins).

        ``overlap`` handles non-key columns present on both sides: "suffix" (pandas: ``suffixes`` are
        appended), "first" (keep the left column, drop the right one) or "coalesce" (one column: per
        row, the left value where the left column's row is present -- even if that value is NaN --
        else the right value). Returns a new Table; nothing is materialized.
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
        """The source data behind target ``columns``: {slot index: DataFrame of its source columns},
        each source read once (role-playing slots share one read)."""
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
        """Pieces ``[(slot index, source column)]`` of a target column (for encoders)."""
        return list(self._columns[column])

    def slot(self, index):
        return self._slots[index]

    def gather(self, column, frames):
        """The values of one target column as a pandas Series, from source ``frames`` by slot."""
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
        """The joined table as a pandas DataFrame (equal to the pandas merge/concat chain)."""
        frames = self.read_columns(self._columns)
        data = {column: self.gather(column, frames).array for column in self._columns}
        return pd.DataFrame(data, index=pd.RangeIndex(self._nrows), columns=self.columns)

    def to_matrix(self, columns=None, target=None, categorical="onehot", missing="zero"):
        """Encode the joined table as ``(NormalizedMatrix, y)`` without building the join.

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

        Each source table is encoded once (dense float64 for numeric columns, CSR for one-hot and
        indicator columns) and reused through its index vector; ``nm.columns`` names every column.
        """
        return to_matrix(self, columns, target, categorical, missing)

    # ------------------------------------------------------------------ persistence
    def save(self, folder, sources=False):
        """Save the join metadata into ``folder`` in the core's format (``metadata.json`` +
        ``indices.npz``, one part per slot), plus the table layout in its ``extra`` field.

        With ``sources=True`` every source is also written as Parquet under ``folder/sources``;
        otherwise Parquet sources are referenced by path and the others must be passed to ``load``.
        """
        save_table(self, folder, sources)

    @classmethod
    def load(cls, folder, sources=None):
        """A Table saved by :meth:`save`. ``sources`` maps source names (``Table.tables`` of the saved
        table, made unique) to a DataFrame, a Parquet path, a single-source Table or a DuckDB
        connection (which re-reads the saved table name or query); sources saved beside the metadata
        or referenced by Parquet path need no entry."""
        return load_table(cls, folder, sources or {})

    def levels(self, column):
        """Sorted distinct non-missing values of a column over the joined rows (its one-hot levels)."""
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

    Columns are the union in order of first appearance; each input's slots keep their index vectors
    over the input's own block of rows and are -1 elsewhere, so cells of a column an input lacks are
    missing. Nothing is materialized.
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
