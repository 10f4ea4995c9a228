"""``Table.to_matrix``: encode a lazy joined table as a NormalizedMatrix, one source at a time
(``Table.to_binned``: as a tree learner's bins, one column at a time).

Every slot (source table placed in the join) is encoded once, over its own rows, never per joined row:
its numeric columns become one dense float64 part, its categorical columns one sparse CSR one-hot part,
both reusing the slot's index vector. Missing cells -- rows a left/outer join or a union left absent, and
NaN/None in sources -- follow the ``missing`` policy exactly, with extra parts instead of touching the
joined rows (see :meth:`ilargi.Table.to_matrix` for the policy).
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ilargi._config import with_config
from ilargi.backend import backend_of
from ilargi.backend import threads as thread_control
from ilargi.backend.contract import optional
from ilargi.rewriter import NormalizedMatrix
from ilargi.rewriter.histograms import BinnedMatrix

from .sources import (
    BOOL,
    DATETIME,
    EMPTY,
    NUMERIC,
    STRING,
    release_arrow_memory,
    unsupported_values,
)

CATEGORICAL_MODES = ("onehot", "ordinal", "error")
MISSING_MODES = ("zero", "indicator", "mean", "nan")
MISSING_SUFFIX = "__missing"


@dataclass
class _Column:
    """One selected target column: how it is encoded and where its values come from."""

    name: object
    pieces: list  # [(slot index, source column)]
    categorical: bool
    levels: pd.Index = None
    values: dict = field(
        default_factory=dict
    )  # slot index -> float64 values or int codes per source row
    missing: bool = False
    fill: float = 0.0
    targets: list = field(default_factory=list)  # target column indices of the encoded columns
    indicator: int | None = None  # target column index of the missing indicator


def to_matrix(
    table,
    columns=None,
    target=None,
    categorical="onehot",
    missing="zero",
    allow_nonfinite=False,
    allow_empty=False,
):
    """Encode a joined table as ``(NormalizedMatrix, y)``: the work of :meth:`ilargi.Table.to_matrix`.

    Parameters
    ----------
    table : Table
        The joined table.
    columns, target, categorical, missing, allow_nonfinite
        As in :meth:`ilargi.Table.to_matrix`; ``columns`` may also be a single label (a string
        is one column's name, never a list of its characters).
    allow_empty : bool, default=False
        Columns that encode to no column at all (a one-hot column of no level) give
        ``(None, y)`` instead of an error.

    Returns
    -------
    nm : NormalizedMatrix
        The encoded features.
    y : ndarray or None
        The encoded target.
    """
    if categorical not in CATEGORICAL_MODES:
        raise ValueError(
            f"unknown categorical={categorical!r}; expected one of {CATEGORICAL_MODES}"
        )
    if missing not in MISSING_MODES:
        raise ValueError(f"unknown missing={missing!r}; expected one of {MISSING_MODES}")
    selected = selected_columns(table, columns, target)
    specs = [
        _Column(name, table.column_pieces(name), _is_categorical(table, name, categorical))
        for name in selected
    ]
    target_spec = (
        None
        if target is None
        else _Column(target, table.column_pieces(target), _is_categorical(table, target, "onehot"))
    )
    prepared = specs + ([target_spec] if target_spec else [])
    encoder = _Encoder(
        table,
        table.read_columns(
            [spec.name for spec in prepared], [spec.name for spec in prepared if spec.categorical]
        ),
        [spec.pieces for spec in prepared],
    )
    # Columns are encoded side by side: factorizing (pyarrow, pandas) and NumPy's copies release
    # the GIL (string columns of millions of rows encode nearly twice as fast on two threads).
    with ThreadPoolExecutor(max(1, min(thread_control.get_num_threads(), len(prepared)))) as pool:
        list(
            pool.map(
                with_config(
                    lambda s: encoder.prepare(s, s.categorical and categorical == "ordinal")
                ),
                prepared,
            )
        )
    release_arrow_memory()  # the last strings read, dropped as they were encoded
    if not allow_nonfinite:
        for spec in specs:
            _refuse_infinite(table, spec)
    names = encoder.layout(specs, indicators=missing == "indicator")
    if missing in ("mean", "nan"):
        for spec in specs:
            if spec.levels is None:
                spec.fill = encoder.mean(spec) if missing == "mean" else np.nan
    sources, rows, cols, part_names = encoder.parts(specs, missing)
    if not names and allow_empty:
        return None, None if target_spec is None else encoder.target_values(target_spec)
    if not sources:
        if not names:
            raise ValueError(f"table {table.name!r}: no columns to encode")
        # every cell is empty (an empty table or only absent rows): one all-zero part covering nothing
        sources, rows, cols, part_names = (
            [np.zeros((1, len(names)))],
            [np.full(len(table), -1)],
            [np.arange(len(names))],
            ["empty"],
        )
    matrix = NormalizedMatrix.from_parts(
        sources,
        rows,
        cols,
        (len(table), len(names)),
        columns=names,
        names=part_names,
        allow_nonfinite=allow_nonfinite or missing == "nan",
        copy=False,
    )  # the table's join results, never changed
    y = None if target_spec is None else encoder.target_values(target_spec)
    for spec in prepared:
        spec.values = None  # the columns read, numbers among them views of Arrow's buffers
    release_arrow_memory()
    return matrix, y


def to_binned(
    table,
    columns,
    target,
    categorical,
    missing,
    allow_nonfinite,
    bins,
    bounds,
    fit_rows,
    categorical_features=None,
):
    """Bin a joined table's columns as read, one column at a time: the work of
    :meth:`ilargi.Table.to_binned`. Each column is encoded as :func:`to_matrix` encodes it
    (the same values, names and missing policy), binned, and let go before the next is read, so
    a source's float64 block never exists. Returns ``(BinnedMatrix, y)``."""
    selected = selected_columns(table, columns, target)
    if not selected:
        raise ValueError(f"table {table.name!r}: no columns to encode")
    y = []

    def blocks():
        made = 0
        for name in selected:
            X, y_ = to_matrix(
                table, [name], None if y else target, categorical, missing, allow_nonfinite, True
            )
            if not y:
                y.append(y_)
            if X is not None:  # not a one-hot column of no level
                made += 1
                yield X
            del X
        if not made:
            raise ValueError(f"table {table.name!r}: no columns to encode")

    features = categorical_features
    if features is not None and not isinstance(features, dict):
        features = [str(name) for name in features]  # the encoded columns' names
    binned = BinnedMatrix.from_matrices(blocks(), *bins, bounds, fit_rows, features)
    repeated = sorted(name for name, count in Counter(binned.columns).items() if count > 1)
    if repeated:
        raise ValueError(f"encoded column names collide: {repeated}; rename the columns first")
    return binned, y[0]


def _refuse_infinite(table, spec):
    """A clear error for ±inf in a numeric column (NaN is a missing value; inf is not)."""
    if spec.levels is not None:
        return
    for index, values in spec.values.items():
        infinite = np.isinf(values)
        if infinite.any():
            slot = table.slot(index)
            row = int(np.flatnonzero(infinite)[0])
            raise ValueError(
                f"column {spec.name!r} (table {slot.name!r}) holds {values[row]} at source row {row}; "
                "to_matrix reads NaN as missing but cannot encode an infinite value. Replace it (e.g. "
                "frame.replace([np.inf, -np.inf], np.nan)), leave the column out with columns=, or pass "
                "to_matrix(..., allow_nonfinite=True) to keep it"
            )


def selected_columns(table, columns, target):
    """The feature columns of ``to_matrix`` (all but the target by default), checked: known, not
    selected twice, not the target. ``table`` is a Table or a ChunkedTable (``.columns``,
    ``.name``)."""
    if target is not None and target not in table.columns:
        raise ValueError(
            f"target column {target!r} is not a column of table {table.name!r} "
            f"(columns: {table.columns})"
        )
    if columns is None:
        return [c for c in table.columns if c != target]
    if (
        isinstance(columns, str)
        or not pd.api.types.is_list_like(columns)
        or (isinstance(columns, tuple) and columns in table.columns)
    ):
        # one label, as pandas takes one (drop(columns="a"), dropna(subset="a")): iterating a
        # string would select its characters
        columns = [columns]
    if isinstance(columns, (set, frozenset, dict)):  # pandas refuses them as indexers too
        raise TypeError(
            f"columns must be a list of column names (or one name), not a "
            f"{type(columns).__name__}: its order, the matrix's column order, is not "
            "defined"
        )
    columns = list(columns)
    unknown = [c for c in columns if c not in table.columns]
    if unknown:
        raise ValueError(
            f"columns {unknown} are not columns of table {table.name!r} (columns: {table.columns})"
        )
    repeated = sorted({str(c) for c in columns if columns.count(c) > 1})
    if repeated:
        raise ValueError(f"columns {repeated} are selected twice")
    if target in columns:
        raise ValueError(f"target column {target!r} is also selected as a feature column")
    return columns


def _is_categorical(table, name, categorical):
    """True for string/bool columns, False for numeric ones; TypeError for what cannot be encoded."""
    kinds = {}
    for index, source_column in table.column_pieces(name):
        slot = table.slot(index)
        kind = slot.source.kind(source_column)
        where = f"column {name!r} (table {slot.name!r}, dtype {slot.source.dtype(source_column)})"
        if kind not in (NUMERIC, STRING, BOOL, EMPTY):
            what = (
                "datetime values"
                if kind == DATETIME
                else unsupported_values(slot.source, source_column)
            )
            raise TypeError(
                f"{where} holds {what}; only numbers, strings, booleans and categoricals can "
                "be encoded -- convert it or leave it out with columns="
            )
        kinds.setdefault(kind, where)
    kinds.pop(EMPTY, None)
    if NUMERIC in kinds and len(kinds) > 1:
        raise TypeError(
            f"column {name!r} mixes numeric and non-numeric values: {sorted(kinds.values())}"
        )
    if kinds and NUMERIC not in kinds and categorical == "error":
        raise TypeError(
            f"{next(iter(kinds.values()))} is not numeric and categorical='error'; use "
            "categorical='onehot' or 'ordinal', or leave it out with columns="
        )
    return bool(kinds) and NUMERIC not in kinds


class _Encoder:
    """Per-slot encodings of the selected columns, and the parts they become."""

    def __init__(self, table, frames, readers):
        self.table = table
        # {slot: {source column: Series}}, slots of one source sharing one dict: each column is
        # dropped as soon as the last of its ``readers`` (the pieces of each column to encode)
        # has taken it (:meth:`raw`), so that the columns read and their encodings are not all
        # held at once.
        columns = {id(frame): dict(frame.items()) for frame in frames.values()}
        self.frames = {index: columns[id(frame)] for index, frame in frames.items()}
        self._readers = Counter(
            (id(self.frames[index]), column) for pieces in readers for index, column in pieces
        )
        self._lock = threading.Lock()
        self.nrows = len(table)
        self._counts = {}

    def counts(self, index):
        """How many target rows take each source row of a slot (None for an identity slot)."""
        if index not in self._counts:
            rows = self.table.slot(index).rows
            if rows is not None and rows.size and rows.min() < 0:
                rows = rows[rows >= 0]  # (without absent rows, no compacted copy)
            self._counts[index] = (
                None
                if rows is None
                else np.bincount(rows, minlength=self.table.slot(index).source.nrows)
            )
        return self._counts[index]

    def referenced(self, index):
        counts = self.counts(index)
        return slice(None) if counts is None else counts > 0

    def covered(self, slots):
        """Target rows where at least one of the given slots is present."""
        covered = np.zeros(self.nrows, dtype=bool)
        for index in slots:
            rows = self.table.slot(index).rows
            covered |= True if rows is None else rows >= 0
        return covered

    def prepare(self, spec, ordinal):
        """Values (float64 with NaN) or level codes (-1 = missing) per slot, and whether any is missing."""
        raw = self.raw(spec.pieces)
        if spec.categorical:
            spec.levels, spec.values = self.level_codes(raw)
            if ordinal:
                spec.values = {index: _ordinal(codes) for index, codes in spec.values.items()}
                spec.levels = None
        else:
            spec.values = {
                index: values.to_numpy(dtype=np.float64, na_value=np.nan)
                for index, values in raw.items()
            }
        spec.missing = not self.covered(spec.values).all() or any(
            self._missing_values(spec, index)[self.referenced(index)].any() for index in spec.values
        )

    def raw(self, pieces):
        """The source columns of one column spec, each dropped from the columns read if no other
        spec reads it (the caller holds the only reference left)."""
        raw = {index: self.frames[index][source_column] for index, source_column in pieces}
        with self._lock:
            for index, source_column in pieces:
                key = (id(self.frames[index]), source_column)
                self._readers[key] -= 1
                if not self._readers[key]:
                    self.frames[index].pop(source_column)
        release_arrow_memory()  # what a string column dropped by another thread held
        return raw

    def level_codes(self, raw):
        """Sorted levels -- the distinct values of the source rows some joined row takes -- and per
        slot the level code of every source row (-1 = missing, or a value no joined row takes).

        Each source column is factorized once (pyarrow-backed strings by dictionary encoding); levels
        are matched on the distinct values only, never per row."""
        factorized = {index: pd.factorize(values) for index, values in raw.items()}
        present = []
        for index, (codes, uniques) in factorized.items():
            if self.counts(index) is None:  # every source row is taken, so every value factorized
                present.append(pd.Series(uniques))
                continue
            taken = codes[self.referenced(index)]
            present.append(
                pd.Series(uniques[np.bincount(taken[taken >= 0], minlength=len(uniques)) > 0])
            )
        levels = sorted_levels(pd.unique(pd.concat(present, ignore_index=True)))
        # Each code array is factorize's own fresh intp array, mapped in place (a copy per column
        # is 48 MB of fresh pages at 6M rows): mode="wrap" sends -1 to the appended -1 and, unlike
        # the default mode, writes without an intermediate buffer.
        return levels, {
            index: np.append(levels.get_indexer(uniques), -1).take(codes, out=codes, mode="wrap")
            for index, (codes, uniques) in factorized.items()
        }

    @staticmethod
    def _missing_values(spec, index):
        values = spec.values[index]
        return values < 0 if spec.levels is not None else np.isnan(values)

    def layout(self, specs, indicators):
        """Assign target column indices; returns the target column names."""
        names = []
        for spec in specs:
            start = len(names)
            if spec.levels is None:
                names.append(str(spec.name))
            else:
                names += [f"{spec.name}={level}" for level in spec.levels]
            spec.targets = list(range(start, len(names)))
            if indicators and spec.missing:
                spec.indicator = len(names)
                names.append(f"{spec.name}{MISSING_SUFFIX}")
        repeated = sorted(name for name, count in Counter(names).items() if count > 1)
        if repeated:
            raise ValueError(f"encoded column names collide: {repeated}; rename the columns first")
        return names

    def mean(self, spec):
        """Mean of a numeric column over its present joined cells (0 if it has none)."""
        total = count = 0.0
        for index, values in spec.values.items():
            present = ~np.isnan(values)
            weights = np.ones(len(values)) if self.counts(index) is None else self.counts(index)
            total += weights[present] @ values[present]
            count += weights[present].sum()
        return total / count if count else 0.0

    def parts(self, specs, missing):
        """The parts: per slot a dense numeric and a CSR one-hot (and missing-indicator) block, plus
        one part per group of columns that shares its uncovered rows (indicator 1, mean or NaN
        there)."""
        out = ([], [], [], [])

        def add(source, rows, cols, name):
            if source.shape[0] and source.shape[1] and (not sp.issparse(source) or source.nnz):
                for bucket, item in zip(
                    out, (source, rows, np.asarray(cols, dtype=np.int64), name)
                ):
                    bucket.append(item)

        for index in sorted({index for spec in specs for index in spec.values}):
            slot = self.table.slot(index)
            numeric = [s for s in specs if index in s.values and s.levels is None]
            onehot = [s for s in specs if index in s.values and s.levels is not None]
            flagged = [s for s in specs if index in s.values and s.indicator is not None]
            if flagged:
                flags = np.column_stack([self._missing_values(s, index) for s in flagged])
            if numeric:
                columns = [s.values[index] for s in numeric]
                for s in numeric:
                    s.values[index] = None  # held by ``columns`` alone, freed once stacked
                add(
                    _dense(columns, [s.fill for s in numeric]),
                    slot.rows,
                    [s.targets[0] for s in numeric],
                    f"{slot.name}:numeric",
                )
            if onehot:
                add(
                    _one_hot([s.values[index] for s in onehot], [len(s.levels) for s in onehot]),
                    slot.rows,
                    [t for s in onehot for t in s.targets],
                    f"{slot.name}:onehot",
                )
            if flagged:
                add(
                    sp.csr_array((np.ones(int(flags.sum())), np.nonzero(flags)), shape=flags.shape),
                    slot.rows,
                    [s.indicator for s in flagged],
                    f"{slot.name}:missing",
                )
        self._uncovered_parts(specs, missing, add)
        return out

    def _uncovered_parts(self, specs, missing, add):
        groups = {}
        for spec in specs:
            if missing == "indicator" and spec.indicator is not None:
                groups.setdefault(tuple(spec.values), []).append((spec.indicator, 1.0))
            elif missing in ("mean", "nan") and spec.levels is None and spec.fill != 0:
                groups.setdefault(tuple(spec.values), []).append((spec.targets[0], spec.fill))
        for number, (slots, cells) in enumerate(groups.items()):
            covered = self.covered(slots)
            if not covered.all():
                filler = np.array([[value for _, value in cells]])
                add(
                    filler,
                    np.where(covered, -1, 0),
                    [col for col, _ in cells],
                    f"{missing}[{number}]",
                )

    def target_values(self, spec):
        """y: the target column gathered per joined row as float64 (NaN = missing); string targets
        as codes of their sorted levels."""
        y = None
        for index, values in spec.values.items():
            values = np.where(values < 0, np.nan, values) if spec.levels is not None else values
            rows = self.table.slot(index).rows
            if rows is None:  # a copy: numeric values may be a view of the caller's frame
                y = values.astype(np.float64, copy=spec.levels is None)
            else:
                y = np.where(
                    rows >= 0, np.append(values, np.nan).take(rows), np.nan if y is None else y
                )
        return np.full(self.nrows, np.nan) if y is None else y


def sorted_levels(values):
    """Distinct values as a sorted Index: by value, or -- where values of different types do not
    compare, as booleans and strings after a union -- by type (booleans, numbers, strings, then
    others by type name), then by value within a type.

    Parameters
    ----------
    values : array-like
        Distinct, non-missing values.

    Returns
    -------
    pandas.Index
        The levels, sorted.

    Examples
    --------
    >>> from ilargi.table.encode import sorted_levels
    >>> list(sorted_levels(["b", True, "a", False]))
    [False, True, 'a', 'b']
    """
    index = pd.Index(values)
    if isinstance(index.dtype, pd.CategoricalDtype):  # by value, not in the categories' order
        index = index.astype(index.dtype.categories.dtype)
    try:
        return index.sort_values()
    except TypeError:
        pass
    objects = list(index)
    try:
        order = sorted(range(len(objects)), key=lambda i: (_type_rank(objects[i]), objects[i]))
    except TypeError:  # one type whose values do not compare: by their text
        order = sorted(range(len(objects)), key=lambda i: (_type_rank(objects[i]), str(objects[i])))
    return index.take(order)


def _type_rank(value):
    if isinstance(value, (bool, np.bool_)):
        return 0, ""
    if isinstance(value, (int, float, np.number)):
        return 1, ""
    if isinstance(value, str):
        return 2, ""
    return 3, type(value).__name__


def column_levels(table, column):
    """The one-hot levels of a column: the work of :meth:`ilargi.Table.levels`.

    Parameters
    ----------
    table : Table
        The joined table.
    column : label
        One of its columns.

    Returns
    -------
    pandas.Index
        The sorted distinct non-missing values over the joined rows.
    """
    pieces = table.column_pieces(column)
    encoder = _Encoder(table, table.read_columns([column], [column]), [pieces])
    return encoder.level_codes(encoder.raw(pieces))[0]


def _ordinal(codes):
    """Level codes as float64 values, NaN where missing (-1)."""
    values = codes.astype(np.float64)
    values[codes < 0] = np.nan
    return values


def _dense(value_columns, fills):
    """The n × k float64 block of these columns, NaN replaced by each column's fill (the CPU
    backend's ``dense_columns``: a block of rows at a time, compiled and parallel once built). The
    list is consumed (emptied once copied)."""
    n, k = len(value_columns[0]), len(value_columns)
    dense = np.empty((n, k))
    optional(backend_of(dense), "dense_columns")(value_columns, fills, dense)
    value_columns.clear()
    release_arrow_memory()  # the columns that were views of a Parquet read's buffers
    return dense


def _one_hot(code_columns, widths):
    """CSR (n × sum(widths)): one block of ``width`` columns per code column, a 1 at each row's code;
    a row with code -1 (missing) has no 1 in that block."""
    n, offsets = len(code_columns[0]), np.cumsum([0] + list(widths[:-1]))
    # Written column by column into the row-major index array: no stacked copy of the codes.
    indices = np.empty((n, len(code_columns)), dtype=np.int64)
    for column, (codes, offset) in enumerate(zip(code_columns, offsets)):
        np.add(codes, offset, out=indices[:, column])
    present = indices >= offsets
    if present.all():  # one entry per code column in every row: no masking, a regular indptr
        indices = indices.reshape(-1)
        indptr = np.arange(0, indices.size + 1, len(code_columns))
    else:
        indptr = np.concatenate([[0], np.cumsum(present.sum(axis=1))])
        indices = indices[present]  # row-major: each row's indices come out sorted
    return sp.csr_array((np.ones(len(indices)), indices, indptr), shape=(n, int(sum(widths))))
