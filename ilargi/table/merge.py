"""The merge engine of :meth:`ilargi.table.Table.merge`: ``pandas.merge`` on index vectors.

:meth:`Table.merge <ilargi.table.Table.merge>` documents the semantics and hands its two sides to
:func:`merge_tables`, which

* checks the arguments and the key pairs (where pandas' rules look at values, pandas itself decides
  on a few representative rows of each key column: ``_check_key_pair``);
* codes the keys of both sides in one int64 code space (``_key_codes``), checks ``validate=``
  and takes the join's row pairs from :mod:`.join`;
* builds the joined Table (``_Merged``): every source's index vector composed with the row
  pairs, overlapping columns suffixed, kept or coalesced, key columns filled from the other side
  and typed as pandas would type them (pandas again, on a sample of the join).

It is a module of its own because it was most of :mod:`.table` and no other method of a Table
needs it. It reads a Table's private layout (slots, pieces, dtypes) as :mod:`.encode` and
:mod:`.persist` do, and does not import :mod:`.table` (which imports it): the joined Table is
made by the left side's class.
"""

from __future__ import annotations

import importlib
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .dtypes import CommonDtype, Fixed, WithMissing
from .join import combine_codes, factorize_jointly, first_duplicate, gather_codes, join_indexers
from .sources import DuckDBSource, Slot, duckdb_codes, unique_name

if TYPE_CHECKING:
    from .table import Table

_HOWS = ("inner", "left", "right", "outer")
_OVERLAPS = ("suffix", "first", "coalesce")
# validate -> (left keys must be unique, right keys must be unique)
_VALIDATE = {
    "one_to_one": (True, True),
    "1:1": (True, True),
    "one_to_many": (True, False),
    "1:m": (True, False),
    "many_to_one": (False, True),
    "m:1": (False, True),
    "many_to_many": (False, False),
    "m:m": (False, False),
}


def merge_tables(
    left: Table,
    right: Table,
    on: Any,
    left_on: Any,
    right_on: Any,
    how: str,
    suffixes: tuple[str, str],
    validate: str | None,
    overlap: str,
    sort: bool,
) -> Table:
    """``left.merge(right, ...)`` for two Tables: see :meth:`ilargi.table.Table.merge`.

    Parameters
    ----------
    left, right : Table
        The two sides.
    on, left_on, right_on, how, suffixes, validate, overlap, sort
        As for :meth:`ilargi.table.Table.merge`.

    Returns
    -------
    Table
        The joined table.
    """
    if how not in _HOWS:
        raise ValueError(f"unknown how={how!r}; expected one of {', '.join(map(repr, _HOWS))}")
    if validate is not None and validate not in _VALIDATE:
        raise ValueError(
            f"unknown validate={validate!r}; expected one of {', '.join(map(repr, _VALIDATE))}"
        )
    if overlap not in _OVERLAPS:
        raise ValueError(
            f"unknown overlap={overlap!r}; expected one of {', '.join(map(repr, _OVERLAPS))}"
        )
    left_keys, right_keys = _merge_keys(left, right, on, left_on, right_on)
    sort = bool(sort)
    # pandas refuses key pairs before checking validate=, and sorts the keys after: a sort
    # error waits for the validation, as in pandas
    errors = [
        _check_key_pair(left, left_key, right, right_key, how, sort)
        for left_key, right_key in zip(left_keys, right_keys)
    ]
    unsortable: Exception | None = next((error for error in errors if error is not None), None)
    sorted_keys = (how == "outer" or sort) and unsortable is None
    try:
        left_codes, right_codes, size = _key_codes(
            left, left_keys, right, right_keys, sort=sorted_keys
        )
    except TypeError as error:  # keys that cannot be sorted (unhashable ones fail unsorted too)
        if not sorted_keys:
            raise
        unsortable = error
        left_codes, right_codes, size = _key_codes(left, left_keys, right, right_keys, sort=False)
    if validate is not None:
        _check_unique(left, left_keys, left_codes, size, validate, "left", _VALIDATE[validate][0])
        _check_unique(
            right, right_keys, right_codes, size, validate, "right", _VALIDATE[validate][1]
        )
    if unsortable is not None:
        raise unsortable
    left_take, right_take = join_indexers(left_codes, right_codes, size, how)
    if sort and how != "outer":
        left_take, right_take = _sorted_by_key(left_codes, right_codes, left_take, right_take, how)
    del left_codes, right_codes
    merged = _Merged(
        left, right, identity_or(left_take, len(left)), identity_or(right_take, len(right))
    )
    return merged.table(left_keys, right_keys, suffixes, overlap, how, sort)


def identity_or(take, nrows):
    """None (the identity) where ``take`` is ``0, 1, ..., nrows - 1``, else ``take``."""
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
            raise ValueError(
                f"no common columns to merge {left.name!r} and {right.name!r} on; "
                "pass on= or left_on=/right_on="
            )
    elif left_on is None or right_on is None:
        raise ValueError("left_on= and right_on= must be given together")
    else:
        left_keys, right_keys = _key_list(left_on, "left_on"), _key_list(right_on, "right_on")
        if len(left_keys) != len(right_keys):
            raise ValueError(
                f"left_on has {len(left_keys)} keys but right_on has {len(right_keys)}; "
                "they must pair up"
            )
    if not left_keys:
        raise ValueError("no merge keys given")
    for key in left_keys:
        left._pieces(key, "the left")
    for key in right_keys:
        right._pieces(key, "the right")
    return left_keys, right_keys


def _describe_key(table, key, side, dtype=False):
    """``left column 'k' of table 'fact'``: where a key column's values come from."""
    tables = ", ".join(sorted({repr(slot.name) for slot, _ in table._pieces(key)}))
    return f"{side} column {key!r} of table {tables}" + (
        f" ({table._dtypes[key].resolve()})" if dtype else ""
    )


def _check_key_pair(left, left_key, right, right_key, how, sort):
    """Refuse a key pair where ``pandas.merge`` refuses it, with pandas' message naming both columns.

    pandas decides from the key dtypes and, for object columns, from the Python types of the values
    (``_maybe_coerce_merge_keys``); an outer or sorted join also sorts the keys, which fails on
    values that cannot be ordered. Rather than re-implementing those rules, pandas runs them on a few
    representative rows of each key column (:meth:`Table._representative_rows`: one row per kind of
    value, one missing value): same dtypes, same kinds of values, so the same decision.

    Returns the TypeError to raise after ``validate`` when the keys cannot be sorted (pandas sorts
    after validating), else None. pandas failures that depend on the join's rows are left to the
    sample of :meth:`_Merged._key_dtypes`, which keeps its structure.
    """
    if left._dtypes[left_key].resolve() == right._dtypes[right_key].resolve():
        return None  # pandas merges keys of one dtype as they are (the usual case: no rows read)
    probe_left = left._sample([left_key], left._representative_rows(left_key))
    probe_right = right._sample([right_key], right._representative_rows(right_key))
    keys = (
        {"on": left_key} if left_key == right_key else {"left_on": left_key, "right_on": right_key}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. int vs float keys with fractions: pandas only warns
        try:  # pandas' checks before validate= (its merge object's construction)
            operation = _MERGE_OPERATION(probe_left, probe_right, how=how, sort=sort, **keys)
        except (ValueError, TypeError) as error:
            raise _pandas_failure(error, left, [left_key], right, [right_key]) from None
        try:  # the join itself, after validate=
            operation.get_result()
        except (ValueError, TypeError) as error:
            if "unhashable" in str(error) or str(error).startswith("You are trying to merge on"):
                raise _pandas_failure(error, left, [left_key], right, [right_key]) from None
            if isinstance(error, TypeError) and "not supported between instances" in str(error):
                return _pandas_failure(error, left, [left_key], right, [right_key])
    return None


class _Merge:
    """``pandas.merge`` in its two steps, where pandas' private ``_MergeOperation`` is missing."""

    def __init__(self, left, right, **kwargs):
        self.arguments = left, right, kwargs

    def get_result(self):
        left, right, kwargs = self.arguments
        return pd.merge(left, right, **kwargs)


# pandas' merge object: checks and coerces the keys when built, joins in get_result()
_MERGE_OPERATION = getattr(
    importlib.import_module("pandas.core.reshape.merge"), "_MergeOperation", _Merge
)


def _pandas_failure(error, left, left_keys, right, right_keys):
    """pandas' error on a few rows of the key columns, as ilargi's: same class, columns named."""
    message = str(error)
    refused = message.startswith("You are trying to merge on")
    columns = " and ".join(
        f"{_describe_key(left, lk, 'left', not refused)} and {_describe_key(right, rk, 'right', not refused)}"
        for lk, rk in zip(left_keys, right_keys)
    )
    if refused:
        message = (
            f"{message.split('. If you wish')[0]}: {columns}. Convert one side (e.g. with astype) "
            "so that both hold the same kind of values"
        )
    else:
        message = f"cannot merge on {columns}: pandas fails on these keys ({message})"
    return type(error)(message)


def _key_codes(left, left_keys, right, right_keys, sort):
    """Target-level int64 codes of the (composite) keys of both sides, in one code space."""
    per_key = [
        _column_codes(left, left_key, right, right_key, sort)
        for left_key, right_key in zip(left_keys, right_keys)
    ]
    left_codes, right_codes, sizes = zip(*per_key)
    return combine_codes(left_codes, right_codes, sizes, sort)


def _sorted_by_key(left_codes, right_codes, left_take, right_take, how):
    """``sort=True``: the rows of an inner, left or right join stably ordered by their (sorted) key
    codes, which is pandas' order: by key, then as the unsorted join lists them."""
    codes, take = (right_codes, right_take) if how == "right" else (left_codes, left_take)
    order = np.argsort(codes if take is None else codes.take(take), kind="stable")
    return (
        order if left_take is None else left_take.take(order),
        order if right_take is None else right_take.take(order),
    )


def _column_codes(left, left_key, right, right_key, sort):
    left_pieces, right_pieces = left._pieces(left_key), right._pieces(right_key)
    distinct = {}
    for slot, column in left_pieces + right_pieces:
        distinct.setdefault((id(slot.source), column), (slot.source, column))
    try:
        try:
            codes, count = _source_codes(list(distinct.values()), sort)
        except TypeError:
            if not sort:
                raise
            # values no joined row takes (a row an earlier join dropped) may be what cannot be
            # sorted: sort only the values the joined rows hold, as pandas does
            codes, count = _referenced_codes(left_pieces + right_pieces, distinct, sort)
    except TypeError as error:  # unhashable values (lists, dicts), or values that cannot be sorted
        raise TypeError(
            f"cannot merge on {_describe_key(left, left_key, 'left', True)} and "
            f"{_describe_key(right, right_key, 'right', True)}: their values cannot be "
            f"{'sorted' if sort and 'hashable' not in str(error) else 'hashed'} ({error}); "
            "keys must be numbers, strings, booleans or dates"
        ) from None
    # Missing values join the NA code, first or last in key order. Into new arrays: integer keys
    # are their own codes (factorize_jointly), so a code array may be the caller's column.
    na_first = _missing_sorts_first(
        left._dtypes[left_key].resolve(), right._dtypes[right_key].resolve()
    )
    for i, piece_codes in enumerate(codes):
        if na_first:
            codes[i] = piece_codes + 1  # -1 (missing) becomes 0
        else:
            missing = piece_codes < 0
            if missing.any():
                codes[i] = np.where(missing, count, piece_codes)
    na = 0 if na_first else count
    code_of = dict(zip(distinct, codes))

    def target_codes(table, pieces):
        return gather_codes(
            [(code_of[id(slot.source), column], slot.rows) for slot, column in pieces],
            len(table),
            na,
        )

    return target_codes(left, left_pieces), target_codes(right, right_pieces), count + 1


def _missing_sorts_first(left_dtype, right_dtype):
    """Whether pandas orders missing keys first when it sorts them (outer joins, ``sort=True``).

    pandas matches datetimes of both sides (naive or both tz-aware), timedeltas of one dtype and
    categoricals of one dtype on their integer representation, where NaT is the smallest int64 and a
    missing category the code -1; every other key puts missing values last.
    """
    kinds = {getattr(left_dtype, "kind", None), getattr(right_dtype, "kind", None)}
    both_tz = isinstance(left_dtype, pd.DatetimeTZDtype) and isinstance(
        right_dtype, pd.DatetimeTZDtype
    )
    if both_tz or (
        kinds == {"M"}
        and not isinstance(left_dtype, pd.DatetimeTZDtype)
        and not isinstance(right_dtype, pd.DatetimeTZDtype)
    ):
        return True
    return left_dtype == right_dtype and (
        kinds == {"m"} or isinstance(left_dtype, pd.CategoricalDtype)
    )


def _referenced_codes(pieces, distinct, sort):
    """Like :func:`_source_codes` over the source rows some joined row takes only (-1 elsewhere)."""
    masks = {}
    for slot, column in pieces:
        key = (id(slot.source), column)
        mask = masks.setdefault(key, np.zeros(slot.source.nrows, dtype=bool))
        if slot.rows is None:
            mask[:] = True
        else:
            mask[slot.rows[slot.rows >= 0]] = True
    values = [
        source.read([column])[column][masks[key]] for key, (source, column) in distinct.items()
    ]
    taken, count = factorize_jointly(values, sort)
    codes = []
    for key, piece_codes in zip(distinct, taken):
        full = np.full(len(masks[key]), -1, dtype=np.int64)
        full[masks[key]] = piece_codes
        codes.append(full)
    return codes, count


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
    kind = (
        validate
        if "_" in validate
        else {"1:1": "one_to_one", "1:m": "one_to_many", "m:1": "many_to_one"}[validate]
    )
    raise pd.errors.MergeError(
        f"validate={validate!r}: merge keys {keys} are not unique in the {side} table {table.name!r}: "
        f"key {value[0] if len(value) == 1 else value!r} appears {count} times; not a {kind} merge"
    )


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
        self.left_take, self.right_take = left_take, right_take
        self.nrows = (
            len(left)
            if left_take is None and right_take is None
            else len(left_take if left_take is not None else right_take)
        )
        taken = set()
        self.slots = [
            Slot(s.source, _compose(s.rows, left_take), unique_name(s.name, taken), s.nan_missing)
            for s in left._slots
        ]
        self.offset = len(self.slots)
        self.slots += [
            Slot(s.source, _compose(s.rows, right_take), unique_name(s.name, taken), s.nan_missing)
            for s in right._slots
        ]
        self.taken = taken
        self.masked = {}

    def table(self, left_keys, right_keys, suffixes, overlap, how, sort):
        left, right = self.left, self.right
        shared_keys = {lk for lk, rk in zip(left_keys, right_keys) if lk == rk}
        # pandas fills a left key column from the right key where the left row is absent when both
        # keys have one name -- or when either label is not a string (pandas' _should_fill)
        filled = {
            lk: rk
            for lk, rk in zip(left_keys, right_keys)
            if lk == rk or not (isinstance(lk, str) and isinstance(rk, str))
        }
        right_columns = [c for c in right.columns if c not in shared_keys]
        overlapping = set(left.columns) & set(right_columns)
        left_suffix, right_suffix = _suffix_pair(suffixes)
        if overlapping and overlap == "suffix" and not left_suffix and not right_suffix:
            raise ValueError(
                f"columns overlap but no suffix specified: {sorted(map(str, overlapping))}"
            )
        left_absent = None if self.left_take is None else self.left_take < 0
        left_missing = left_absent is not None and bool(left_absent.any())
        right_missing = self.right_take is not None and bool((self.right_take < 0).any())
        columns, specs, keyed = [], [], []
        for column in left.columns:
            pieces, spec = tuple(left._columns[column]), left._dtypes[column]
            spec = WithMissing(spec) if left_missing else spec
            if column in filled and left_missing:
                # (when every left row is absent, pandas takes the right values as they are)
                nan_missing = not left_absent.all() and _strings_only(right, filled[column])
                pieces += self._masked_right(filled[column], left_absent, nan_missing)
            elif column in overlapping and overlap == "coalesce":
                more = self._masked_right(column, self._uncovered(pieces))
                spec = CommonDtype(
                    [left._dtypes[column], right._dtypes[column]],
                    bool(self._uncovered(pieces + more).any()),
                )
                pieces += more
            renamed = column in overlapping and overlap == "suffix"
            name = f"{column}{left_suffix}" if renamed and left_suffix else column
            columns.append((name, pieces))
            specs.append(spec)
            keyed.append(column in left_keys or column in right_keys)
        for column in right_columns:
            if column in overlapping and overlap != "suffix":
                continue
            renamed = column in overlapping and right_suffix
            columns.append(
                (f"{column}{right_suffix}" if renamed else column, self._right_pieces(column))
            )
            spec = right._dtypes[column]
            specs.append(WithMissing(spec) if right_missing else spec)
            keyed.append(column in left_keys or column in right_keys)
        names = [name for name, _ in columns]
        duplicated = sorted(str(name) for name, count in Counter(names).items() if count > 1)
        if duplicated:
            raise pd.errors.MergeError(
                f"Passing 'suffixes' which cause duplicate columns {duplicated} is not allowed."
            )
        coerced = any(
            left._dtypes[lk].resolve() != right._dtypes[rk].resolve()
            for lk, rk in zip(left_keys, right_keys)
        )
        if any(keyed) and (
            coerced or left_missing
        ):  # else pandas keeps the key columns as they are
            pandas_dtypes = self._key_dtypes(
                left_keys,
                right_keys,
                how,
                suffixes if overlap == "suffix" else ("", "\0ilargi"),
                sort,
            )
            specs = [
                Fixed(pandas_dtypes[name]) if is_key and name in pandas_dtypes else spec
                for (name, _), spec, is_key in zip(columns, specs, keyed)
            ]
        return self._pruned(columns, specs)

    def _key_dtypes(self, left_keys, right_keys, how, suffixes, sort):
        """The dtypes pandas gives the key columns of this merge, from pandas itself on a few rows.

        A key column's dtype depends on pandas' coercion of the pair (bool vs int: object;
        categoricals with other categories: the categories' dtype), decided from the dtypes and the
        kinds of values, and on which side misses rows (the key is filled from the other side). The
        sample keeps both: the representative rows of each key column, and one joined row of each
        kind present (matched, left only, right only), each row with its partner, so the sample
        has no kind of joined row the join does not have.
        """
        left, right = self.left, self.right
        left_take = np.arange(self.nrows) if self.left_take is None else self.left_take
        right_take = np.arange(self.nrows) if self.right_take is None else self.right_take
        chosen = [
            np.flatnonzero(mask)[:1]
            for mask in ((left_take >= 0) & (right_take >= 0), left_take < 0, right_take < 0)
        ]
        alone = []
        for table, take, keys in ((left, left_take, left_keys), (right, right_take, right_keys)):
            # pandas' coercion looks at the kinds of values: keep the representative rows, each in
            # a joined row of its own (with its partner), or alone if the join drops it
            wanted = np.unique(np.concatenate([table._representative_rows(key) for key in keys]))
            hits = np.flatnonzero(np.isin(take, wanted))
            first = hits[np.unique(take[hits], return_index=True)[1]]
            chosen.append(first)
            alone.append(np.setdiff1d(wanted, take[first]))
        if self.left_take is not None or self.right_take is not None:
            # pandas skips filling the key when both of its row indexers are the identity, which
            # changes the key dtype of datetimes of different units: the sample must not be an
            # identity join where this join is not one
            side = 0 if self.left_take is not None else 1
            rows, lonely = _identity_witness(
                (left_take, right_take)[side], len((left, right)[side])
            )
            chosen.append(rows)
            alone[side] = np.union1d(alone[side], lonely)
        chosen = np.unique(np.concatenate(chosen))
        samples = []
        for table, take, own, other, more in (
            (left, left_take, left_keys, right_keys, alone[0]),
            (right, right_take, right_keys, left_keys, alone[1]),
        ):
            rows = np.concatenate([take.take(chosen), more])
            # pandas also coerces a column of one side named like a key of the other
            columns = list(dict.fromkeys([*own, *(c for c in other if c in table._columns)]))
            samples.append(table._sample(columns, np.unique(rows[rows >= 0])))
        keys = (
            {"on": list(left_keys)}
            if list(left_keys) == list(right_keys)
            else {"left_on": list(left_keys), "right_on": list(right_keys)}
        )
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                merged = pd.merge(*samples, how=how, suffixes=suffixes, sort=sort, **keys)
        except (ValueError, TypeError) as error:  # pandas fails on these keys, whatever the rows
            raise _pandas_failure(error, left, left_keys, right, right_keys) from None
        return merged.dtypes.to_dict()

    def _right_pieces(self, column):
        return tuple((self.offset + index, c) for index, c in self.right._columns[column])

    def _uncovered(self, pieces):
        uncovered = np.ones(self.nrows, dtype=bool)
        for index, _ in pieces:
            uncovered &= self.slots[index].row_vector(self.nrows) < 0
        return uncovered

    def _masked_right(self, column, keep, nan_missing=False):
        """The right column's pieces restricted to the rows in ``keep`` (new slots, row-disjoint).

        ``nan_missing``: the pieces fill a merged key whose right values pandas turns into str on the
        way (object strings), so a missing right value shows as NaN, never None."""
        pieces = []
        for index, source_column in self._right_pieces(column):
            slot = self.slots[index]
            cache_key = (index, keep.tobytes(), nan_missing)
            if cache_key not in self.masked:
                rows = np.where(keep, slot.row_vector(self.nrows), -1)
                self.masked[cache_key] = None
                if (rows >= 0).any():
                    self.slots.append(
                        Slot(
                            slot.source,
                            rows,
                            unique_name(f"{slot.name}.{column}", self.taken),
                            nan_missing or slot.nan_missing,
                        )
                    )
                    self.masked[cache_key] = len(self.slots) - 1
            if self.masked[cache_key] is not None:
                pieces.append((self.masked[cache_key], source_column))
        return tuple(pieces)

    def _pruned(self, columns, specs):
        """Drop slots no column uses (e.g. a right table that only held the key) and renumber."""
        used = sorted({index for _, pieces in columns for index, _ in pieces})
        number = {old: new for new, old in enumerate(used)}
        return type(self.left)._assemble(  # Table, which this module cannot import (a cycle)
            self.left.name,
            [self.slots[i] for i in used],
            [(name, tuple((number[i], c) for i, c in pieces)) for name, pieces in columns],
            self.nrows,
            {name: spec for (name, _), spec in zip(columns, specs)},
        )


def _strings_only(table, column):
    """Whether an object key column holds only strings (and missing values).

    pandas fills a merged key with ``Index.where(mask, right values)``, which infers a str array
    from object strings: their missing values come out as NaN, where other object keys keep None.
    """
    if not pd.api.types.is_object_dtype(table._dtypes[column].resolve()):
        return False
    values = table._sample([column], table._representative_rows(column))[column]
    return pd.api.types.infer_dtype(values, skipna=True) == "string"


def _identity_witness(take, nrows):
    """Why a row indexer of a join is not the identity: ``(joined rows, rows of the side alone)``
    that, kept in a sample of the join, keep the sample's indexer from being the identity."""
    none = np.empty(0, dtype=np.int64)
    if (take < 0).any():  # a row the side misses
        return np.flatnonzero(take < 0)[:1], none
    counts = np.bincount(take, minlength=nrows)
    if (counts == 0).any():  # a row of the side the join drops
        return none, np.flatnonzero(counts == 0)[:1]
    if (counts > 1).any():  # a row of the side the join repeats
        return np.flatnonzero(take == np.flatnonzero(counts > 1)[0])[:2], none
    back = np.flatnonzero(np.diff(take) < 0)[:1]  # rows out of order
    return np.concatenate([back, back + 1]), none
