"""Sources (issue 43): a DuckDB table keeps the rows it had when the Table was made, whatever the
database does afterwards; column kinds decide how to_matrix encodes a column (a pandas categorical
is categorical whatever its categories, complex numbers are not encodable)."""

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ilargi.table import Table
from ilargi.table.sources import BOOL, NUMERIC, STRING, UNSUPPORTED, series_kind

CHANGES = {
    "delete": "DELETE FROM {t} WHERE rowid IN (SELECT rowid FROM {t} ORDER BY rowid LIMIT 1)",
    "insert": "INSERT INTO {t} SELECT * FROM {t} LIMIT 2",
    "update keys": "UPDATE {t} SET k = k + 1",
    "update values": "UPDATE {t} SET x = -x",
    "drop": "DROP TABLE {t}",
    "replace": "CREATE OR REPLACE TABLE {t} AS SELECT * FROM {t} ORDER BY random()",
}


def _tables(connection, fact, dim):
    for name, frame in (("fact", fact), ("dim", dim)):
        connection.register("incoming", frame)
        connection.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM incoming")
        connection.unregister("incoming")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fact_keys=st.lists(st.integers(0, 4), min_size=1, max_size=8),
    dim_keys=st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
    how=st.sampled_from(["inner", "left", "outer"]),
    changed=st.sampled_from(["fact", "dim"]),
    change=st.sampled_from(sorted(CHANGES)),
)
def test_a_duckdb_table_changed_after_the_merge_keeps_its_rows(
    fact_keys, dim_keys, how, changed, change
):
    """Deleting, inserting, updating, dropping or replacing a table after the merge leaves the
    merged Table (its frame and its matrix) as it was: the source is a snapshot."""
    connection = duckdb.connect()
    fact = pd.DataFrame({"k": fact_keys, "x": np.arange(len(fact_keys), dtype=float)})
    dim = pd.DataFrame(
        {"k": dim_keys, "x": np.arange(len(dim_keys)) * 10.0, "c": [f"c{k}" for k in dim_keys]}
    )
    _tables(connection, fact, dim)
    table = Table.from_duckdb(connection, "fact").merge(
        Table.from_duckdb(connection, "dim"), on="k", how=how
    )
    before = table.to_pandas()
    matrix_before = table.to_matrix(columns=["x_x", "x_y", "c"])[0].toarray()
    connection.execute(CHANGES[change].format(t=changed))
    pd.testing.assert_frame_equal(table.to_pandas(), before)
    np.testing.assert_array_equal(
        table.to_matrix(columns=["x_x", "x_y", "c"])[0].toarray(), matrix_before
    )
    connection.close()


def _temporary_tables(connection):
    query = "SELECT count(*) FROM duckdb_tables() WHERE temporary"
    return connection.execute(query).fetchall()[0][0]


def test_a_table_of_a_read_only_database_is_used_in_place(tmp_path):
    """Nothing can change a database opened read-only: its table is not copied (unless its
    rowids have gaps), and reads give its rows."""
    path = str(tmp_path / "db.duckdb")
    with duckdb.connect(path) as writer:
        writer.execute("CREATE TABLE dense AS SELECT range AS k, range * 2.0 AS v FROM range(5)")
        writer.execute("CREATE TABLE gaps AS SELECT range AS k, range * 2.0 AS v FROM range(6)")
        writer.execute("DELETE FROM gaps WHERE k IN (1, 4)")
    with duckdb.connect(path, read_only=True) as connection:
        dense = Table.from_duckdb(connection, "dense")
        assert _temporary_tables(connection) == 0
        pd.testing.assert_frame_equal(
            dense.to_pandas(), connection.sql("SELECT * FROM dense ORDER BY rowid").df()
        )
        gaps = Table.from_duckdb(connection, "gaps")
        assert _temporary_tables(connection) == 1 and len(gaps) == 4
        assert gaps.to_pandas()["k"].tolist() == [0, 2, 3, 5]


def test_a_writable_table_is_copied_once_inside_duckdb():
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT range AS k FROM range(3)")
    table = Table.from_duckdb(connection, "t")
    assert _temporary_tables(connection) == 1
    connection.execute("DELETE FROM t")
    assert table.to_pandas()["k"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "values, kind",
    [
        (pd.Categorical([3, 1, 3]), STRING),
        (pd.Categorical([1.5, 2.5]), STRING),
        (pd.Categorical([True, False]), STRING),
        (pd.Categorical(pd.to_datetime(["2020-01-01", "2021-01-01"])), STRING),
        (pd.Series([True, "a", None], dtype=object), STRING),
        (pd.Series([np.True_, "a"], dtype=object), STRING),
        (pd.Series([1 + 2j, 3 + 0j]), UNSUPPORTED),
        (pd.Series([1 + 2j, None], dtype=object), UNSUPPORTED),
        (pd.Series([1, "a"], dtype=object), UNSUPPORTED),
        (pd.Series([True, False]), BOOL),
        (pd.Series([1, 2]), NUMERIC),
    ],
)
def test_column_kinds(values, kind):
    assert series_kind(pd.Series(values)) == kind
