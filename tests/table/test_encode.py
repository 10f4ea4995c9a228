"""Table.to_matrix against the encoding of the pandas result, and Table save/load.

For random joins (every join kind, snowflakes, role-playing dimensions, unions) the materialized
NormalizedMatrix must equal the numeric/one-hot encoding of ``Table.to_pandas()`` -- itself equal to the
pandas merge chain -- compared column by column by name, under every missing-value policy.
"""

import duckdb
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ilargi import NormalizedMatrix
from ilargi.table import Table, concat
from tests.table.test_table import HOWS, frames, snowflakes

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MISSING = ["zero", "indicator", "mean", "nan"]


def reference_encoding(frame, columns, categorical="onehot", missing="zero"):
    """The documented encoding, computed on a materialized pandas frame: {column name: values}."""
    out = {}
    for column in columns:
        values = frame[column]
        absent = values.isna().to_numpy()
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric or categorical == "ordinal":
            if not numeric:
                levels = sorted(values.dropna().unique())
                values = values.map({level: code for code, level in enumerate(levels)})
            numbers = values.to_numpy(dtype=float, na_value=np.nan)
            fill = np.nanmean(numbers) if missing == "mean" and (~absent).any() else 0.0
            fill = np.nan if missing == "nan" else fill
            out[str(column)] = np.where(absent, fill, numbers)
        else:
            for level in sorted(values.dropna().unique()):
                out[f"{column}={level}"] = (values == level).fillna(False).to_numpy(dtype=float)
        if missing == "indicator" and absent.any():
            out[f"{column}__missing"] = absent.astype(float)
    return out


def assert_encoding(table, columns=None, target=None, categorical="onehot", missing="zero"):
    frame = table.to_pandas()
    columns = [c for c in frame.columns if c != target] if columns is None else columns
    matrix, y = table.to_matrix(
        columns=columns, target=target, categorical=categorical, missing=missing
    )
    expected = reference_encoding(frame, columns, categorical, missing)
    assert matrix.shape == (len(frame), len(expected))
    assert sorted(matrix.columns) == sorted(expected)
    dense = np.asarray(matrix)
    for position, name in enumerate(matrix.columns):
        np.testing.assert_allclose(
            dense[:, position], expected[name], rtol=1e-9, atol=1e-12, err_msg=name
        )
    if target is not None:
        values = frame[target]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            levels = sorted(values.dropna().unique())
            values = values.map({level: code for code, level in enumerate(levels)})
        np.testing.assert_array_equal(y, values.to_numpy(dtype=float, na_value=np.nan))
    return matrix


@SETTINGS
@given(
    snowflakes(),
    st.sampled_from(HOWS),
    st.sampled_from(HOWS),
    st.sampled_from(MISSING),
    st.sampled_from(["onehot", "ordinal"]),
)
def test_snowflake_encoding_matches_pandas(tables, how1, how2, missing, categorical):
    fact, dim1, dim2 = tables
    table = (
        Table(fact, name="fact")
        .merge(Table(dim1, name="d1"), on="k1", how=how1)
        .merge(Table(dim2, name="d2"), on="k2", how=how2)
    )
    assert_encoding(table, categorical=categorical, missing=missing)


@SETTINGS
@given(
    frames(("src", "dst"), "f", string_keys=True),
    frames(("code",), "a", string_keys=True),
    st.sampled_from(HOWS),
    st.sampled_from(MISSING),
    st.sampled_from(["shared_x", "fs", "as_y", "ax_x"]),
)
def test_role_playing_encoding_and_any_target(flights, airports, how, missing, target):
    airports = airports.drop_duplicates("code")
    table = (
        Table(flights, name="flights")
        .merge(airports, left_on="src", right_on="code", how=how)
        .merge(airports, left_on="dst", right_on="code", how="left")
    )
    assert_encoding(table, target=target, missing=missing)


@SETTINGS
@given(
    st.lists(frames(("k",), "", string_keys=True), min_size=1, max_size=3),
    frames(("k",), "d", string_keys=True),
    st.sampled_from(HOWS),
    st.sampled_from(MISSING),
)
def test_union_then_join_encoding(parts, dim, how, missing):
    dim = dim.drop(columns="shared")
    table = concat(parts).merge(dim, on="k", how=how)
    assert_encoding(table, missing=missing)


@SETTINGS
@given(
    st.lists(frames(("k",), "", string_keys=False), min_size=1, max_size=3),
    st.sampled_from(["first", "coalesce"]),
    st.sampled_from(MISSING),
    st.sampled_from(HOWS),
)
def test_overlap_resolved_encoding(parts, rule, missing, how):
    left = concat(parts)
    right = parts[0].rename(columns={"x": "rx", "s": "rs"})
    assert_encoding(left.merge(right, on="k", how=how, overlap=rule), missing=missing)


def test_hand_made_encoding_names_and_parts():
    fact = pd.DataFrame(
        {"k": [1, 2, 2, 7], "price": [1.5, np.nan, 3.0, 4.0], "y": ["no", "yes", "no", None]}
    )
    dim = pd.DataFrame({"k": [2, 1], "color": ["red", "blue"], "weight": [10.0, 20.0]})
    table = Table(fact, name="fact").merge(
        Table(dim, name="dim"), on="k", how="left", validate="m:1"
    )
    matrix, y = table.to_matrix(target="y", missing="indicator")
    assert matrix.columns == [
        "k",
        "price",
        "price__missing",
        "color=blue",
        "color=red",
        "color__missing",
        "weight",
        "weight__missing",
    ]
    np.testing.assert_array_equal(y, [0, 1, 0, np.nan])
    np.testing.assert_array_equal(
        np.asarray(matrix),
        [
            [1, 1.5, 0, 1, 0, 0, 20, 0],
            [2, 0, 1, 0, 1, 0, 10, 0],
            [2, 3, 0, 0, 1, 0, 10, 0],
            [7, 4, 0, 0, 0, 1, 0, 1],
        ],
    )
    sizes = {part.name: part.source.shape for part in matrix.parts}
    assert sizes["dim:onehot"] == (2, 2) and sizes["dim:numeric"] == (2, 1)  # the dimension, once
    assert list(table.levels("y")) == ["no", "yes"]


def test_mean_imputation_is_exact_over_joined_rows():
    fact = pd.DataFrame({"k": [1, 1, 1, 2, 3]})
    dim = pd.DataFrame({"k": [1, 2], "v": [3.0, np.nan]})
    table = Table(fact).merge(dim, on="k", how="left")
    matrix, _ = table.to_matrix(columns=["v"], missing="mean")
    np.testing.assert_allclose(np.asarray(matrix)[:, 0], [3, 3, 3, 3, 3])
    matrix, _ = table.to_matrix(columns=["v"], missing="zero")
    np.testing.assert_allclose(np.asarray(matrix)[:, 0], [3, 3, 3, 0, 0])


def test_empty_tables_encode_like_pandas():
    empty = pd.DataFrame({"k": pd.Series([], dtype=np.int64), "a": pd.Series([], dtype=float)})
    full = pd.DataFrame({"k": [2, 1, 2], "b": ["x", "y", "z"], "c": [1.0, 2.0, 3.0]})
    for how in HOWS:
        assert_encoding(Table(empty).merge(full, on="k", how=how), missing="indicator")
        assert_encoding(Table(full).merge(empty, on="k", how=how), missing="mean")


def test_duckdb_and_parquet_sources_encode(tmp_path):
    fact = pd.DataFrame({"k": [1, 2, 2, 5], "a": [0.5, 1.5, None, 3.5]})
    dim = pd.DataFrame({"k": [2, 1], "s": ["x", "y"]})
    fact.to_parquet(tmp_path / "fact.parquet")
    connection = duckdb.connect()
    connection.register("incoming", dim)
    connection.execute("CREATE TABLE dim AS SELECT * FROM incoming")
    table = Table.from_parquet(tmp_path / "fact.parquet").merge(
        Table.from_duckdb(connection, "dim"), on="k", how="left"
    )
    assert_encoding(table, target="a", missing="indicator")
    connection.close()


def test_parquet_columns_read_one_by_one_and_let_go(tmp_path):
    """A Parquet source reads its columns one at a time, as pandas reads them (dtypes, nulls,
    order); the encoding is that of the joined frame, and keeps none of Arrow's buffers."""
    pa = pytest.importorskip("pyarrow")
    rng = np.random.default_rng(0)
    fact = pd.DataFrame(
        {
            "k": rng.integers(0, 50, 5000),
            "a": rng.random(5000),
            "n": pd.array(rng.integers(0, 9, 5000), dtype="Int64"),
            "s": rng.choice(["p", "q", None], 5000),
        }
    )
    fact.loc[::7, "n"] = None
    dim = pd.DataFrame({"k": np.arange(50), "d": rng.random(50), "t": ["u", "v"] * 25})
    fact.to_parquet(tmp_path / "fact.parquet")
    dim.to_parquet(tmp_path / "dim.parquet")
    source = Table.from_parquet(tmp_path / "fact.parquet")
    read = source.slot(0).source.read(["s", "a", "n"])
    pd.testing.assert_frame_equal(read, pd.read_parquet(tmp_path / "fact.parquet")[["s", "a", "n"]])
    table = source.merge(Table.from_parquet(tmp_path / "dim.parquet"), on="k")
    before = pa.default_memory_pool().bytes_allocated()
    matrix, y = table.to_matrix(target="a", categorical="ordinal")
    assert pa.default_memory_pool().bytes_allocated() <= before
    assert_encoding(table, target="a", categorical="ordinal")
    assert_encoding(table, target="a", missing="indicator")


@pytest.mark.parametrize("index", ["range", "positions", "named"])
def test_a_parquet_file_written_with_a_pandas_index_reads_by_position(tmp_path, index):
    """A file written from a filtered or indexed DataFrame: its rows are read in order, every
    column of the file (a named index's too) is a column, and the encoding holds their values."""
    frame = pd.DataFrame({"k": [1, 2, 3, 4, 5], "x": [0.5, 1.5, 2.5, 3.5, 4.5]})
    written = {
        "range": frame.iloc[1:4],  # a range index from 1, kept as metadata only
        "positions": frame.iloc[[3, 0, 2]],  # an index column of the file, unnamed
        "named": frame.set_index(pd.Index([7, 3, 9, 1, 5], name="id")),
    }[index]
    written.to_parquet(tmp_path / "t.parquet")
    table = Table.from_parquet(tmp_path / "t.parquet")
    read = table.to_pandas()
    pd.testing.assert_frame_equal(read[["k", "x"]], written[["k", "x"]].reset_index(drop=True))
    if index == "named":
        assert read["id"].tolist() == [7, 3, 9, 1, 5]
    matrix, y = table.to_matrix(columns=["k"], target="x")
    np.testing.assert_array_equal(matrix.toarray()[:, 0], written["k"].to_numpy(dtype=float))
    np.testing.assert_array_equal(y, written["x"].to_numpy())


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_strings_read_for_their_levels_come_as_categoricals_of_the_same_values(tmp_path, kind):
    """Where an encoder takes a string column's levels only, Parquet and DuckDB sources give it as
    a pandas Categorical (codes and the distinct strings): the same values, NULLs and row order
    as a plain read; other columns unchanged."""
    frame = pd.DataFrame({"k": [4, 2, 3, 1], "s": ["b", None, "a", "b"], "x": [0.5, 1.5, 2.5, 3.5]})
    if kind == "parquet":
        frame.to_parquet(tmp_path / "t.parquet")
        table = Table.from_parquet(tmp_path / "t.parquet")
    else:
        connection = duckdb.connect()
        connection.register("incoming", frame)
        connection.execute("CREATE TABLE t AS SELECT * FROM incoming ORDER BY k DESC")
        table = Table.from_duckdb(connection, "t")
    source = table.slot(0).source
    plain = source.read(["s", "x", "k"])
    levels = source.read(["s", "x", "k"], levels_only={"s", "x"})
    assert isinstance(levels["s"].dtype, pd.CategoricalDtype)
    assert levels["s"].isna().tolist() == plain["s"].isna().tolist()
    assert levels["s"].astype(object).dropna().tolist() == plain["s"].dropna().tolist()
    pd.testing.assert_frame_equal(levels[["x", "k"]], plain[["x", "k"]])
    assert source.read([]).shape == (4, 0)
    columns = table.read_columns(c for c in ["s", "x"])  # any iterable, a generator too
    assert list(columns[0].columns) == ["s", "x"]
    assert_encoding(table, target="x")
    assert_encoding(table, target="x", categorical="ordinal")


def test_a_column_read_is_dropped_after_its_last_reader():
    """Each source column read for an encoding is let go once the last column that reads it
    has taken it, so that the columns read and their encodings are not all held at once."""
    from ilargi.table.encode import _Encoder

    airports = pd.DataFrame({"code": [1, 2], "lat": [0.5, 1.5]})
    flights = pd.DataFrame({"origin": [1, 2, 2], "dest": [2, 1, 1]})
    airport = Table(airports, name="airport")  # one source, placed twice
    table = (
        Table(flights, name="f")
        .merge(airport, left_on="origin", right_on="code")
        .merge(airport, left_on="dest", right_on="code", suffixes=("", "_d"))
    )
    lat, lat_d = table.column_pieces("lat"), table.column_pieces("lat_d")
    encoder = _Encoder(table, table.read_columns(["lat", "lat_d"]), [lat, lat_d])
    (index, column), (index_d, _) = lat[0], lat_d[0]
    assert encoder.frames[index] is encoder.frames[index_d]  # one source read once, two readers
    first = encoder.raw(lat)[index]
    assert column in encoder.frames[index]
    second = encoder.raw(lat_d)[index_d]
    assert column not in encoder.frames[index]
    pd.testing.assert_series_equal(first, second)


@SETTINGS
@given(snowflakes(), st.sampled_from(HOWS), st.booleans())
def test_save_and_load_round_trip(tmp_path_factory, tables, how, with_sources):
    fact, dim1, dim2 = tables
    table = (
        Table(fact, name="fact")
        .merge(Table(dim1, name="d1"), on="k1", how=how)
        .merge(Table(dim2, name="d2"), on="k2", how="left")
    )
    folder = tmp_path_factory.mktemp("saved")
    table.save(folder, sources=with_sources)
    loaded = (
        Table.load(folder)
        if with_sources
        else Table.load(folder, {"fact": fact, "d1": dim1, "d2": dim2})
    )
    assert loaded.tables == table.tables and loaded.columns == table.columns
    pd.testing.assert_frame_equal(loaded.to_pandas(), table.to_pandas())
    loaded_matrix, _ = loaded.to_matrix()
    matrix, _ = table.to_matrix()
    np.testing.assert_array_equal(np.asarray(loaded_matrix), np.asarray(matrix))


def test_save_and_load_duckdb_and_parquet_sources(tmp_path):
    connection = duckdb.connect()
    connection.execute("CREATE TABLE fact AS SELECT range AS k, range * 0.5 AS a FROM range(5)")
    pd.DataFrame({"k": [4, 1], "s": ["x", "y"]}).to_parquet(tmp_path / "dim.parquet")
    table = Table.from_duckdb(connection, "fact").merge(
        Table.from_parquet(tmp_path / "dim.parquet"), on="k", how="left"
    )
    expected = table.to_pandas()
    table.save(tmp_path / "with", sources=True)
    table.save(tmp_path / "without")
    given = {"fact": connection, "dim": tmp_path / "dim.parquet"}
    for loaded in (Table.load(tmp_path / "with"), Table.load(tmp_path / "without", given)):
        pd.testing.assert_frame_equal(loaded.to_pandas(), expected)
    # a path read from a file is never followed outside its folder: the caller passes it
    with pytest.raises(
        ValueError, match=r"source 'dim' was saved as a reference to .*dim\.parquet"
    ):
        Table.load(tmp_path / "without", {"fact": connection})
    with pytest.raises(
        ValueError, match=r"needs its source 'fact' \(the DuckDB query 'fact', not saved\)"
    ):
        Table.load(tmp_path / "without")
    connection.close()


def test_saved_metadata_is_the_core_format(tmp_path):
    fact = pd.DataFrame({"k": [1, 2, 3], "a": [1.0, 2.0, 3.0]})
    table = Table(fact, name="fact").merge(
        pd.DataFrame({"k": [3, 1], "b": [5, 6]}), on="k", how="left"
    )
    table.save(tmp_path)
    from ilargi.metadata import Metadata

    metadata = Metadata.load(tmp_path)
    assert metadata.names == ["fact", "right"] and metadata.shape == (3, 3)
    np.testing.assert_array_equal(metadata.rows[1], [1, -1, 0])
    with pytest.raises(ValueError, match="needs its source 'fact'"):
        Table.load(tmp_path)
    matrix, _ = table.to_matrix()
    assert isinstance(matrix, NormalizedMatrix)


# --- issue 43: one rule per class of encoding input ---------------------------------------------


def _unchanged(frames):
    """The frames as they are now, to compare with after the call (inputs are never mutated)."""
    return [frame.copy(deep=True) for frame in frames]


@SETTINGS
@given(
    codes=st.lists(st.sampled_from([3, 10, 25, -1]), min_size=1, max_size=8),
    kind=st.sampled_from(["int", "float", "bool", "date", "str"]),
    how=st.sampled_from(HOWS),
    categorical=st.sampled_from(["onehot", "ordinal"]),
    order=st.randoms(use_true_random=False),
)
def test_a_pandas_categorical_is_encoded_by_level_whatever_its_categories(
    codes, kind, how, categorical, order
):
    """A categorical of ints, floats, booleans, dates or strings, its categories in any order,
    one-hots (or takes level codes) as the encoding guide says: by sorted value, here in a
    dimension reached by a merge."""
    values = {
        "int": codes,
        "float": [c / 2 for c in codes],
        "bool": [c > 5 for c in codes],
        "date": pd.to_datetime([f"2020-01-{abs(c) % 28 + 1:02d}" for c in codes]),
        "str": [f"level {c}" for c in codes],
    }[kind]
    categories = list(pd.unique(pd.Series(values)))
    order.shuffle(categories)
    dim = pd.DataFrame(
        {"k": np.arange(len(codes)), "c": pd.Categorical(values, categories=categories)}
    )
    fact = pd.DataFrame({"k": [0, len(codes) - 1, 0, len(codes) + 3], "x": [1.0, 2.0, 3.0, 4.0]})
    before = _unchanged([fact, dim])
    table = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how=how)
    matrix, _ = table.to_matrix(columns=["c"], categorical=categorical)
    _, y = table.to_matrix(columns=["x"], target="c")
    frame = table.to_pandas()
    levels = sorted(frame["c"].dropna().unique())
    assert list(table.levels("c")) == levels
    codes_expected = (
        frame["c"]
        .map({level: i for i, level in enumerate(levels)})
        .to_numpy(dtype=float, na_value=np.nan)
    )
    np.testing.assert_array_equal(y, codes_expected)
    if categorical == "onehot":
        assert matrix.columns == [f"c={level}" for level in levels]
        expected = (
            np.column_stack(
                [(frame["c"] == level).fillna(False).to_numpy(dtype=float) for level in levels]
            )
            if levels
            else np.zeros((len(frame), 0))
        )
        np.testing.assert_array_equal(np.asarray(matrix), expected.reshape(len(frame), -1))
    else:
        np.testing.assert_array_equal(np.asarray(matrix)[:, 0], np.nan_to_num(codes_expected))
    for got, expected_frame in zip([fact, dim], before):
        pd.testing.assert_frame_equal(got, expected_frame)


@pytest.mark.parametrize(
    "columns, expected",
    [("ab", ["ab"]), ("a", ["a"]), (["a", "b"], ["a", "b"]), (("t", 1), ["('t', 1)"]), (7, ["7"])],
)
def test_columns_takes_one_label_or_a_list_of_labels(columns, expected):
    """A string is one column's name, as in pandas' drop(columns=...), never its characters."""
    frame = pd.DataFrame(
        {"ab": [1.0, 2.0], "a": [3.0, 4.0], "b": [5.0, 6.0], ("t", 1): [7.0, 8.0], 7: [9.0, 10.0]}
    )
    matrix, _ = Table(frame, name="t").to_matrix(columns=columns)
    assert matrix.columns == expected


def test_an_unknown_single_label_or_an_unordered_set_is_refused():
    frame = pd.DataFrame({"a": [1.0], "b": [2.0]})
    with pytest.raises(ValueError, match=r"columns \['ab'\] are not columns of table 't'"):
        Table(frame, name="t").to_matrix(columns="ab")
    with pytest.raises(TypeError, match="not a set: its order"):
        Table(frame, name="t").to_matrix(columns={"a", "b"})


@pytest.mark.parametrize(
    "values",
    [
        np.array([1 + 2j, 3 + 0j]),
        np.array([1 + 2j, 3j], dtype=np.complex64),
        pd.Series([1 + 2j, None], dtype=object),
    ],
)
def test_complex_columns_are_refused_naming_column_and_table(values):
    """A real matrix cannot hold a complex value: refused (was cast to its real part)."""
    frame = pd.DataFrame({"z": values, "x": [1.0, 2.0]})
    table = Table(pd.DataFrame({"k": [0, 1]}), name="fact").merge(
        Table(frame.assign(k=[0, 1]), name="dim"), on="k"
    )
    for call in (
        lambda: table.to_matrix(),
        lambda: table.to_matrix(columns=["z"]),
        lambda: table.to_matrix(columns=["x"], target="z"),
    ):
        with pytest.raises(TypeError, match=r"column 'z' \(table 'dim'.*complex numbers"):
            call()
    assert table.to_matrix(columns=["x"])[0].shape == (2, 1)


@pytest.mark.parametrize("how", ["union", "object column", "categorical"])
def test_booleans_and_strings_in_one_column_are_encoded_by_level(how):
    """Levels of two types (a union of a bool and a str column, or an object column holding
    both) one-hot by level, sorted by type then value (booleans first): no crash."""
    x = np.arange(6.0)
    if how == "union":
        table = concat(
            [
                Table(pd.DataFrame({"m": [True, False, True], "x": x[:3]}), name="a"),
                Table(pd.DataFrame({"m": ["b", None, "a"], "x": x[3:]}), name="b"),
            ]
        )
    else:
        values = [True, False, True, "b", None, "a"]
        column = pd.Categorical(values) if how == "categorical" else pd.Series(values, dtype=object)
        table = Table(pd.DataFrame({"m": column, "x": x}), name="t")
    matrix, _ = table.to_matrix(columns=["m"])
    _, y = table.to_matrix(columns=["x"], target="m")
    assert list(table.levels("m")) == [False, True, "a", "b"]
    assert matrix.columns == ["m=False", "m=True", "m=a", "m=b"]
    np.testing.assert_array_equal(
        np.asarray(matrix),
        [[0, 1, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 0]],
    )
    np.testing.assert_array_equal(y, [1, 0, 1, 3, np.nan, 2])
    ordinal, _ = table.to_matrix(columns=["m"], categorical="ordinal")
    np.testing.assert_array_equal(np.asarray(ordinal)[:, 0], [1, 0, 1, 3, 0, 2])


@pytest.mark.parametrize("label", [0, 1.5, True, -7])
def test_json_labels_round_trip_without_sources(tmp_path, label):
    frame = pd.DataFrame({label: [1.0, 2.0], "k": [0, 1]})
    Table(frame, name="t").save(tmp_path / "saved")
    loaded = Table.load(tmp_path / "saved", {"t": frame})
    assert loaded.columns == [label, "k"]
    pd.testing.assert_frame_equal(loaded.to_pandas(), frame)


@pytest.mark.parametrize(
    "label, sources, reason",
    [
        (0, True, "Parquet stores column names as text, so it would load back as '0'"),
        (("a", 1), False, "metadata.json keeps str, int, float and bool"),
        (np.int64(3), False, "metadata.json keeps str, int, float and bool"),
        (pd.Timestamp("2020-01-01"), False, "metadata.json keeps"),
        (None, False, "metadata.json keeps"),
    ],
)
def test_labels_that_would_not_load_back_are_refused_before_writing(
    tmp_path, label, sources, reason
):
    """A save that could not be loaded is refused up front, naming the column, its table and
    why; nothing is written."""
    frame = pd.DataFrame({label: [1.0, 2.0], "k": [0, 1]})
    table = Table(frame, name="t").merge(pd.DataFrame({"k": [0, 1], "z": [3.0, 4.0]}), on="k")
    with pytest.raises(
        ValueError,
        match=r"column .* of table 't' \(\w+\) cannot be saved: " + reason.replace("(", r"\("),
    ):
        table.save(tmp_path / "saved", sources=sources)
    assert not (tmp_path / "saved").exists()
