"""Loader for the Santoku datasets (Flights, Walmart, Yelp): a fact table and named categorical dimensions.

A folder holds, per split (``traintest`` and ``hold``):

* the fact table ``<stem>MultS.csv``: the target (first column), the fact table's own columns, and one
  FK column per dimension whose values are **1-based row numbers** into that dimension's CSV;
* the dimension CSVs, shared by both splits; a dimension's first column is its own key, and it has the
  same name as the fact table's FK column that refers to it (Flights has two airport dimensions, one per
  role: ``sairportid`` for the source, ``dairportid`` for the destination);
* the denormalized table ``<stem>.csv``: the joined answer key, where the FK columns hold the
  dimension's own key values.

Values carry single quotes (``'21'``); they are stripped and every column is kept as a string, exactly
as in the answer key. The loader turns each FK row number into the dimension's key value and joins on
the key with :class:`ilargi.Table`, so the result, column for column, is the answer key.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from ilargi.table import Table

__all__ = ["load_santoku", "load_santoku_matrix", "santoku_answer_key"]

SPLITS = ("traintest", "hold")

# Positive class of each dataset's binary target (codeshare flight, above-median sales, high stars).
_POSITIVE_LABEL = {"codeshare": "t", "weekly_sales": "1", "stars": "H"}


def _read_quoted_csv(path):
    """A Santoku CSV as strings, with the single quotes around headers and values stripped."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, engine="c")
    frame.columns = [column.strip("'") for column in frame.columns]
    return frame.apply(lambda column: column.str.strip("'"))


def _fact_path(directory, split):
    folder = Path(directory)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    matches = sorted(p for p in folder.glob("*MultS.csv") if split in p.name)
    if len(matches) != 1:
        raise FileNotFoundError(
            f"{folder}: expected one '*{split}*MultS.csv' fact file, found "
            f"{[p.name for p in matches]}"
        )
    return matches[0]


def _dimension_paths(folder):
    """The dimension CSVs: every CSV that is neither a fact file nor a denormalized answer key."""
    facts = {p.name for p in folder.glob("*MultS.csv")}
    answer_keys = {name.replace("MultS", "") for name in facts}
    return sorted(p for p in folder.glob("*.csv") if p.name not in facts | answer_keys)


def _frames(directory, split):
    """(fact, [(dimension name, dimension frame, key)]), the fact FKs mapped to the dimensions' key values."""
    fact_path = _fact_path(directory, split)
    fact = _read_quoted_csv(fact_path)
    dimensions = []
    for path in _dimension_paths(fact_path.parent):
        dimension = _read_quoted_csv(path)
        key = dimension.columns[0]
        if key not in fact.columns:
            continue
        row_numbers = pd.to_numeric(fact[key]).to_numpy(np.int64)
        if row_numbers.min() < 1 or row_numbers.max() > len(dimension):
            raise ValueError(
                f"{fact_path.name}: column {key!r} holds row numbers outside 1..{len(dimension)} "
                f"of {path.name}"
            )
        fact[key] = dimension[key].to_numpy()[row_numbers - 1]
        dimensions.append((path.stem, dimension, key))
    dimensions.sort(
        key=lambda dimension: fact.columns.get_loc(dimension[2])
    )  # the fact table's FK order
    if not dimensions:
        raise ValueError(
            f"{fact_path.name}: no dimension CSV in {fact_path.parent} has a key column "
            f"that is a column of the fact table"
        )
    return fact_path.stem, fact, dimensions


def _join(fact_name, fact, dimensions):
    table = Table(fact, name=fact_name)
    for name, dimension, key in dimensions:
        table = table.merge(
            Table(dimension, name=name), on=key, how="inner", validate="many_to_one"
        )
    return table


def load_santoku(directory, split="traintest"):
    """The joined Santoku table of one split as a lazy :class:`ilargi.Table` (all columns strings).

    Columns: the fact table's columns (FK columns holding the dimensions' key values), then each
    dimension's columns; ``.to_pandas()`` equals the denormalized file (see
    :func:`santoku_answer_key`) column by column.

    Parameters
    ----------
    directory : str or path-like
        A dataset folder such as ``santoku/Flights``.
    split : {"traintest", "hold"}, default="traintest"
        Which fact file.

    Returns
    -------
    Table
        The inner join of the fact table with every dimension.

    Raises
    ------
    ValueError
        For an unknown split, FK row numbers out of range, or no matching dimension file.
    FileNotFoundError
        If the split's fact file is missing or ambiguous.

    Examples
    --------
    >>> from ilargi.datasets import load_santoku
    >>> table = load_santoku("../shared/datasets/santoku/Flights")  # doctest: +SKIP
    >>> table.tables  # doctest: +SKIP
    """
    return _join(*_frames(directory, split))


def load_santoku_matrix(directory, split="traintest", categorical="onehot"):
    """A Santoku split encoded for training, every feature column categorical.

    Parameters
    ----------
    directory : str or path-like
        A dataset folder such as ``santoku/Flights``.
    split : {"traintest", "hold"}, default="traintest"
        Which fact file.
    categorical : {"onehot", "ordinal"}, default="onehot"
        How the columns are encoded (see :meth:`ilargi.Table.to_matrix`).

    Returns
    -------
    nm : NormalizedMatrix
        The encoded features.
    y : ndarray of float64
        1.0 for the positive class (codeshare ``t``, weekly_sales ``1``, stars ``H``), else 0.0.

    Raises
    ------
    ValueError
        If the target column is not one of the three known ones.

    Examples
    --------
    >>> from ilargi.datasets import load_santoku_matrix
    >>> nm, y = load_santoku_matrix("../shared/datasets/santoku/Walmart")  # doctest: +SKIP
    """
    fact_name, fact, dimensions = _frames(directory, split)
    target = fact.columns[0]
    if target not in _POSITIVE_LABEL:
        raise ValueError(
            f"{fact_name}: unknown target column {target!r}; known: {sorted(_POSITIVE_LABEL)}"
        )
    fact[target] = (fact[target] == _POSITIVE_LABEL[target]).astype(np.float64)
    return _join(fact_name, fact, dimensions).to_matrix(target=target, categorical=categorical)


def santoku_answer_key(directory, split="traintest"):
    """The denormalized (already joined) file of a split: the reference for :func:`load_santoku`.

    Parameters
    ----------
    directory : str or path-like
        A dataset folder such as ``santoku/Flights``.
    split : {"traintest", "hold"}, default="traintest"
        Which split.

    Returns
    -------
    pandas.DataFrame
        The file, every column a string, quotes stripped.

    Examples
    --------
    >>> from ilargi.datasets import santoku_answer_key
    >>> frame = santoku_answer_key("../shared/datasets/santoku/Flights")  # doctest: +SKIP
    """
    fact_path = _fact_path(directory, split)
    return _read_quoted_csv(fact_path.with_name(fact_path.name.replace("MultS", "")))
