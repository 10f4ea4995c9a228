"""TPC-H at any scale factor, generated with the ``tpchgen-cli`` tool (PyPI package tpchgen-cli, in
the ``datasets`` extra: ``pip install "ilargi[datasets]"``).

The eight tables are generated once per scale factor as Parquet files into a cache folder
(default ``~/.cache/ilargi/tpch/sf<SF>``) and reused afterwards. Decimal columns are read as float64
and dates as ``datetime64``, so numeric columns are ready for :meth:`ilargi.Table.to_matrix`.

The snowflake used by the examples and benchmarks::

    lineitem -> orders -> customer -> nation       (l_orderkey, o_custkey, c_nationkey)
    lineitem -> part, lineitem -> supplier          (l_partkey, l_suppkey)
"""

import pyarrow as pa
import pyarrow.parquet as pq

from ilargi.table import Table

from ._generated import generated_dir

__all__ = [
    "TPCH_TABLES",
    "tpch_dir",
    "load_tpch_frames",
    "load_tpch",
    "tpch_table",
    "tpch_regression",
]

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")

# (table, its key, the table that holds the FK, the FK column), in merge order.
SNOWFLAKE = (
    ("orders", "o_orderkey", "lineitem", "l_orderkey"),
    ("customer", "c_custkey", "orders", "o_custkey"),
    ("nation", "n_nationkey", "customer", "c_nationkey"),
    ("part", "p_partkey", "lineitem", "l_partkey"),
    ("supplier", "s_suppkey", "lineitem", "l_suppkey"),
)

# The regression of tpch_regression: l_extendedprice = l_quantity * p_retailprice (a product across the
# join, so a linear model fits it well only with the part's price); the other columns are noise that a
# model must learn to ignore. Columns derived from the target (o_totalprice) are left out.
REGRESSION_TARGET = "l_extendedprice"
REGRESSION_FEATURES = (
    "l_quantity",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_linestatus",
    "l_shipmode",
    "o_orderstatus",
    "o_orderpriority",
    "c_acctbal",
    "c_mktsegment",
    "p_size",
    "p_retailprice",
    "p_mfgr",
    "p_container",
)


def tpch_dir(scale_factor, cache_dir=None):
    """The folder with ``<table>.parquet`` for all eight TPC-H tables, generated on first use.

    Parameters
    ----------
    scale_factor : float
        TPC-H scale factor, > 0 (1: about 6 million lineitem rows).
    cache_dir : path-like, optional
        Cache root (default ``$XDG_CACHE_HOME/ilargi/tpch`` or ``~/.cache/ilargi/tpch``).

    Returns
    -------
    pathlib.Path
        ``<cache root>/sf<scale_factor>``.

    Raises
    ------
    ValueError
        If ``scale_factor`` is not positive.
    RuntimeError
        If ``tpchgen-cli`` is missing (the message names the ``datasets`` extra) or fails.

    Examples
    --------
    >>> from ilargi.datasets import tpch_dir
    >>> tpch_dir(0.01)  # doctest: +SKIP
    PosixPath('/home/user/.cache/ilargi/tpch/sf0.01')
    """
    return generated_dir(
        "tpch",
        scale_factor,
        cache_dir,
        "tpchgen-cli",
        ["parquet", "--quiet"],
        TPCH_TABLES,
        "pip install 'ilargi[datasets]' (or pip install tpchgen-cli)",
    )


def _to_analysis_types(table):
    """Decimals become float64 and dates timestamps: the types pandas and a model can compute with."""
    fields = []
    for field in table.schema:
        if pa.types.is_decimal(field.type):
            field = field.with_type(pa.float64())
        elif pa.types.is_date(field.type):
            field = field.with_type(pa.timestamp("ms"))
        fields.append(field)
    return table.cast(pa.schema(fields))


def _read(path, columns):
    if columns is not None:
        columns = [name for name in pq.read_schema(path).names if name in columns]
    return _to_analysis_types(pq.read_table(path, columns=columns)).to_pandas()


def load_tpch_frames(scale_factor, cache_dir=None, tables=TPCH_TABLES, columns=None):
    """The TPC-H tables as pandas DataFrames (generated into the cache on first use).

    Parameters
    ----------
    scale_factor : float
        TPC-H scale factor, > 0.
    cache_dir : path-like, optional
        Cache root (see :func:`tpch_dir`).
    tables : iterable of str, default=TPCH_TABLES
        The tables to read.
    columns : collection of str, optional
        If given, each table keeps only its columns in this collection (reading less is faster).

    Returns
    -------
    dict of str to pandas.DataFrame
        The tables by name; decimals as float64, dates as timestamps.

    Raises
    ------
    ValueError
        For an unknown table.

    Examples
    --------
    >>> from ilargi.datasets import load_tpch_frames
    >>> frames = load_tpch_frames(0.01, tables=("nation",))  # doctest: +SKIP
    >>> frames["nation"].shape  # doctest: +SKIP
    (25, 4)
    """
    folder = tpch_dir(scale_factor, cache_dir)
    unknown = sorted(set(tables) - set(TPCH_TABLES))
    if unknown:
        raise ValueError(f"unknown TPC-H tables {unknown}; the tables are {TPCH_TABLES}")
    return {name: _read(folder / f"{name}.parquet", columns) for name in tables}


def load_tpch(scale_factor, cache_dir=None, tables=TPCH_TABLES, columns=None):
    """The TPC-H tables as :class:`ilargi.Table` objects.

    Parameters
    ----------
    scale_factor, cache_dir, tables, columns
        As in :func:`load_tpch_frames`.

    Returns
    -------
    dict of str to Table
        The tables by name.

    Examples
    --------
    >>> from ilargi.datasets import load_tpch
    >>> tables = load_tpch(0.01, tables=("nation", "region"))  # doctest: +SKIP
    """
    frames = load_tpch_frames(scale_factor, cache_dir, tables, columns)
    return {name: Table(frame, name=name) for name, frame in frames.items()}


def tpch_table(
    scale_factor,
    cache_dir=None,
    tables=("orders", "customer", "nation", "part", "supplier"),
    columns=None,
):
    """The lazy snowflake ``lineitem -> orders -> customer -> nation`` (+ part, supplier) as one Table.

    Parameters
    ----------
    scale_factor : float
        TPC-H scale factor, > 0.
    cache_dir : path-like, optional
        Cache root (see :func:`tpch_dir`).
    tables : iterable of str, default=("orders", "customer", "nation", "part", "supplier")
        The tables merged onto lineitem, in :data:`SNOWFLAKE` order.
    columns : collection of str, optional
        If given, only these columns are read, plus the keys the merges need.

    Returns
    -------
    Table
        The inner joins, ``validate="many_to_one"``.

    Raises
    ------
    ValueError
        For a table that is not in the snowflake, or one whose FK lives in a table not picked.

    Examples
    --------
    >>> from ilargi.datasets import tpch_table
    >>> table = tpch_table(0.01, tables=("orders", "customer"))  # doctest: +SKIP
    >>> table.tables  # doctest: +SKIP
    ['lineitem', 'orders', 'customer']
    """
    unknown = sorted(set(tables) - {step[0] for step in SNOWFLAKE})
    if unknown:
        raise ValueError(f"tpch_table merges only {[step[0] for step in SNOWFLAKE]}, not {unknown}")
    wanted = [step for step in SNOWFLAKE if step[0] in tables]
    for name, _, parent, foreign_key in wanted:
        if parent != "lineitem" and parent not in tables:
            raise ValueError(
                f"tpch_table: {name} is merged through {parent}.{foreign_key}, "
                f"but {parent} is not among {tables}"
            )
    if columns is not None:
        columns = set(columns).union(*((key, foreign_key) for _, key, _, foreign_key in wanted))
    loaded = load_tpch(
        scale_factor, cache_dir, ("lineitem", *(step[0] for step in wanted)), columns
    )
    table = loaded["lineitem"]
    for name, key, _, foreign_key in wanted:
        table = table.merge(
            loaded[name], left_on=foreign_key, right_on=key, how="inner", validate="many_to_one"
        )
    return table


def tpch_regression(scale_factor, cache_dir=None):
    """``(NormalizedMatrix, y)`` of lineitem ⋈ orders ⋈ customer ⋈ part with target ``l_extendedprice``.

    Parameters
    ----------
    scale_factor : float
        TPC-H scale factor, > 0.
    cache_dir : path-like, optional
        Cache root (see :func:`tpch_dir`).

    Returns
    -------
    nm : NormalizedMatrix
        :data:`REGRESSION_FEATURES`: numeric columns as numbers, string columns one-hot encoded
        per source table; only the columns used are read.
    y : ndarray of float64
        ``l_extendedprice``.

    Examples
    --------
    >>> from ilargi.datasets import tpch_regression
    >>> from ilargi.models import Ridge
    >>> X, y = tpch_regression(0.01)  # doctest: +SKIP
    >>> Ridge(alpha=1.0).fit(X, y).score(X, y)  # doctest: +SKIP
    """
    features = list(REGRESSION_FEATURES)
    table = tpch_table(
        scale_factor, cache_dir, ("orders", "customer", "part"), [*features, REGRESSION_TARGET]
    )
    return table.to_matrix(columns=features, target=REGRESSION_TARGET)
