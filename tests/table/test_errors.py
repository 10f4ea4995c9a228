"""Bad input to Table / merge / concat / to_matrix / load: a clear error naming table, column and reason.
Inputs are never modified, whatever happens."""

import numpy as np
import pandas as pd
import pytest

from ilargi.table import Table, concat


@pytest.fixture
def fact():
    return pd.DataFrame({"k": [1, 2, 2], "a": [1.0, 2.0, 3.0], "s": ["x", "y", "x"]})


@pytest.fixture
def dim():
    return pd.DataFrame({"k": [1, 2], "b": [10.0, 20.0]})


def test_key_column_missing_names_table_and_column(fact, dim):
    with pytest.raises(ValueError, match=r"key column 'kk' is missing from table 'dim'"):
        Table(fact, name="fact").merge(Table(dim, name="dim"), left_on="k", right_on="kk")
    with pytest.raises(ValueError, match=r"key column 'kk' is missing from table 'fact'"):
        Table(fact, name="fact").merge(Table(dim, name="dim"), left_on="kk", right_on="k")


def test_merge_key_that_refers_to_no_table(fact, dim):
    joined = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k")
    nation = pd.DataFrame({"n_key": [1], "n_name": ["x"]})
    with pytest.raises(
        ValueError,
        match=r"merge key 'c_nationkey' refers to no table: none of the tables on "
        r"the left side \(fact, dim\) has a column 'c_nationkey'",
    ):
        joined.merge(nation, left_on="c_nationkey", right_on="n_key")


def test_key_dtypes_that_cannot_match(fact):
    strings = pd.DataFrame({"k": ["1", "2"], "b": [1, 2]})
    with pytest.raises(
        ValueError,
        match=r"You are trying to merge on int64 and str columns for key 'k': left "
        r"column 'k' of table 'fact' and right column 'k' of table 'codes'",
    ):
        Table(fact, name="fact").merge(Table(strings, name="codes"), on="k")


def test_duplicate_keys_on_the_one_side(fact, dim):
    with pytest.raises(
        ValueError,
        match=r"validate='many_to_one': merge keys \['k'\] are not unique in the "
        r"right table 'again': key 2 appears 2 times",
    ):
        Table(dim, name="dim").merge(Table(fact, name="again"), on="k", validate="many_to_one")
    with pytest.raises(
        ValueError, match=r"not unique in the left table 'fact'.*not a one_to_one merge"
    ):
        Table(fact, name="fact").merge(dim, on="k", validate="1:1")
    composite = pd.DataFrame({"k": [1, 1], "a": [1.0, 1.0], "c": [0, 1]})
    with pytest.raises(ValueError, match=r"key \(1, 1.0\) appears 2 times"):
        Table(fact).merge(composite, on=["k", "a"], validate="one_to_one")
    Table(fact).merge(dim, on="k", validate="m:1")  # unique right side passes


@pytest.mark.parametrize("how", ["cross", "full", None])
def test_unknown_how(fact, dim, how):
    with pytest.raises(
        ValueError, match=rf"unknown how={how!r}; expected one of 'inner', 'left', 'right', 'outer'"
    ):
        Table(fact).merge(dim, on="k", how=how)


def test_unknown_validate_overlap_and_bad_keys(fact, dim):
    with pytest.raises(ValueError, match="unknown validate='many'"):
        Table(fact).merge(dim, on="k", validate="many")
    with pytest.raises(ValueError, match="unknown overlap='last'"):
        Table(fact).merge(dim, on="k", overlap="last")
    with pytest.raises(ValueError, match="pass either on= or left_on=/right_on=, not both"):
        Table(fact).merge(dim, on="k", left_on="k", right_on="k")
    with pytest.raises(ValueError, match="left_on= and right_on= must be given together"):
        Table(fact).merge(dim, left_on="k")
    with pytest.raises(ValueError, match="left_on has 2 keys but right_on has 1"):
        Table(fact).merge(dim, left_on=["k", "a"], right_on="k")
    with pytest.raises(ValueError, match=r"no common columns to merge 'table' and 'right' on"):
        Table(fact).merge(pd.DataFrame({"z": [1]}))
    with pytest.raises(TypeError, match=r"on= must name columns; got a ndarray"):
        Table(fact).merge(dim, on=[np.array([1, 2, 2])])
    with pytest.raises(TypeError, match="expected an ilargi.Table or a pandas DataFrame, got list"):
        Table(fact).merge([1, 2], on="k")
    with pytest.raises(TypeError, match=r"suffixes must be a pair"):
        Table(fact).merge(fact, on="k", suffixes={"_l", "_r"})
    with pytest.raises(ValueError, match=r"columns overlap but no suffix specified: \['a', 's'\]"):
        Table(fact).merge(fact, on="k", suffixes=(None, None))
    clash = pd.DataFrame({"k": [1], "a": [1.0], "a_x": [2.0]})
    with pytest.raises(ValueError, match=r"suffixes' which cause duplicate columns \['a_x'\]"):
        Table(fact).merge(clash, on="k")


def test_bad_sources():
    with pytest.raises(TypeError, match=r"table 'raw': expected a pandas DataFrame, got ndarray"):
        Table(np.zeros((2, 2)), name="raw")
    with pytest.raises(ValueError, match=r"table 'dup': duplicate column names \['a'\]"):
        Table(pd.DataFrame([[1, 2]], columns=["a", "a"]), name="dup")
    with pytest.raises(ValueError, match="concat needs at least one table"):
        concat([])


def test_non_numeric_column_with_categorical_error(fact, dim):
    table = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k")
    with pytest.raises(
        TypeError,
        match=r"column 's' \(table 'fact', dtype str\) is not numeric and "
        r"categorical='error'",
    ):
        table.to_matrix(categorical="error")
    matrix, _ = table.to_matrix(columns=["a", "b"], categorical="error")
    assert matrix.columns == ["a", "b"]


def test_unsupported_dtypes(fact):
    nested = pd.DataFrame({"k": [1, 2], "tags": [[1, 2], [3]]})
    table = Table(fact, name="fact").merge(Table(nested, name="nested"), on="k")
    with pytest.raises(
        TypeError,
        match=r"column 'tags' \(table 'nested', dtype object\) holds unsupported "
        r"values \(nested or mixed objects\)",
    ):
        table.to_matrix()
    with pytest.raises(
        TypeError,
        match=r"cannot merge on left column 'tags' of table 'nested' \(object\) and "
        r"right column 'tags' of table 'right' \(object\): their values cannot be "
        r"hashed \(unhashable type: 'list'\)",
    ):
        Table(nested, name="nested").merge(nested, on="tags")
    dated = pd.DataFrame({"k": [1, 2], "when": pd.to_datetime(["2020-01-01", "2021-01-01"])})
    with pytest.raises(
        TypeError,
        match=r"column 'when' \(table 'dated', dtype datetime64\[.*\]\) holds "
        r"datetime values",
    ):
        Table(dated, name="dated").to_matrix()
    mixed = concat([pd.DataFrame({"v": [1.0]}), pd.DataFrame({"v": ["a"]})])
    with pytest.raises(TypeError, match="column 'v' mixes numeric and non-numeric values"):
        mixed.to_matrix()


def test_to_matrix_arguments(fact):
    table = Table(fact, name="fact")
    with pytest.raises(ValueError, match="unknown categorical='dummy'"):
        table.to_matrix(categorical="dummy")
    with pytest.raises(ValueError, match="unknown missing='drop'"):
        table.to_matrix(missing="drop")
    with pytest.raises(ValueError, match=r"target column 'y' is not a column of table 'fact'"):
        table.to_matrix(target="y")
    with pytest.raises(ValueError, match=r"columns \['zz'\] are not columns of table 'fact'"):
        table.to_matrix(columns=["a", "zz"])
    with pytest.raises(ValueError, match=r"target column 'a' is also selected"):
        table.to_matrix(columns=["a"], target="a")
    with pytest.raises(ValueError, match=r"columns \['a'\] are selected twice"):
        table.to_matrix(columns=["a", "a"])
    with pytest.raises(ValueError, match=r"table 'fact': no columns to encode"):
        table.to_matrix(columns=[])
    clash = Table(pd.DataFrame({"s": ["x", "y"], "s=x": [1.0, 2.0]}), name="clash")
    with pytest.raises(ValueError, match=r"encoded column names collide: \['s=x'\]"):
        clash.to_matrix()


def test_load_errors(tmp_path, fact):
    table = Table(fact, name="fact")
    table.save(tmp_path)
    with pytest.raises(
        ValueError, match=r"Table.load needs its source 'fact' \(a DataFrame, not saved\)"
    ):
        Table.load(tmp_path)
    with pytest.raises(ValueError, match=r"source 'fact' has 2 rows; the saved table expects 3"):
        Table.load(tmp_path, {"fact": fact.head(2)})
    with pytest.raises(ValueError, match=r"source 'fact' lacks columns \['s'\]"):
        Table.load(tmp_path, {"fact": fact.drop(columns="s")})
    with pytest.raises(FileNotFoundError, match="no ilargi metadata"):
        Table.load(tmp_path / "nowhere")


def test_inputs_are_never_modified(fact, dim):
    before_fact, before_dim = fact.copy(), dim.copy()
    table = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="outer")
    concat([table, fact]).to_matrix(missing="mean")
    table.to_pandas().iloc[0, 0] = 99
    fact.loc[0, "a"] = -1.0  # a later edit of the input does not reach the Table either
    assert table.to_pandas().loc[0, "a"] == 1.0
    pd.testing.assert_frame_equal(dim, before_dim)
    pd.testing.assert_frame_equal(fact.drop(index=0), before_fact.drop(index=0))


def test_empty_tables_like_pandas():
    empty = pd.DataFrame({"k": pd.Series([], dtype=np.int64)})
    assert Table(empty).merge(empty, on="k").shape == (0, 1)
    assert concat([empty, empty]).to_pandas().shape == (0, 1)
    matrix, y = Table(empty).to_matrix(target=None)
    assert matrix.shape == (0, 1) and y is None


@pytest.mark.parametrize("dtype", ["float64", "float32", "Float64"])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_infinite_values_name_their_column_and_the_option(fact, dtype, value):
    dim = pd.DataFrame({"k": [1, 2], "b": pd.array([1.0, value], dtype=dtype)})
    table = Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="left")
    with pytest.raises(
        ValueError,
        match=rf"column 'b' \(table 'dim'\) holds {value} at source row 1; .*"
        r"to_matrix\(\.\.\., allow_nonfinite=True\)",
    ):
        table.to_matrix(target="a")
    matrix, _ = table.to_matrix(target="a", allow_nonfinite=True)
    assert np.isinf(matrix.toarray()[:, matrix.columns.index("b")]).sum() == 2  # rows with k == 2
    nan_only = dim.assign(
        b=pd.array([1.0, None], dtype=dtype)
    )  # NaN is a missing value, not refused
    matrix, _ = Table(fact).merge(nan_only, on="k").to_matrix(target="a", missing="indicator")
    assert "b__missing" in matrix.columns
