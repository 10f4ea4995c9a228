"""Table.save / Table.load treat files as data: a table's name never becomes a path, SQL read from a file is
never run, and every saved field is checked on load (errors name the file and the field)."""

import json
import os

import duckdb
import numpy as np
import pandas as pd
import pytest

from ilargi.table import Table

# "{root}" becomes the test's own folder: an absolute name that escaped would land there, never in /etc
NAMES = [
    "../../x",
    "../../../tmp/evil",
    "{root}/etc/passwd",
    "{root}/abs",
    "a/b",
    "a\\b",
    "",
    ".",
    "..",
    "x\0y",
    "CON",
    "nul",
    "Sales",
    "sales",
    "SALES",
    "spaces and ünïcode",
    "name.parquet",
    "~/home",
]


def _files_under(root):
    return sorted(
        os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files
    )


@pytest.mark.parametrize("name", NAMES)
def test_a_name_never_becomes_a_path(tmp_path, name):
    name = name.replace("{root}", str(tmp_path))
    folder = tmp_path / "deep" / "folder"
    fact = pd.DataFrame({"k": [1, 2, 2], "a": [0.5, 1.5, 2.5]})
    table = Table(fact, name=name).merge(
        Table(pd.DataFrame({"k": [1, 2], "b": ["x", "y"]}), name=name), on="k", how="left"
    )
    table.save(folder, sources=True)
    written = _files_under(tmp_path)
    assert all(path.startswith(os.path.join("deep", "folder") + os.sep) for path in written), (
        written
    )
    sources = [path for path in written if path.endswith(".parquet")]
    assert len(sources) == 2 and all(
        os.path.dirname(p) == os.path.join("deep", "folder", "sources") for p in sources
    )
    pd.testing.assert_frame_equal(Table.load(folder).to_pandas(), table.to_pandas())


def test_names_that_differ_only_by_case_get_distinct_files(tmp_path):
    parts = [
        Table(pd.DataFrame({"k": [i], f"v{i}": [float(i)]}), name=name)
        for i, name in enumerate(["Sales", "sales", "SALES"])
    ]
    table = parts[0].merge(parts[1], on="k", how="outer").merge(parts[2], on="k", how="outer")
    table.save(tmp_path, sources=True)
    files = sorted(p.name.lower() for p in (tmp_path / "sources").iterdir())
    assert len(files) == len(set(files)) == 3
    pd.testing.assert_frame_equal(Table.load(tmp_path).to_pandas(), table.to_pandas())


def test_a_saved_path_leading_outside_the_folder_is_refused(tmp_path):
    folder = tmp_path / "saved"
    Table(pd.DataFrame({"k": [1]}), name="t").save(folder, sources=True)
    pd.DataFrame({"k": [9]}).to_parquet(tmp_path / "outside.parquet")
    header = json.loads((folder / "metadata.json").read_text())
    header["extra"]["sources"][0]["path"] = "../outside.parquet"
    (folder / "metadata.json").write_text(json.dumps(header))
    with pytest.raises(
        ValueError,
        match=r"metadata\.json: the path '../outside.parquet' of source 't' leads "
        r"outside",
    ):
        Table.load(folder)


@pytest.fixture
def connection():
    con = duckdb.connect()
    con.execute("CREATE TABLE fact AS SELECT range AS k, range * 0.5 AS a FROM range(4)")
    yield con
    con.close()


def _saved_query(connection, folder, query):
    """A table saved from a DuckDB query, then the saved query text replaced (an edited file)."""
    Table.from_duckdb(connection, "SELECT * FROM fact", name="q").save(folder)
    header = json.loads((folder / "metadata.json").read_text())
    header["extra"]["sources"][0]["query"] = query
    (folder / "metadata.json").write_text(json.dumps(header))


def _tables(connection):
    return sorted(
        row[0] for row in connection.execute("SELECT table_name FROM duckdb_tables()").fetchall()
    )


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM fact; DROP TABLE fact",
        "COPY (SELECT 42 AS answer) TO '{target}' (FORMAT csv)",
        "SELECT * FROM fact; COPY (SELECT 42) TO '{target}'",
        "CREATE TABLE hacked AS SELECT 1",
        "SELECT * FROM read_csv('{target}')",
        "fact; DROP TABLE fact",
    ],
)
def test_a_saved_query_is_never_run(tmp_path, connection, query):
    target = tmp_path / "written.csv"
    _saved_query(connection, tmp_path / "saved", query.format(target=target))
    before = _tables(connection)
    with pytest.raises(
        ValueError,
        match=r"source 'q' was the DuckDB query .*Table.load never runs SQL read "
        r"from a file",
    ):
        Table.load(tmp_path / "saved", {"q": connection})
    assert not target.exists()
    assert _tables(connection) == before  # nothing created or dropped
    assert connection.execute("SELECT count(*) FROM fact").fetchall() == [(4,)]  # still usable


def test_a_saved_query_loads_with_the_callers_own_source(tmp_path, connection):
    folder = tmp_path / "saved"
    table = Table.from_duckdb(connection, "SELECT * FROM fact WHERE k >= 0", name="q")
    expected = table.to_pandas()
    table.save(folder)
    saved = json.loads((folder / "metadata.json").read_text())["extra"]["sources"][0]
    assert saved == {
        "name": "q",
        "kind": "duckdb",
        "query": "SELECT * FROM fact WHERE k >= 0",
        "nrows": 4,
    }
    with pytest.raises(ValueError, match="never runs SQL read from a file"):
        Table.load(folder, {"q": connection})
    for source in (
        (connection, "SELECT * FROM fact"),
        Table.from_duckdb(connection, "fact"),
        connection.sql("SELECT * FROM fact").df(),
    ):
        pd.testing.assert_frame_equal(
            Table.load(folder, {"q": source}).to_pandas(), expected, check_dtype=False
        )
    assert connection.execute("SELECT 1").fetchall() == [(1,)]


def test_a_saved_table_name_binds_through_quoted_identifiers(tmp_path, connection):
    table = Table.from_duckdb(connection, "fact")
    table.save(tmp_path / "saved")
    pd.testing.assert_frame_equal(
        Table.load(tmp_path / "saved", {"fact": connection}).to_pandas(), table.to_pandas()
    )
    _saved_query(connection, tmp_path / "other", "missing_table")
    with pytest.raises(
        ValueError, match=r"source 'q': the connection has no table 'missing_table'"
    ):
        Table.load(tmp_path / "other", {"q": connection})


def _saved_join(folder):
    fact = pd.DataFrame({"k": [1, 2, 2, 9], "a": [1.0, 2.0, 3.0, 4.0]})
    dim = pd.DataFrame({"k": [1, 2, 3], "b": ["x", "y", "z"]})
    table = Table(fact, name="fact").merge(
        Table(dim, name="dim"), on="k", how="outer"
    )  # 5 rows, 3 parts
    table.save(folder, sources=True)
    return table


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda e: e.update(labels=["k"]), r"field 'extra.labels' has 1 labels for 3 columns"),
        (lambda e: e.pop("slots"), r"field 'extra.slots' is missing"),
        (lambda e: e["slots"].pop(), r"field 'extra.slots' has 2 entries for 3 parts"),
        (
            lambda e: e["slots"][0].update(source=7),
            r"field 'extra.slots\[0\].source' is 7; there are 2 sources",
        ),
        (
            lambda e: e["slots"][0].update(source="0"),
            r"field 'extra.slots\[0\].source' must be a int",
        ),
        (
            lambda e: e["slots"][1].update(columns=["b", "k"]),
            r"field 'extra.slots\[1\].columns' names 2 columns",
        ),
        (
            lambda e: e["sources"][0].update(kind="script"),
            r"field 'extra.sources\[0\].kind' is 'script'",
        ),
        (
            lambda e: e["sources"][0].update(nrows="4"),
            r"field 'extra.sources\[0\].nrows' must be a int",
        ),
        (lambda e: e["sources"][0].pop("path"), r"field 'extra.sources\[0\].path' is missing"),
        (
            lambda e: e["sources"][0].update(nrows=5),
            r"source 'fact' has 4 rows; the saved table expects 5",
        ),
        (lambda e: e.update(dtypes=["int64"]), r"field 'extra.dtypes' must be a list of 3 dtypes"),
        (
            lambda e: e.update(dtypes=["int64", "no such dtype", None]),
            r"field 'extra.dtypes\[1\]' is not a dtype",
        ),
        (lambda e: e.update(name=3), r"field 'extra.name' must be a str"),
    ],
)
def test_edited_layouts_are_refused(tmp_path, edit, reason):
    _saved_join(tmp_path)
    header = json.loads((tmp_path / "metadata.json").read_text())
    edit(header["extra"])
    (tmp_path / "metadata.json").write_text(json.dumps(header))
    with pytest.raises(ValueError, match=reason):
        Table.load(tmp_path)


def test_edited_index_vectors_are_refused(tmp_path):
    _saved_join(tmp_path)
    with np.load(tmp_path / "indices.npz") as stored:
        arrays = {name: stored[name] for name in stored.files}
    for name, value, reason in [
        (
            "rows_1",
            arrays["rows_1"][:-1],
            r"array 'rows_1' \(part 'dim'\) has 4 entries; the header needs 5",
        ),
        ("rows_1", np.append(arrays["rows_1"], 0), r"has 6 entries; the header needs 5"),
        ("rows_1", arrays["rows_1"].astype(float), r"1-D integer vector, got dtype float64"),
        ("rows_1", np.where(arrays["rows_1"] >= 0, 7, -1), r"outside \[-1, 3\)"),
    ]:
        np.savez(tmp_path / "indices.npz", **{**arrays, name: value})
        with pytest.raises(ValueError, match=rf"indices\.npz: .*{reason}"):
            Table.load(tmp_path)
    # two parts giving one column at one row: the coverage must stay disjoint
    overlapping = arrays["rows_2"].copy()
    overlapping[:] = 0
    np.savez(tmp_path / "indices.npz", **{**arrays, "rows_2": overlapping})
    with pytest.raises(ValueError, match=r"column 'k' is provided twice at row 0"):
        Table.load(tmp_path)


def test_truncated_files(tmp_path):
    _saved_join(tmp_path)
    text = (tmp_path / "metadata.json").read_text()
    (tmp_path / "metadata.json").write_text(text[:100])
    with pytest.raises(ValueError, match=r"metadata\.json is not valid JSON"):
        Table.load(tmp_path)
    (tmp_path / "metadata.json").write_text(text)
    source = next((tmp_path / "sources").iterdir())
    source.write_bytes(source.read_bytes()[:30])
    with pytest.raises(ValueError, match=rf"cannot read the Parquet file .*{source.name}"):
        Table.load(tmp_path)


def test_round_trip_keeps_pandas_dtypes(tmp_path):
    left = pd.DataFrame({"k": [True, False, True], "x": [1, 2, 3]})
    right = pd.DataFrame({"k": [1, 5], "c": pd.Categorical(["u", "v"])})
    table = Table(left, name="l").merge(Table(right, name="r"), on="k", how="outer")
    expected = left.merge(right, on="k", how="outer")
    pd.testing.assert_frame_equal(table.to_pandas(), expected)
    table.save(tmp_path, sources=True)
    pd.testing.assert_frame_equal(Table.load(tmp_path).to_pandas(), expected)
