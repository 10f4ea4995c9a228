"""Differential tests: ilargi.Table.merge / ilargi.concat against pandas.merge / pandas.concat.

Random small tables (hypothesis) with dangling keys, duplicate keys (many-to-many), missing keys, single
and composite keys, snowflake chains, role-playing dimensions and unions; ``Table.to_pandas()`` must equal
the pandas result: values, column names and order, row order.
"""

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi
from ilargi.table import Table, concat

HOWS = ["inner", "left", "right", "outer"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_same(table, expected, any_missing=False):
    """Table.to_pandas() equals the pandas frame, dtypes included.

    ``any_missing``: None and NaN count as the same missing value (DuckDB hands out all-NULL text
    columns as None, so the pandas side may hold None where the Table holds NaN); the dtypes then
    only need to agree on being numeric."""
    got = table.to_pandas()
    if any_missing:
        got, expected = (
            frame.astype(object).where(frame.notna(), None) for frame in (got, expected)
        )
    pd.testing.assert_frame_equal(got, expected, check_dtype=not any_missing)
    for column in expected.columns:
        assert pd.api.types.is_numeric_dtype(got[column]) == pd.api.types.is_numeric_dtype(
            expected[column]
        ), column


@st.composite
def frames(
    draw, key_names=("k",), prefix="", min_rows=0, max_rows=7, string_keys=None, missing_keys=True
):
    """A small frame: key columns (ints, floats with NaN, or strings with None) plus value columns."""
    n = draw(st.integers(min_rows, max_rows))
    if string_keys is None:
        string_keys = draw(st.booleans())
    data = {}
    for key in key_names:
        if string_keys:
            values = st.sampled_from(["a", "b", "c", "d"] + ([None] if missing_keys else []))
            data[key] = pd.array(draw(st.lists(values, min_size=n, max_size=n)), dtype="str")
        else:
            values = st.sampled_from([0, 1, 2, 3] + ([np.nan] if missing_keys else []))
            column = np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=float)
            data[key] = column if np.isnan(column).any() else column.astype(np.int64)
    data[f"{prefix}x"] = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    data[f"{prefix}s"] = pd.array(
        draw(st.lists(st.sampled_from(["u", "v", None]), min_size=n, max_size=n)), dtype="str"
    )
    data["shared"] = draw(st.lists(st.floats(-3, 3, allow_nan=False), min_size=n, max_size=n))
    return pd.DataFrame(data)


@st.composite
def key_pairs(draw, key_names=("k",)):
    string_keys = draw(st.booleans())
    left = draw(frames(key_names, "l", string_keys=string_keys))
    right = draw(frames(key_names, "r", string_keys=string_keys))
    return left, right


@SETTINGS
@given(
    key_pairs(),
    st.sampled_from(HOWS),
    st.sampled_from([None, "1:1", "one_to_many", "m:1", "many_to_many"]),
)
def test_single_key_matches_pandas(pair, how, validate):
    left, right = pair
    left_before, right_before = left.copy(), right.copy()
    try:
        expected = left.merge(right, on="k", how=how, validate=validate)
    except pd.errors.MergeError:
        with pytest.raises(pd.errors.MergeError, match="not unique"):
            Table(left, name="L").merge(Table(right, name="R"), on="k", how=how, validate=validate)
    else:
        assert_same(
            Table(left, name="L").merge(Table(right, name="R"), on="k", how=how, validate=validate),
            expected,
        )
    pd.testing.assert_frame_equal(left, left_before)
    pd.testing.assert_frame_equal(right, right_before)


@SETTINGS
@given(key_pairs(("k", "k2")), st.sampled_from(HOWS))
def test_composite_key_matches_pandas(pair, how):
    left, right = pair
    table = Table(left).merge(right, on=["k", "k2"], how=how)
    assert_same(table, left.merge(right, on=["k", "k2"], how=how))


@SETTINGS
@given(
    key_pairs(("k", "k2")),
    st.sampled_from(HOWS),
    st.sampled_from([("_x", "_y"), ("", "_r"), ("_l", None)]),
)
def test_left_on_right_on_keeps_both_keys(pair, how, suffixes):
    left, right = pair
    right = right.rename(columns={"k": "rk"})
    table = Table(left).merge(
        right, left_on=["k", "k2"], right_on=["rk", "k2"], how=how, suffixes=suffixes
    )
    assert_same(
        table,
        left.merge(right, left_on=["k", "k2"], right_on=["rk", "k2"], how=how, suffixes=suffixes),
    )


@SETTINGS
@given(key_pairs(), st.sampled_from(HOWS))
def test_common_columns_are_the_default_key(pair, how):
    left, right = pair
    left, right = left.drop(columns="shared"), right.drop(columns="shared")
    assert_same(Table(left).merge(right, how=how), left.merge(right, how=how))


@st.composite
def snowflakes(draw):
    """fact(k1) -> dim1(k1, k2) -> dim2(k2): keys may dangle, repeat or be missing."""
    fact = draw(frames(("k1",), "f", string_keys=False))
    dim1 = draw(frames(("k1", "k2"), "d", string_keys=False))
    dim2 = draw(frames(("k2",), "e", string_keys=False))
    return fact, dim1.drop(columns="shared"), dim2.drop(columns="shared")


@SETTINGS
@given(snowflakes(), st.sampled_from(HOWS), st.sampled_from(HOWS))
def test_snowflake_chain_matches_pandas(tables, how1, how2):
    fact, dim1, dim2 = tables
    expected = fact.merge(dim1, on="k1", how=how1).merge(dim2, on="k2", how=how2)
    chained = Table(fact, name="fact").merge(Table(dim1, name="d1"), on="k1", how=how1)
    assert_same(chained.merge(Table(dim2, name="d2"), on="k2", how=how2), expected)


@SETTINGS
@given(snowflakes(), st.sampled_from(HOWS), st.sampled_from(HOWS))
def test_snowflake_built_from_the_dimension_side(tables, how1, how2):
    fact, dim1, dim2 = tables
    expected = fact.merge(dim1.merge(dim2, on="k2", how=how2), on="k1", how=how1)
    dimension = Table(dim1, name="d1").merge(Table(dim2, name="d2"), on="k2", how=how2)
    assert_same(Table(fact, name="fact").merge(dimension, on="k1", how=how1), expected)


@SETTINGS
@given(
    frames(("src", "dst"), "f", string_keys=True),
    frames(("code",), "a", string_keys=True),
    st.sampled_from(HOWS),
    st.sampled_from(HOWS),
)
def test_role_playing_dimension(flights, airports, how1, how2):
    airports = airports.drop_duplicates("code")
    expected = flights.merge(airports, left_on="src", right_on="code", how=how1).merge(
        airports, left_on="dst", right_on="code", how=how2
    )
    dimension = Table(airports, name="airports")  # one Table object in both roles
    table = (
        Table(flights, name="flights")
        .merge(dimension, left_on="src", right_on="code", how=how1, validate="many_to_one")
        .merge(dimension, left_on="dst", right_on="code", how=how2)
    )
    assert_same(table, expected)
    assert len(set(table.tables)) == len(table.tables)


@SETTINGS
@given(st.lists(frames(("k",), "", string_keys=False), min_size=1, max_size=4), st.data())
def test_concat_matches_pandas(parts, data):
    parts = [
        part.drop(columns=data.draw(st.lists(st.sampled_from(list(part.columns)), max_size=2)))
        for part in parts
    ]
    assert_same(concat([Table(p) for p in parts]), pd.concat(parts, ignore_index=True))


@SETTINGS
@given(
    frames(("k",), "a", string_keys=False),
    frames(("k",), "b", string_keys=False),
    frames(("k",), "c", string_keys=False),
    st.sampled_from(HOWS),
)
def test_merge_after_concat_and_concat_of_joins(first, second, dim, how):
    dim = dim.drop(columns="shared")
    union = concat([first, second])
    assert_same(
        union.merge(dim, on="k", how=how),
        pd.concat([first, second], ignore_index=True).merge(dim, on="k", how=how),
    )
    joined = [Table(first).merge(dim, on="k", how=how), Table(second).merge(dim, on="k", how=how)]
    assert_same(
        concat(joined),
        pd.concat(
            [first.merge(dim, on="k", how=how), second.merge(dim, on="k", how=how)],
            ignore_index=True,
        ),
    )


@SETTINGS
@given(key_pairs(), st.sampled_from(HOWS), st.sampled_from(["first", "coalesce"]))
def test_overlap_rules(pair, how, rule):
    left, right = pair
    table = Table(left).merge(right, on="k", how=how, overlap=rule)
    taken = pd.merge(left.assign(_l=1), right.assign(_r=1), on="k", how=how)
    if rule == "first":
        shared = taken["shared_x"]
    else:
        shared = taken["shared_x"].where(taken["_l"].notna(), taken["shared_y"])
    expected = taken.drop(columns=["_l", "_r", "shared_y"]).rename(columns={"shared_x": "shared"})
    expected["shared"] = shared
    assert_same(table, expected)


@SETTINGS
@given(frames(("k",), "", max_rows=5), st.sampled_from(HOWS))
def test_self_merge(frame, how):
    table = Table(frame, name="t")
    assert_same(table.merge(table, on="k", how=how), frame.merge(frame, on="k", how=how))


def test_hand_made_example_keeps_pandas_row_order():
    left = pd.DataFrame({"k": [3, 1, 2, 1, np.nan], "a": [1, 2, 3, 4, 5]})
    right = pd.DataFrame({"k": [1, 5, 1, np.nan, 3], "b": list("vwxyz")})
    for how in HOWS:
        got = Table(left).merge(right, on="k", how=how).to_pandas()
        pd.testing.assert_frame_equal(got, left.merge(right, on="k", how=how))


def test_to_pandas_keeps_pandas_dtypes_where_nothing_is_missing():
    left = pd.DataFrame({"k": [1, 2], "a": [1, 2]})
    right = pd.DataFrame({"k": [2, 3], "b": [True, False]})
    for how in HOWS:
        pd.testing.assert_frame_equal(
            Table(left).merge(right, on="k", how=how).to_pandas(),
            left.merge(right, on="k", how=how),
        )
    pd.testing.assert_frame_equal(
        concat([left, left]).to_pandas(), pd.concat([left, left], ignore_index=True)
    )


def test_table_description_and_lazy_exports():
    table = ilargi.Table(pd.DataFrame({"k": [1, 2], "a": [3.0, 4.0]}), name="fact")
    joined = table.merge(pd.DataFrame({"k": [1, 2], "b": ["x", "y"]}), on="k")
    assert joined.shape == (2, 3) and len(joined) == 2
    assert joined.columns == ["k", "a", "b"]
    assert joined.tables == ["fact", "right"]
    assert "fact" in repr(joined)
    assert ilargi.concat is concat
    assert list(joined.levels("b")) == ["x", "y"]


def test_key_only_right_table_leaves_no_slot():
    fact = pd.DataFrame({"k": [1, 2, 3], "a": [1.0, 2.0, 3.0]})
    table = Table(fact, name="fact").merge(pd.DataFrame({"k": [3, 1]}), on="k")
    assert table.tables == ["fact"]
    assert_same(table, fact.merge(pd.DataFrame({"k": [3, 1]}), on="k"))


def test_from_parquet_reads_lazily(tmp_path):
    fact = pd.DataFrame({"k": [1, 2, 2, 9], "a": [0.5, 1.5, 2.5, 3.5], "s": ["p", "q", None, "p"]})
    dim = pd.DataFrame({"k": [2, 1, 5], "b": ["x", "y", "z"]})
    fact.to_parquet(tmp_path / "fact.parquet")
    dim.to_parquet(tmp_path / "dim.parquet")
    table = Table.from_parquet(tmp_path / "fact.parquet")
    assert table.name == "fact"
    for how in HOWS:
        joined = table.merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k", how=how)
        assert_same(
            joined,
            pd.read_parquet(tmp_path / "fact.parquet").merge(
                pd.read_parquet(tmp_path / "dim.parquet"), on="k", how=how
            ),
        )


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("pattern", ["none", "some", "all", "empty"])
def test_parquet_dtypes_from_the_null_counts_equal_those_read(tmp_path, statistics, pattern):
    """A Parquet column's pandas dtype (which depends on its type and on whether it holds a null)
    comes from the row groups' null counts where the file has them, without reading the column,
    and equals the one found by reading a present and a null value; without statistics, and for
    dictionary columns (whose dtype holds the levels), the column is read."""
    import datetime
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from ilargi.table.sources import ParquetSource

    types = {
        "i8": (pa.int8(), 1),
        "i64": (pa.int64(), 1),
        "u32": (pa.uint32(), 1),
        "f32": (pa.float32(), 1.0),
        "b": (pa.bool_(), True),
        "s": (pa.string(), "a"),
        "sv": (pa.string_view(), "a"),
        "ts": (pa.timestamp("us", tz="UTC"), datetime.datetime(2020, 1, 1)),
        "d": (pa.date32(), datetime.date(2020, 1, 1)),
        "dec": (pa.decimal128(10, 2), decimal.Decimal("1.5")),
        "cat": (pa.string(), "a"),
    }
    rows = {"none": [0, 0, 0], "some": [0, None, 0], "all": [None] * 3, "empty": []}[pattern]
    columns = {
        name: pa.array([None if r is None else value for r in rows], type)
        for name, (type, value) in types.items()
    }
    columns["cat"] = columns["cat"].dictionary_encode()
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table(columns), path, write_statistics=statistics, row_group_size=2)
    by_counts, by_reading = ParquetSource(path, "t"), ParquetSource(path, "t")
    by_reading._has_nulls = lambda column: None
    read = []
    original = ParquetSource._arrow
    by_counts._arrow = lambda columns, *rest: (
        read.extend(columns) or original(by_counts, columns, *rest)
    )
    for name in types:
        assert by_counts.pandas_dtype(name) == by_reading.pandas_dtype(name), name
    expected = list(types) if not statistics or pattern == "empty" else ["cat"]
    assert read == expected


@pytest.fixture(scope="module")
def connection():
    con = duckdb.connect()
    yield con
    con.close()


def _register(connection, name, frame):
    connection.register("incoming", frame)
    connection.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM incoming")
    connection.unregister("incoming")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snowflakes(), st.sampled_from(HOWS), st.sampled_from(HOWS))
def test_duckdb_snowflake_matches_pandas(connection, tables, how1, how2):
    for name, frame in zip(["fact", "dim1", "dim2"], tables):
        _register(connection, name, frame)
    # pandas gets the frames as DuckDB hands them out (its NULL conversion is DuckDB's business)
    fact, dim1, dim2 = (
        connection.sql(f"SELECT * FROM {name}").df() for name in ["fact", "dim1", "dim2"]
    )
    table = (
        Table.from_duckdb(connection, "fact")
        .merge(Table.from_duckdb(connection, "dim1"), on="k1", how=how1)
        .merge(Table.from_duckdb(connection, "SELECT * FROM dim2", name="d2"), on="k2", how=how2)
    )
    expected = fact.merge(dim1, on="k1", how=how1).merge(dim2, on="k2", how=how2)
    assert_same(table, expected)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key_pairs(("k", "k2")), st.sampled_from(HOWS), st.booleans())
def test_duckdb_string_float_and_composite_keys(connection, pair, how, composite):
    for name, frame in zip(["lt", "rt"], pair):
        _register(connection, name, frame)
    # DuckDB hands an all-NULL VARCHAR column to pandas as object None, which pandas' outer join
    # sorts before the strings, unlike the str dtype the column has (and the Table keeps).
    left, right = (connection.sql(f"SELECT * FROM {name}").df() for name in ["lt", "rt"])
    left, right = (
        frame.astype({column: "str" for column in frame.columns if frame[column].dtype == object})
        for frame in (left, right)
    )
    keys = ["k", "k2"] if composite else "k"
    table = Table.from_duckdb(connection, "lt").merge(
        Table.from_duckdb(connection, "rt"), on=keys, how=how
    )
    assert_same(table, left.merge(right, on=keys, how=how), any_missing=True)


def test_duckdb_table_with_deleted_rows_and_mixed_sources(connection):
    connection.execute(
        "CREATE OR REPLACE TABLE gaps AS SELECT range AS k, range * 2 AS v FROM range(6)"
    )
    connection.execute("DELETE FROM gaps WHERE k IN (1, 4)")
    table = Table.from_duckdb(connection, "gaps")
    assert table.name == "gaps" and len(table) == 4
    dim = pd.DataFrame({"k": [5, 0, 3], "name": ["e", "z", "c"]})
    expected = (
        connection.sql("SELECT * FROM gaps ORDER BY rowid").df().merge(dim, on="k", how="left")
    )
    assert_same(table.merge(dim, on="k", how="left"), expected)


def test_empty_tables_like_pandas():
    empty = pd.DataFrame({"k": pd.Series([], dtype=np.int64), "a": pd.Series([], dtype=float)})
    full = pd.DataFrame({"k": [2, 1, 2], "b": ["x", "y", "z"]})
    for how in HOWS:
        assert_same(Table(empty).merge(full, on="k", how=how), empty.merge(full, on="k", how=how))
        assert_same(Table(full).merge(empty, on="k", how=how), full.merge(empty, on="k", how=how))
    assert_same(concat([empty, full]), pd.concat([empty, full], ignore_index=True))


def test_duckdb_view_by_name(connection):
    connection.execute(
        "CREATE OR REPLACE TABLE base AS SELECT range AS k, range * 2 AS v FROM range(4)"
    )
    connection.execute("CREATE OR REPLACE VIEW evens AS SELECT * FROM base WHERE k % 2 = 0")
    table = Table.from_duckdb(connection, "evens")
    assert table.name == "evens" and len(table) == 2
    assert_same(table, connection.sql("SELECT * FROM evens").df())
    with pytest.raises(ValueError, match="table 'nowhere': DuckDB could not read"):
        Table.from_duckdb(connection, "nowhere")
