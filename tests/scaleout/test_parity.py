"""Dask parity: a chunked Parquet join equals the in-memory Table's and pandas', or is refused as
they refuse it.

Each case is a seed: a fact table written to Parquet in random row groups, with a key of a random
dtype (the fuzz's kinds of ``tests/table/test_fuzz.py``: int widths, nullable, floats with NaN,
strings, categoricals, bools, datetimes, ...) and NULLs; a dimension whose key takes another random
dtype, broadcast or read by key range, sometimes a snowflake's second dimension; a random ``how``
and a random chunking. ``Table.from_parquet(..., chunks=...)`` must give the matrix and target of
the in-memory ``Table`` of the same rows (and pandas' joined row count), or refuse with the error
class and message the in-memory merge gives. ``benchmarks/reliability_tables.py`` counts the
outcomes of the same cases.
"""

import tempfile
import warnings
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import pytest

from ilargi import Table
from tests.table.test_fuzz import key_column, key_kind_pair

SAME, REFUSED, SILENT, UNHELPFUL, CRASH = (
    "same",
    "refused alike",
    "silent difference",
    "unhelpful error",
    "crash",
)
CHUNKINGS = (1, 2, 3, 5, 7, 64, "row_groups", "1B", "2KiB")
# what pyarrow cannot write or reads back as another kind than the frame had (the in-memory
# reference reads the same file, so a round trip that changes the dtype is still compared)
NOT_PARQUET = ()


def _dimension(rng, kind, name):
    """A dimension: unique keys of ``kind`` (a NULL key at most once), a number, a category."""
    keys = key_column(kind, 6, rng, missing=rng.random() < 0.5)
    keep = ~keys.isna().to_numpy() | (np.cumsum(keys.isna().to_numpy()) == 1)
    keys = keys[keep]
    keys = keys[~keys.duplicated(keep="first")].reset_index(drop=True)
    n = len(keys)
    return pd.DataFrame(
        {
            name: keys,
            f"{name}_v": np.round(rng.normal(size=n), 2),
            f"{name}_c": pd.Series(rng.choice(list("pqr"), n), dtype="str"),
        }
    )


def draw(seed):
    """The tables and options of one case."""
    rng = np.random.default_rng(seed)
    first = key_kind_pair(rng)
    n = int(rng.integers(0, 30))
    fact = pd.DataFrame(
        {
            "k": key_column(first[0], n, rng, missing=rng.random() < 0.6),
            "x": np.round(rng.normal(size=n), 2),
            "f": pd.Series(rng.choice(["a", "b", None], n), dtype="str"),
        }
    )
    dim = _dimension(rng, first[1], "dk")
    snowflake = rng.random() < 0.3
    if snowflake:
        second = key_kind_pair(rng)
        dim["k2"] = key_column(second[0], len(dim), rng, missing=True)
        dim2 = _dimension(rng, second[1], "k2")
    by_range = rng.random() < 0.3
    how = str(rng.choice(["inner", "left"]))
    chunks = CHUNKINGS[rng.integers(len(CHUNKINGS))]
    row_group = int(rng.integers(1, 9))
    return fact, dim, (dim2 if snowflake else None), by_range, how, chunks, row_group, first


def parity_case(seed):
    """(outcome, detail) of one random chunked join against the in-memory Table and pandas."""
    fact, dim, dim2, by_range, how, chunks, row_group, first = draw(seed)
    snowflake = dim2 is not None
    with (
        tempfile.TemporaryDirectory() as root,
        warnings.catch_warnings(),
        dask.config.set(scheduler="sync"),
    ):
        warnings.simplefilter("ignore")
        try:
            fact.to_parquet(Path(root) / "fact.parquet", row_group_size=row_group)
            dim.to_parquet(Path(root) / "dim.parquet", row_group_size=2)
        except Exception as error:  # noqa: BLE001 -- a frame pyarrow cannot store: no case
            return SAME, f"not stored: {type(error).__name__}"
        read_fact = pd.read_parquet(Path(root) / "fact.parquet")
        read_dim = pd.read_parquet(Path(root) / "dim.parquet")
        columns = ["f", "dk_v", "dk_c"] + (["k2_v", "k2_c"] if snowflake else [])

        def in_memory():
            table = Table(read_fact, name="fact").merge(
                Table(read_dim, name="dim"), left_on="k", right_on="dk", how=how
            )
            if snowflake:
                table = table.merge(Table(dim2, name="dim2"), on="k2", how="left")
            X, y = table.to_matrix(columns=columns, target="x")
            return X.toarray(), y, X.columns

        def chunked():
            right = (
                Table.from_parquet(Path(root) / "dim.parquet", chunks="row_groups")
                if by_range and read_dim["dk"].dtype.kind in "iuf"
                else Table(read_dim, name="dim")
            )
            table = Table.from_parquet(Path(root) / "fact.parquet", chunks=chunks).merge(
                right, left_on="k", right_on="dk", how=how
            )
            if snowflake:
                table = table.merge(Table(dim2, name="dim2"), on="k2", how="left")
            X, y = table.to_matrix(columns=columns, target="x")
            return X.compute().toarray(), y.compute(), X.columns

        results, first_join = [], None
        for run in (in_memory, chunked):
            try:
                results.append(run())
            except Exception as error:  # noqa: BLE001 -- compared below
                results.append(error)
        expected, got = results
        try:
            reference = first_join = read_fact.merge(read_dim, left_on="k", right_on="dk", how=how)
            if snowflake:
                reference = reference.merge(dim2, on="k2", how="left")
        except Exception as error:  # noqa: BLE001
            reference = error
    where = (
        f"{first} {how} chunks={chunks!r}{' snowflake' if snowflake else ''}"
        f"{' by range' if by_range else ''}"
    )
    if isinstance(expected, Exception) or isinstance(got, Exception):
        if isinstance(expected, Exception) and isinstance(got, Exception):
            if type(got) is type(expected) and str(got) == str(expected):
                return REFUSED, str(got)
            named = any(f"'{c}'" in str(got) for c in ("k", "dk", "k2"))
            if isinstance(got, type(expected)) and named:
                return REFUSED, str(got)
            return UNHELPFUL, f"{where}: {type(got).__name__}: {got} (in memory: {expected})"
        if isinstance(got, Exception):
            if (
                str(got).startswith("You are trying to merge on")
                and "key 'k2'" in str(got)
                and not first_join["k2"].notna().any()
            ):
                # the documented leeway: a chunked merge decides on the key columns before any
                # row is read, the in-memory one on the joined rows, here none
                return REFUSED, f"stricter on an empty join: {got}"
            kind = UNHELPFUL if isinstance(got, (ValueError, TypeError)) else CRASH
            return kind, f"{where}: {type(got).__name__}: {got}"
        return SILENT, f"{where}: accepted; the in-memory Table refuses: {expected}"
    (X, y, names), (D, yd, dnames) = expected, got
    if not isinstance(reference, Exception) and len(reference) != len(X):
        return SILENT, f"{where}: in memory {len(X)} rows, pandas {len(reference)}"
    if names != dnames or X.shape != D.shape:
        return SILENT, f"{where}: columns {dnames} {D.shape}, in memory {names} {X.shape}"
    if not (np.allclose(D, X, equal_nan=True) and np.allclose(yd, y, equal_nan=True)):
        return SILENT, f"{where}: other values than in memory"
    return SAME, ""


@pytest.mark.parametrize("seed", range(30))
def test_chunked_join_as_in_memory(seed):
    outcome, detail = parity_case(seed)
    assert outcome in (SAME, REFUSED), detail
