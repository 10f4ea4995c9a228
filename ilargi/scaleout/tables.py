"""ChunkedTable: a fact table in Parquet, joined to its dimensions, encoded partition by partition on
the workers.

``Table.from_parquet(path, chunks=...)`` gives a :class:`ChunkedTable`. Its rows are never read by
the client: ``merge`` records many-to-one joins onto dimension tables, and ``to_matrix`` gives a
:class:`~ilargi.scaleout.DaskNormalizedMatrix` (and a Dask target) whose every partition is read by a
worker from the Parquet files, its foreign keys mapped to index vectors there. The dimensions are of
two kinds:

* *broadcast* -- an in-memory :class:`ilargi.Table` (or a DataFrame): read and encoded once on the
  client, its key index and encoded sources placed on every worker once;
* *by key range* -- another ``Table.from_parquet(..., chunks=...)``: a dimension too big to
  broadcast (TPC-H's orders beside lineitem). Each partition reads the rows whose key lies in the
  range of its own foreign keys, only the row groups whose footer statistics overlap it, and keys
  them locally. It suits a fact table stored in the order of that key (lineitem by l_orderkey):
  then each partition reads about its share of the dimension. A table read by key range is
  merged on a column of the fact table; dimensions of its own (customer through orders) are
  broadcast and looked up from its rows on the worker.

Encoding follows :meth:`ilargi.Table.to_matrix` (numbers as float64, strings and booleans one-hot
over the sorted levels present in the joined rows, one dense and one CSR part per table), so the
result equals the in-memory matrix of the same join. The levels, the row counts of inner joins and
the checks need one pass over the data (:meth:`ChunkedTable.to_matrix` runs it first).
"""

import os
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pandas as pd
from dask import delayed

from ilargi.metadata.parts import source_absmax
from ilargi.table import Table
from ilargi.table.encode import selected_columns, sorted_levels
from ilargi.table.sources import BOOL, DATETIME, EMPTY, NUMERIC, STRING, series_kind, unique_name

from . import cache, graph, tasks
from .encoding import column_codes, column_values, one_hot
from .graph import Shared
from .keys import KeyIndex, representatives
from .matrix import DaskNormalizedMatrix
from .options import persist_choice
from .parquet import ParquetFiles
from .pieces import BROADCAST, FACT, LOCAL, Layout, PartSpec, Piece, compact, through

FACT_SLOT, BROADCAST_SLOT, RANGE_SLOT = "fact", "broadcast", "range"


class _Slot:
    """One table placed in the join: the fact table, a broadcast dimension or one read by key
    range; ``parent`` is the slot holding its foreign key ``left_column``, ``key`` its own key."""

    def __init__(
        self, kind, name, files=None, table=None, parent=None, left_column=None, key=None, how=None
    ):
        self.kind, self.name, self.files, self.table = kind, name, files, table
        self.parent, self.left_column, self.key, self.how = parent, left_column, key, how

    def __getstate__(self):
        state = dict(self.__dict__)
        state["table"] = None  # the client reads broadcast tables; tasks never need them
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)


class ChunkedTable:
    """A Parquet fact table read in partitions by the workers, merged with dimension tables.

    Made by ``ilargi.Table.from_parquet(path, chunks=...)``.

    Parameters
    ----------
    path : str, path-like or list
        A Parquet file, a folder of them, a glob pattern or a list of files (one table).
    name : str, optional
        The table's name (default: the file or folder name without suffix).
    chunks : "row_groups", int or str
        Partitions: one per row group, this many rows each (an int: a float such as 1000.0 is
        refused; a file's last one takes the rest), or row groups gathered up to a byte size
        with its unit such as ``"128MiB"`` (see :mod:`ilargi.scaleout.options`).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> import pandas as pd
    >>> from ilargi import Table
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> pd.DataFrame({"k": [0, 1, 1, 0, 2], "x": [1.0, 2.0, 3.0, 4.0, 5.0]}).to_parquet(folder / "fact.parquet")
    >>> stores = Table(pd.DataFrame({"k": [0, 1, 2], "size": [10.0, 20.0, 30.0]}), name="stores")
    >>> fact = Table.from_parquet(folder / "fact.parquet", chunks=2)
    >>> fact
    ChunkedTable('fact': 5 rows x 2 columns from fact, 3 partitions)
    >>> X, y = fact.merge(stores, on="k", how="left").to_matrix(columns=["size"], target="x")
    >>> X.chunks, X.T @ y
    (((2, 2, 1), (1,)), array([300.]))
    """

    def __init__(self, path, name=None, chunks="row_groups"):
        if name is None:
            first = path[0] if isinstance(path, (list, tuple)) and path else path
            name = Path(first).stem
        files = ParquetFiles(path, str(name))
        self.name = str(name)
        self._slots = [_Slot(FACT_SLOT, self.name, files=files)]
        self._columns = {column: (0, column) for column in files.columns}
        self._partitions = files.partitions(chunks)
        self._nrows = files.nrows
        self._counted = True  # row counts are known until an inner join may drop rows

    def _copy(self):
        out = object.__new__(ChunkedTable)
        out.__dict__.update(self.__dict__)
        out._slots, out._columns = list(self._slots), dict(self._columns)
        return out

    # ------------------------------------------------------------------------------------------
    # Description

    @property
    def columns(self):
        """Column labels of the joined table, in pandas' order."""
        return list(self._columns)

    @property
    def tables(self):
        """Names of the tables placed in the join."""
        return [slot.name for slot in self._slots]

    @property
    def npartitions(self):
        """Partitions of the fact table."""
        return len(self._partitions)

    @property
    def shape(self):
        """(rows, columns); the rows of inner joins are counted by one pass on first use."""
        return len(self), len(self._columns)

    def __len__(self):
        if not self._counted:
            self._nrows = sum(self._count())
            self._counted = True
        return self._nrows

    def __repr__(self):
        rows = f"{self._nrows} rows" if self._counted else "? rows"
        return (
            f"ChunkedTable({self.name!r}: {rows} x {len(self._columns)} columns from "
            f"{', '.join(self.tables)}, {self.npartitions} partitions)"
        )

    # ------------------------------------------------------------------------------------------
    # Merge

    def merge(self, other, on=None, left_on=None, right_on=None, how="inner", validate=None):
        """A many-to-one join onto a dimension table, like ``pandas.merge``; nothing is read.

        Parameters
        ----------
        other : ilargi.Table, pandas.DataFrame or ChunkedTable
            The dimension: in memory (broadcast to the workers), or a chunked Parquet table (read
            by each partition for the key range of its foreign keys; its key must be numeric and
            the left key a column of the fact table).
        on : label, optional
            The key column on both sides (one column).
        left_on, right_on : label, optional
            The foreign key on this side and the key of ``other``.
        how : {"inner", "left"}, default "inner"
            Inner drops the rows whose key has no match; left keeps them (NULL cells).
        validate : {None, "many_to_one", "m:1"}
            The only relation supported: every key of ``other`` is unique (checked).

        Returns
        -------
        ChunkedTable

        Raises
        ------
        ValueError
            For another ``how`` or ``validate``, unknown keys, overlapping column names, or key
            columns the in-memory :meth:`ilargi.Table.merge` refuses (numbers with strings, ...;
            its message, naming both columns).
        TypeError
            For key values the in-memory merge cannot hash or sort.
        NotImplementedError
            For several key columns, or a chunked dimension merged on a dimension's column.

        Notes
        -----
        Keys follow the in-memory merge: a key pair is refused by that merge itself, run on a
        few representative rows of each key column, and keys match as it matches them (pandas'
        coercion of the two columns; missing keys match each other, also a snowflake's key of
        an absent row). One leeway: the decision is made here, before any row is read, from the
        key columns' dtypes and kinds of values; the in-memory merge decides on the joined rows,
        so it accepts a pair it would refuse when no joined row holds a key (an empty join).
        """
        if how not in ("inner", "left"):
            raise ValueError(
                f"a ChunkedTable merges with how='inner' or 'left' (a many-to-one "
                f"join onto a dimension), got how={how!r}"
            )
        if validate not in (None, "many_to_one", "m:1"):
            raise ValueError(
                f"a ChunkedTable merge is many-to-one (every key of the right table "
                f"unique), got validate={validate!r}"
            )
        if on is not None:
            if left_on is not None or right_on is not None:
                raise ValueError("give either on= or left_on= and right_on=, not both")
            left_on = right_on = on
        if left_on is None or right_on is None:
            raise ValueError("a ChunkedTable merge needs its key: on= or left_on= and right_on=")
        left_key, right_key = _single(left_on, "left_on"), _single(right_on, "right_on")
        if isinstance(other, pd.DataFrame):
            other = Table(other, name="right")
        if isinstance(other, ChunkedTable):
            if len(other._slots) > 1:
                raise NotImplementedError(
                    "a chunked right table must not be joined itself; merge "
                    "its dimensions onto the fact table instead"
                )
            kind, right_columns, name = RANGE_SLOT, other.columns, other.name
        elif isinstance(other, Table):
            kind, right_columns, name = BROADCAST_SLOT, other.columns, other.name
        else:
            raise TypeError(
                f"can only merge a Table, DataFrame or ChunkedTable, got {type(other).__name__}"
            )
        if left_key not in self._columns:
            raise ValueError(
                f"merge key {left_key!r} is not a column of {self.name!r} (columns: {self.columns})"
            )
        if right_key not in right_columns:
            raise ValueError(
                f"merge key {right_key!r} is not a column of {name!r} (columns: {right_columns})"
            )
        parent, left_column = self._columns[left_key]
        if kind == RANGE_SLOT:
            if parent != 0:
                raise NotImplementedError(
                    f"{name!r} is read by key range, which needs its foreign key in the fact "
                    f"table; {left_key!r} is a column of {self._slots[parent].name!r}"
                )
            if other._slots[0].files.kind(right_key) != NUMERIC:
                raise ValueError(
                    f"{name!r} is read by key range: its key {right_key!r} must be numeric, "
                    f"got {other._slots[0].files.dtype(right_key)} (a range read selects row "
                    "groups by the numeric min and max of their keys; integer keys stored "
                    "dictionary-encoded are read as their values); read the table whole "
                    "(Table.from_parquet without chunks=) or store the key as numbers"
                )
        self._check_key_pair(parent, left_column, other, right_key, how)
        added = [c for c in right_columns if not (c == right_key and left_key == right_key)]
        overlapping = sorted(str(c) for c in set(added) & set(self._columns))
        if overlapping:
            raise ValueError(
                f"columns {overlapping} are on both sides of the merge; rename them "
                "first (a ChunkedTable merge adds no suffixes)"
            )
        out = self._copy()
        taken = set(self.tables)
        slot = _Slot(
            kind,
            unique_name(name, taken),
            files=other._slots[0].files if kind == RANGE_SLOT else None,
            table=other if kind == BROADCAST_SLOT else None,
            parent=parent,
            left_column=left_column,
            key=right_key,
            how=how,
        )
        out._slots.append(slot)
        index = len(out._slots) - 1
        for column in added:
            out._columns[column] = (index, column)
        if how == "inner":
            out._counted = False
        return out

    def _key_sample(self, s, column):
        """A few rows of a key column of slot ``s`` with every kind of value it holds and its
        dtype in the joined table: the first rows of a Parquet table (one Arrow type: one kind
        of value) and a missing one if the footers count any, or an in-memory table's
        representatives; a missing value more where a left join above the slot may leave its
        rows absent (the joined column then holds missing values: pandas promotes int64 to
        float64, bool to object)."""
        slot = self._slots[s]
        sample = (
            representatives(_column(slot.table, column))
            if slot.kind == BROADCAST_SLOT
            else slot.files.sample(column)
        )
        absent, at = False, s
        while at:
            absent |= self._slots[at].how == "left"
            at = self._slots[at].parent
        if absent and not sample.isna().any():
            sample = sample.reindex(range(len(sample) + 1))
        return sample

    def _check_key_pair(self, parent, left_column, other, right_key, how):
        """Refuse the key pairs the in-memory :meth:`ilargi.Table.merge` refuses, by the same
        rule: that merge itself, run on a few representative rows of each key column (pandas
        decides from the dtypes and the kinds of values). Without it the workers' key lookup
        matched nothing (int64 against strings): an inner join of no rows, or a left join of
        all-missing dimension columns, with no error."""
        left_slot = self._slots[parent]
        left = self._key_sample(parent, left_column)
        if isinstance(other, ChunkedTable):
            right = other._key_sample(0, right_key)
        else:
            right = representatives(_column(other, right_key))
        keys = (
            {"on": left_column}
            if left_column == right_key
            else {"left_on": left_column, "right_on": right_key}
        )
        Table(pd.DataFrame({left_column: left}), name=left_slot.name).merge(
            Table(pd.DataFrame({right_key: right}), name=other.name), how=how, **keys
        )

    # ------------------------------------------------------------------------------------------
    # To a matrix

    def _kind(self, slot, column, frames):
        if slot.kind == BROADCAST_SLOT:
            return series_kind(frames[self._slots.index(slot)][column])
        return slot.files.kind(column)

    def _broadcast_frames(self, needed):
        """The columns each broadcast dimension provides, read on the client (they are small)."""
        frames = {}
        for s, slot in enumerate(self._slots):
            if slot.kind != BROADCAST_SLOT:
                continue
            wanted = list(dict.fromkeys([slot.key] + needed.get(s, [])))
            table = slot.table
            read = table.read_columns(wanted)
            frames[s] = pd.DataFrame({c: table.gather(c, read) for c in wanted})
        return frames

    def _needed(self, feature_columns, target):
        """Source columns to read per slot: keys, foreign keys, features, the target."""
        needed = {s: [] for s in range(len(self._slots))}
        for s, slot in enumerate(self._slots):
            if s:
                needed[slot.parent].append(slot.left_column)
                if slot.kind == RANGE_SLOT:
                    needed[s].append(slot.key)
        for column in list(feature_columns) + ([] if target is None else [target]):
            s, source_column = self._columns[column]
            needed[s].append(source_column)
        return {s: list(dict.fromkeys(columns)) for s, columns in needed.items()}

    def _count(self):
        """Rows of each partition after the inner joins (one pass)."""
        plan, payload = self._plan([], None, "onehot")
        stats = graph.compute(
            *[delayed(_stats, pure=False)(plan, part, payload.ref()) for part in self._partitions]
        )
        return [s["n"] for s in stats]

    def _plan(self, features, target, categorical):
        needed = self._needed(features, target)
        frames = self._broadcast_frames(needed)
        specs = []
        for column in features:
            s, source_column = self._columns[column]
            kind = self._kind(self._slots[s], source_column, frames)
            specs.append(
                _Spec(
                    column,
                    s,
                    source_column,
                    _categorical(column, kind, categorical, self._slots[s].name),
                )
            )
        target_spec = None
        if target is not None:
            s, source_column = self._columns[target]
            kind = self._kind(self._slots[s], source_column, frames)
            target_spec = _Spec(
                target, s, source_column, _categorical(target, kind, "onehot", self._slots[s].name)
            )
        codes, uniques = {}, {}
        index, child = _key_indexes(self._slots, frames)
        for spec in specs + ([target_spec] if target_spec else []):
            if spec.categorical and spec.slot in frames:
                codes[spec.slot, spec.column], uniques[spec.slot, spec.column] = pd.factorize(
                    frames[spec.slot][spec.column]
                )
        plan = _Plan(
            self._slots,
            specs,
            target_spec,
            needed,
            {
                s: slot.files.key_ranges(slot.key)
                for s, slot in enumerate(self._slots)
                if slot.kind == RANGE_SLOT
            },
        )
        # client-side only (dropped when pickled)
        plan.frames, plan.uniques, plan.keys = frames, uniques, (index, child)
        payload = {"index": index, "child": child, "codes": codes}
        if target_spec is not None and not target_spec.categorical and target_spec.slot in frames:
            payload["target"] = column_values(
                frames[target_spec.slot][target_spec.column], target_spec
            )
        return plan, Shared(payload)

    def to_binned(self, *args, **kwargs):
        """Not for a table read in partitions: the gradient-boosted trees train in memory.

        Raises
        ------
        NotImplementedError
            Always, naming what to do instead.
        """
        raise NotImplementedError(
            f"table {self.name!r} is read in partitions by Dask workers, and the gradient-boosted "
            "trees train in memory: read it without chunks (Table.from_parquet(path)) to bin it"
        )

    def to_matrix(
        self,
        columns=None,
        target=None,
        categorical="onehot",
        missing="zero",
        allow_nonfinite=False,
        persist=False,
    ):
        """Encode the joined table as ``(DaskNormalizedMatrix, y)``, every partition on a worker.

        One pass over the partitions first finds the one-hot levels present in the joined rows,
        the rows inner joins keep and whether a numeric column holds ±inf; the broadcast
        dimensions are then encoded once and placed on every worker.

        Parameters
        ----------
        columns, target, categorical, allow_nonfinite
            As for :meth:`ilargi.Table.to_matrix`.
        missing : "zero"
            Missing cells hold 0 (the only policy of the chunked path).
        persist : bool or "disk", default False
            True builds every partition's matrix once and keeps it, with the target, in the
            workers' memory (when the table fits there). False reads the partitions from Parquet
            again in every pass (out of core). ``"disk"`` is out of core too, but the first pass
            that reads a partition also writes it, encoded (index vectors, numbers, one-hot
            blocks and target), to a file in Dask's temporary directory, and later passes read
            that file instead of the Parquet rows: no join, key lookup or encoding again. The
            folder is private (mode 0700, files 0600) and the files hold plain arrays, read
            without unpickling (:mod:`ilargi.scaleout.cache`). A
            worker holds one partition per task at a time either way; the files take about the
            encoded table's size on disk and are removed when the matrix (and every matrix
            derived from it) is garbage collected or the process exits. A task that finds no
            file (another machine, a removed file) reads Parquet and writes it again.

        Returns
        -------
        X : DaskNormalizedMatrix
        y : dask.array.Array or None
            The target per joined row, chunked like X's rows.
        """
        if categorical not in ("onehot", "ordinal", "error"):
            raise ValueError(
                f"unknown categorical={categorical!r}; expected one of "
                "('onehot', 'ordinal', 'error')"
            )
        persist = persist_choice(persist, disk=True)
        if missing != "zero":
            raise NotImplementedError(
                f"missing={missing!r}: a ChunkedTable encodes missing "
                "cells as 0 (missing='zero'); use an in-memory Table for "
                "the other policies"
            )
        features = selected_columns(self, columns, target)
        plan, payload = self._plan(features, target, categorical)
        if not allow_nonfinite:
            _refuse_infinite_dimensions(plan)
        stats = graph.compute(
            *[delayed(_stats, pure=False)(plan, part, payload.ref()) for part in self._partitions]
        )
        del payload
        if not allow_nonfinite:
            for found in stats:
                if found["infinite"]:
                    column, value = found["infinite"]
                    raise ValueError(
                        f"column {column!r} holds {value}; to_matrix reads NaN as missing but "
                        "cannot encode an infinite value. Replace it, leave the column out with "
                        "columns=, or pass to_matrix(..., allow_nonfinite=True) to keep it"
                    )
        counts = [s["n"] for s in stats]
        self._nrows, self._counted = sum(counts), True
        plan.set_levels(stats, categorical == "ordinal")
        layout, dims = plan.encode(allow_nonfinite)
        shared = Shared(dims)
        token = uuid.uuid4().hex
        ref = shared.ref()
        if persist == "disk":
            # Dask's temporary directory (its temporary-directory setting, where workers
            # spill), one new private folder per matrix
            folder = cache.new_folder(
                dask.config.get("temporary-directory", None) or tempfile.gettempdir()
            )
            # the plan is in every task of this matrix and of the matrices derived from it
            weakref.finalize(plan, shutil.rmtree, folder, ignore_errors=True)
            payloads = [
                delayed(_read_cached, pure=False)(
                    plan,
                    part,
                    ref,
                    os.path.join(folder, f"{k}.npz"),
                    dask_key_name=f"ilargi-read-{token}-{k}",
                )
                for k, part in enumerate(self._partitions)
            ]
        else:
            payloads = [
                delayed(_read, pure=False)(
                    plan, part, ref, dask_key_name=f"ilargi-read-{token}-{k}"
                )
                for k, part in enumerate(self._partitions)
            ]
        sources = [
            delayed(tasks.item, pure=False)(p, 0, dask_key_name=f"ilargi-piece-{token}-{k}")
            for k, p in enumerate(payloads)
        ]
        X = DaskNormalizedMatrix(
            layout,
            shared,
            sources,
            counts,
            dtype=np.float64,
            nonfinite=(False, False) if not allow_nonfinite else None,
            origin="parquet",
        )
        y = None
        if target is not None:
            blocks = [
                delayed(tasks.item, pure=False)(p, 1, dask_key_name=f"ilargi-y-{token}-{k}")
                for k, p in enumerate(payloads)
            ]
            y = da.concatenate(
                [
                    da.from_delayed(
                        b, shape=(n,), dtype=np.float64, name=f"ilargi-target-{token}-{k}"
                    )
                    for k, (b, n) in enumerate(zip(blocks, counts))
                ]
            )
            if not any(s["target_nonfinite"] for s in stats):
                from .arrays import known_finite

                known_finite(y)
        if persist is True:
            built = graph.persist(X._partitions() + ([] if y is None else [y]))
            X = X._derive(built=(built[: X.npartitions], 0, True))
            y = y if y is None else built[-1]
        return X, y


class _Spec:
    """One encoded column: its slot, source column, whether categorical, its levels."""

    def __init__(self, name, slot, column, categorical):
        self.name, self.slot, self.column, self.categorical = name, slot, column, categorical
        self.levels = None  # pandas Index of the one-hot levels
        self.ordinal = False
        self.targets = []


class _Plan:
    """What a task needs to read and encode one partition (small; shipped with every task)."""

    def __init__(self, slots, specs, target, needed, ranges):
        self.slots, self.specs, self.target, self.needed = slots, specs, target, needed
        self.ranges = ranges
        self.frames = self.uniques = self.keys = None
        self.tables = {}  # slot -> table index of the layout
        self.layout = None  # set by encode

    def __getstate__(self):
        state = dict(self.__dict__)
        state["frames"] = state["uniques"] = state["keys"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)

    def set_levels(self, stats, ordinal):
        """The sorted levels of every categorical column over the joined rows (as the in-memory
        encoder finds them), from the partitions' statistics."""
        for spec in self.specs + ([self.target] if self.target else []):
            if not spec.categorical:
                continue
            key = (spec.slot, spec.column)
            if self.slots[spec.slot].kind == BROADCAST_SLOT:
                seen = np.unique(
                    np.concatenate(
                        [s["codes"].get(key, np.zeros(0, np.intp)) for s in stats]
                        + [np.zeros(0, np.intp)]
                    )
                )
                present = [pd.Series(self.uniques[key][seen[seen >= 0]])]
            else:
                present = [pd.Series(s["levels"][key]) for s in stats if key in s["levels"]]
            present = [p for p in present if len(p)] or [pd.Series([], dtype=object)]
            spec.levels = sorted_levels(pd.unique(pd.concat(present, ignore_index=True)))
            if ordinal and spec is not self.target:
                spec.ordinal = True

    def encode(self, allow_nonfinite=False):
        """The layout of every partition's matrix and the encoded broadcast sources (numeric
        parts may hold ±inf with ``allow_nonfinite``)."""
        names = []
        for spec in self.specs:
            start = len(names)
            if spec.categorical and not spec.ordinal:
                names += [f"{spec.name}={level}" for level in spec.levels]
            else:
                names.append(str(spec.name))
            spec.targets = list(range(start, len(names)))
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"encoded column names collide: {repeated}; rename the columns first")
        kinds, n_source, parts, dims = [], [], [], {"index": {}, "child": {}}
        dims["index"], dims["child"] = self.keys
        if self.target is not None and self.slots[self.target.slot].kind == BROADCAST_SLOT:
            dims["target"] = column_values(
                self.frames[self.target.slot][self.target.column], self.target
            )
        for s in sorted({spec.slot for spec in self.specs}):
            slot = self.slots[s]
            numeric, onehot = self.split(s)
            t = len(kinds)
            self.tables[s] = t
            kind = {FACT_SLOT: FACT, BROADCAST_SLOT: BROADCAST, RANGE_SLOT: LOCAL}[slot.kind]
            kinds.append(kind)
            n_source.append(len(self.frames[s]) if kind == BROADCAST else None)
            blocks = self.encode_blocks(self.frames[s], s) if kind == BROADCAST else None
            b = 0
            if numeric:
                finite = not allow_nonfinite or (
                    blocks is not None and bool(np.isfinite(blocks[0]).all())
                )
                parts.append(
                    PartSpec(
                        f"{slot.name}:numeric",
                        t,
                        b,
                        [x.targets[0] for x in numeric],
                        finite,
                        _absmax(blocks, b),
                    )
                )
                b += 1
            if onehot:
                parts.append(
                    PartSpec(
                        f"{slot.name}:onehot",
                        t,
                        b,
                        [c for x in onehot for c in x.targets],
                        absmax=_absmax(blocks, b),
                    )
                )
            if blocks is not None:
                dims[t] = blocks
        # the slots whose rows a partition needs although no feature comes from them (a path to
        # a dimension further out, or only the target) keep no table
        if not parts:
            raise ValueError("no columns to encode")
        self.layout = Layout(kinds, n_source, parts, len(names), names)
        return self.layout, dims

    def split(self, s):
        numeric = [x for x in self.specs if x.slot == s and (not x.categorical or x.ordinal)]
        onehot = [x for x in self.specs if x.slot == s and x.categorical and not x.ordinal]
        return numeric, onehot

    def encode_blocks(self, frame, s):
        """The dense numeric block and the CSR one-hot block of one table's rows."""
        numeric, onehot = self.split(s)
        blocks = []
        if numeric:
            blocks.append(
                np.column_stack(
                    [
                        np.nan_to_num(
                            column_values(frame[x.column], x),
                            nan=0.0,
                            posinf=np.inf,
                            neginf=-np.inf,
                        )
                        for x in numeric
                    ]
                )
            )
        if onehot:
            codes = [column_codes(x.levels, frame[x.column]) for x in onehot]
            blocks.append(one_hot(codes, [len(x.levels) for x in onehot], len(frame)))
        return blocks


def _absmax(blocks, b):
    """max |block b| of a broadcast table (None for a table the partitions hold)."""
    return None if blocks is None else source_absmax(blocks[b])


def _key_indexes(slots, frames):
    """The :class:`~.keys.KeyIndex` of every broadcast dimension, and the index vector from each
    broadcast dimension to a broadcast dimension of its own (a snowflake's next table)."""
    index, child = {}, {}
    for s, frame in frames.items():
        index[s] = KeyIndex(frame[slots[s].key], slots[s].name)
    for s, slot in enumerate(slots):
        if s and slot.kind == BROADCAST_SLOT and slots[slot.parent].kind == BROADCAST_SLOT:
            child[s] = index[s].rows(frames[slot.parent][slot.left_column])
    return index, child


def _column(table, column):
    """One column of an in-memory Table over its joined rows."""
    return table.gather(column, table.read_columns([column]))


def _single(key, what):
    if isinstance(key, (list, tuple)):
        if len(key) != 1:
            raise NotImplementedError(f"{what}: a ChunkedTable merges on one key column, got {key}")
        key = key[0]
    return key


def _categorical(name, kind, categorical, table):
    where = f"column {name!r} (table {table!r})"
    if kind not in (NUMERIC, STRING, BOOL, EMPTY):
        what = "datetime values" if kind == DATETIME else "unsupported values"
        raise TypeError(
            f"{where} holds {what}; only numbers, strings, booleans and categoricals "
            "can be encoded -- convert it or leave it out with columns="
        )
    if kind in (STRING, BOOL) and categorical == "error":
        raise TypeError(f"{where} is not numeric and categorical='error'")
    return kind in (STRING, BOOL)


def _refuse_infinite_dimensions(plan):
    for spec in plan.specs:
        if not spec.categorical and spec.slot in plan.frames:
            values = plan.frames[spec.slot][spec.column].to_numpy(dtype=np.float64, na_value=np.nan)
            bad = np.isinf(values)
            if bad.any():
                raise ValueError(
                    f"column {spec.name!r} (table {plan.slots[spec.slot].name!r}) holds "
                    f"{values[bad][0]}; to_matrix reads NaN as missing but cannot encode an "
                    "infinite value. Replace it, leave the column out with columns=, or pass "
                    "to_matrix(..., allow_nonfinite=True) to keep it"
                )


# ----------------------------------------------------------------------------------------------
# On the workers


def _join(plan, part, payload):
    """Read a partition's fact rows and map its foreign keys: (fact frame, {slot: index vector
    into its source or local rows}, {slot: local frame}, kept rows or None)."""
    frame = plan.slots[0].files.read(part, plan.needed[0])
    n = len(frame)
    rows, local = {}, {}
    index = payload["index"]
    for s, slot in enumerate(plan.slots):
        if not s:
            continue
        parent = plan.slots[slot.parent]
        if slot.kind == RANGE_SLOT:
            lo, hi, missing = _key_bounds(frame[slot.left_column])
            # missing keys match the dimension's missing key, as in the in-memory merge
            local[s] = slot.files.read_range(
                slot.key, lo, hi, plan.needed[s], plan.ranges[s], missing=missing
            )
            rows[s] = KeyIndex(local[s][slot.key], slot.name).rows(frame[slot.left_column])
        elif slot.parent == 0:
            rows[s] = index[s].rows(frame[slot.left_column])
        elif parent.kind == BROADCAST_SLOT:
            rows[s] = through(payload["child"][s], rows[slot.parent], index[s].missing_row)
        else:  # a broadcast dimension of a table read by key range: looked up from its rows
            mapping = index[s].rows(local[slot.parent][slot.left_column])
            rows[s] = through(mapping, rows[slot.parent], index[s].missing_row)
    keep = np.ones(n, dtype=bool)
    for s, slot in enumerate(plan.slots):
        if s and slot.how == "inner":
            keep &= rows[s] >= 0
    return frame, rows, local, (None if keep.all() else np.flatnonzero(keep))


def _key_bounds(keys):
    """(lo, hi, any missing) of a partition's foreign keys into a numeric key read by range:
    the values that are numbers (bools count as 0 and 1, as pandas matches them); values of
    other kinds match no number ((inf, -inf) when none is one)."""
    missing = keys.isna().to_numpy()
    present = keys[~missing]
    if isinstance(present.dtype, pd.CategoricalDtype):
        present = present.astype(object)
    numbers = pd.to_numeric(present, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    numbers = numbers[~np.isnan(numbers)]
    if not numbers.size:
        return np.inf, -np.inf, bool(missing.any())
    return float(numbers.min()), float(numbers.max()), bool(missing.any())


def _take(values, kept):
    return values if kept is None else values[kept]


def _stats(plan, part, payload):
    """One partition's statistics: rows kept, the levels present of every categorical column,
    the first ±inf of a numeric feature, and whether the target holds NaN or inf."""
    frame, rows, local, kept = _join(plan, part, payload)
    n = len(frame) if kept is None else kept.size
    out = {"n": n, "levels": {}, "codes": {}, "infinite": None, "target_nonfinite": False}
    for spec in plan.specs + ([plan.target] if plan.target else []):
        kind = plan.slots[spec.slot].kind
        if spec.slot == 0:
            values = frame[spec.column]
            used = values if kept is None else values.take(kept)
        elif kind == RANGE_SLOT:
            values = local[spec.slot][spec.column]
            taken = _take(rows[spec.slot], kept)
            used = values.take(np.unique(taken[taken >= 0]))
        else:
            values = used = None
        if spec.categorical:
            key = (spec.slot, spec.column)
            if kind == BROADCAST_SLOT:
                taken = _take(rows[spec.slot], kept)
                codes = payload["codes"][key]
                out["codes"][key] = np.unique(codes[np.unique(taken[taken >= 0])])
            else:
                out["levels"][key] = pd.unique(used.dropna())
        if spec is plan.target:
            continue
        if not spec.categorical and values is not None and out["infinite"] is None:
            numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
            bad = np.isinf(numbers)
            if bad.any():
                out["infinite"] = (spec.name, float(numbers[bad][0]))
    if plan.target is not None and not plan.target.categorical:
        y = _target(plan, frame, rows, local, kept, payload)
        out["target_nonfinite"] = bool(y.size) and not bool(np.isfinite(y).all())
    else:
        out["target_nonfinite"] = plan.target is not None
    return out


def _target(plan, frame, rows, local, kept, dims):
    """The target's values over the partition's joined rows (NaN = missing)."""
    target = plan.target
    kind = plan.slots[target.slot].kind
    if target.slot == 0:
        return _take(column_values(frame[target.column], target), kept)
    if kind == BROADCAST_SLOT:
        source = dims["target"]
    else:
        source = column_values(local[target.slot][target.column], target)
    taken = _take(rows[target.slot], kept)
    return np.where(taken >= 0, np.append(source, np.nan)[taken], np.nan)


def _read(plan, part, dims):
    """One partition as (Piece, target values): its fact rows read, its foreign keys mapped, its
    columns and its local tables' rows encoded with the global levels."""
    frame, rows, local, kept = _join(plan, part, dims)
    n = len(frame) if kept is None else kept.size
    fact, piece_rows, piece_local = [], {}, {}
    for s, t in plan.tables.items():
        kind = plan.slots[s].kind
        if kind == FACT_SLOT:
            fact = plan.encode_blocks(frame if kept is None else frame.take(kept), s)
        elif kind == BROADCAST_SLOT:
            piece_rows[t] = _take(rows[s], kept)
        else:
            piece_rows[t] = _take(rows[s], kept)
            piece_local[t] = plan.encode_blocks(local[s], s)
    y = None if plan.target is None else _target(plan, frame, rows, local, kept, dims)
    return compact(Piece(n, fact, piece_rows, piece_local), dims, plan.layout), y


def _read_cached(plan, part, dims, path):
    """:func:`_read`, kept in ``path`` after the first time: later passes load the encoded
    partition (one sequential read) instead of joining and encoding its Parquet rows again. The
    folder and file are private and hold plain arrays (:mod:`.cache`)."""
    cache.ensure_private(os.path.dirname(path))
    found = cache.read(path, range(len(plan.layout.kinds)))
    if found is not None:
        return found
    result = _read(plan, part, dims)
    cache.write(path, *result)
    return result
