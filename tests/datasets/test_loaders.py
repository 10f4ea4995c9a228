"""Dataset loaders: Hamlet and Santoku against their materialized answers, TPC-H generated at a tiny scale."""

import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

from ilargi import NormalizedMatrix
from ilargi.datasets import (
    hamlet_materialized,
    hamlet_sources,
    load_hamlet,
    load_santoku,
    load_santoku_matrix,
    load_tpch,
    load_tpch_frames,
    make_star,
    santoku_answer_key,
    tpch_dir,
    tpch_regression,
    tpch_table,
)
from ilargi.datasets.tpch import TPCH_TABLES
from ilargi.metadata import Metadata
from tests.tools import TPCHGEN, found

# name: (fact rows, [columns of S, R1, R2, ...])
HAMLET = {
    "Flights": (66548, [20, 718, 6464, 6467]),
    "Walmart": (421570, [1, 2387, 53]),
    "Yelp": (215879, [11706, 43900]),
}
SANTOKU = {"Flights": (13939, 4646), "Walmart": (80138, 26699), "Yelp": (31756, 10585)}


# --- Hamlet ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HAMLET))
def test_hamlet_matrix_equals_the_materialized_join(datasets_dir, name):
    folder = datasets_dir / "hamlet" / name
    nm, y = load_hamlet(folder)
    expected, expected_y = hamlet_materialized(folder)
    n_rows, widths = HAMLET[name]
    assert nm.shape == expected.shape == (n_rows, sum(widths))
    actual = nm.materialize()
    assert sp.issparse(actual)
    assert (sp.csr_matrix(actual) != expected).nnz == 0
    np.testing.assert_array_equal(y, expected_y)
    assert y.dtype == np.float64 and len(y) == n_rows


def test_hamlet_column_names_and_parts(datasets_dir):
    nm, _ = load_hamlet(datasets_dir / "hamlet" / "Yelp")
    assert [part.name for part in nm.parts] == ["R1", "R2"]
    assert nm.columns[0] == "R1:0" and nm.columns[11706] == "R2:0" and nm.columns[-1] == "R2:43899"


def write_hamlet(folder, fact=None, fk=(3, 1, 2, 3), dimension=((1, 0), (0, 1), (1, 1))):
    folder.mkdir()
    pd.DataFrame({"V1": [1.0, 2.0, 3.0, 4.0]}).to_csv(folder / "MLY.csv", index=False)
    pd.DataFrame({"V1": list(fk)}).to_csv(folder / "MLFK1.csv", index=False)
    with open(folder / "MLR1Sparse.txt", "wb") as matrix_file:  # a path would get ".mtx" appended
        scipy.io.mmwrite(matrix_file, sp.coo_matrix(np.array(dimension, dtype=float)))
    if fact is not None:
        pd.DataFrame({"V1": fact}).to_csv(folder / "MLSraw.txt", index=False)
    return folder


def test_hamlet_tiny_folder_uses_one_based_foreign_keys(tmp_path):
    folder = write_hamlet(tmp_path / "tiny", fact=[7, 0, 5, 2])
    nm, y = load_hamlet(folder)
    expected = np.array([[7, 1, 1], [0, 1, 0], [5, 0, 1], [2, 1, 1]], dtype=float)
    np.testing.assert_array_equal(nm.toarray(), expected)
    np.testing.assert_array_equal(hamlet_materialized(folder)[0].toarray(), expected)
    assert list(nm.columns) == ["S:0", "R1:0", "R1:1"]
    np.testing.assert_array_equal(y, [1, 2, 3, 4])


def test_hamlet_bad_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no MLY.csv"):
        load_hamlet(tmp_path)
    folder = write_hamlet(tmp_path / "bad_fk", fk=(1, 2, 4, 1))
    with pytest.raises(
        ValueError, match=r"MLFK1.csv refers to rows outside 1..3 of MLR1Sparse.txt"
    ):
        load_hamlet(folder)
    folder = write_hamlet(tmp_path / "short_fk", fk=(1, 2, 3))
    with pytest.raises(ValueError, match="MLFK1.csv has 3 rows, MLY.csv has 4"):
        hamlet_materialized(folder)
    folder = write_hamlet(tmp_path / "no_matrix")
    (folder / "MLR1Sparse.txt").unlink()
    with pytest.raises(ValueError, match="no matching MLR1Sparse.txt"):
        load_hamlet(folder)


# --- Santoku --------------------------------------------------------------------------------------


@pytest.mark.parametrize("split", ["traintest", "hold"])
@pytest.mark.parametrize("name", sorted(SANTOKU))
def test_santoku_table_equals_the_denormalized_file(datasets_dir, name, split):
    folder = datasets_dir / "santoku" / name
    joined = load_santoku(folder, split).to_pandas().reset_index(drop=True)
    answer = santoku_answer_key(folder, split)
    assert len(answer) == SANTOKU[name][split == "hold"]
    assert sorted(joined.columns) == sorted(answer.columns)
    for column in answer.columns:
        np.testing.assert_array_equal(
            joined[column].astype(str).to_numpy(),
            answer[column].to_numpy(),
            err_msg=f"{name} {split}: column {column}",
        )


@pytest.mark.parametrize("name", sorted(SANTOKU))
def test_santoku_matrix_one_hot_encodes_every_column(datasets_dir, name):
    folder = datasets_dir / "santoku" / name
    nm, y = load_santoku_matrix(folder, "hold")
    answer = santoku_answer_key(folder, "hold")
    target = answer.columns[0]
    assert nm.shape[0] == len(answer)
    positive = {"codeshare": "t", "weekly_sales": "1", "stars": "H"}[target]
    np.testing.assert_array_equal(y, (answer[target] == positive).to_numpy(np.float64))
    # one level of every categorical column is set in each row
    np.testing.assert_array_equal(nm.sum(axis=1), np.full(len(answer), len(answer.columns) - 1.0))


def test_santoku_bad_split_and_folder(tmp_path):
    with pytest.raises(ValueError, match="split must be one of"):
        load_santoku(tmp_path, "validation")
    with pytest.raises(FileNotFoundError, match=r"expected one '\*hold\*MultS.csv' fact file"):
        load_santoku(tmp_path, "hold")


def test_santoku_row_numbers_out_of_range_are_named(tmp_path):
    (tmp_path / "XholdMultS.csv").write_text("label,dimid\n'a',1\n'b',3\n")
    (tmp_path / "dims.csv").write_text('"dimid","color"\n"\'k1\'","red"\n"\'k2\'","blue"\n')
    with pytest.raises(
        ValueError,
        match=r"XholdMultS.csv: column 'dimid' holds row numbers outside 1..2 of dims.csv",
    ):
        load_santoku(tmp_path, "hold")


# --- TPC-H ----------------------------------------------------------------------------------------

SF = 0.01
TPCH_ROWS = {
    "region": 5,
    "nation": 25,
    "supplier": 100,
    "customer": 1500,
    "part": 2000,
    "partsupp": 8000,
    "orders": 15000,
    "lineitem": 60175,
}


@pytest.fixture(scope="module")
def tpch_cache(tmp_path_factory):
    if not found("tpchgen-cli"):
        pytest.skip(TPCHGEN)
    cache = tmp_path_factory.mktemp("tpch")
    tpch_dir(SF, cache)
    return cache


def test_tpch_generates_once_into_the_cache(tpch_cache):
    folder = tpch_dir(SF, tpch_cache)
    assert folder == tpch_cache / "sf0.01"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"{name}.parquet" for name in TPCH_TABLES
    )
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    tpch_dir(SF, tpch_cache)
    assert stamps == {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}


def test_tpch_frames_have_numeric_decimals(tpch_cache):
    frames = load_tpch_frames(SF, tpch_cache)
    assert {name: len(frame) for name, frame in frames.items()} == TPCH_ROWS
    lineitem = frames["lineitem"]
    for column in ("l_quantity", "l_extendedprice", "l_discount", "l_tax"):
        assert lineitem[column].dtype == np.float64
    assert lineitem["l_shipdate"].dtype.kind == "M"
    nation = load_tpch(SF, tpch_cache, tables=("nation",), columns=("n_name", "c_name"))
    assert list(nation) == ["nation"] and nation["nation"].columns == ["n_name"]


def test_tpch_table_equals_the_pandas_merge_chain(tpch_cache):
    frames = load_tpch_frames(SF, tpch_cache)
    expected = (
        frames["lineitem"]
        .merge(frames["orders"], left_on="l_orderkey", right_on="o_orderkey")
        .merge(frames["customer"], left_on="o_custkey", right_on="c_custkey")
        .merge(frames["nation"], left_on="c_nationkey", right_on="n_nationkey")
        .merge(frames["part"], left_on="l_partkey", right_on="p_partkey")
        .merge(frames["supplier"], left_on="l_suppkey", right_on="s_suppkey")
    )
    joined = tpch_table(SF, tpch_cache).to_pandas().reset_index(drop=True)
    assert sorted(joined.columns) == sorted(expected.columns)
    pd.testing.assert_frame_equal(joined[list(expected.columns)], expected, check_dtype=False)


def test_tpch_regression_target_is_quantity_times_part_price(tpch_cache):
    nm, y = tpch_regression(SF, tpch_cache)
    assert nm.shape[0] == TPCH_ROWS["lineitem"]
    columns = list(nm.columns)
    assert {"l_quantity", "p_retailprice", "c_acctbal"} <= set(columns)
    assert not {"l_extendedprice", "o_totalprice"} & set(columns)
    dense = np.asarray(nm.toarray())
    product = dense[:, columns.index("l_quantity")] * dense[:, columns.index("p_retailprice")]
    np.testing.assert_allclose(y, product, rtol=1e-9)


def test_tpch_without_the_tool_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "empty" / "python"))  # nor beside Python
    with pytest.raises(RuntimeError, match="tpchgen-cli tool, which is not on PATH"):
        tpch_dir(SF, tmp_path / "cache")


def test_tpch_failing_tool_is_a_clear_error(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "tpchgen-cli"
    tool.write_text("#!/bin/sh\necho 'disk full' >&2\nexit 3\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(RuntimeError, match="tpchgen-cli failed for scale factor 0.01: disk full"):
        tpch_dir(SF, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # no half-written cache left behind


def test_tpch_bad_arguments(tpch_cache):
    with pytest.raises(ValueError, match="scale_factor must be positive"):
        tpch_dir(0, tpch_cache)
    with pytest.raises(ValueError, match=r"unknown TPC-H tables \['items'\]"):
        load_tpch_frames(SF, tpch_cache, tables=("items",))
    with pytest.raises(ValueError, match="nation is merged through customer.c_nationkey"):
        tpch_table(SF, tpch_cache, tables=("nation",))


# --- stored scenarios under metadata/ -------------------------------------------------------------

STORED = Path(__file__).resolve().parents[2] / "metadata"


def assert_same_metadata(stored, built):
    assert tuple(stored.shape) == tuple(built.shape)
    assert list(stored.names) == list(built.names) and list(stored.columns) == list(built.columns)
    for stored_rows, built_rows in zip(stored.rows, built.rows):
        assert (stored_rows is None) == (built_rows is None)
        if built_rows is not None:
            np.testing.assert_array_equal(stored_rows, built_rows)
    for stored_cols, built_cols in zip(stored.cols, built.cols):
        np.testing.assert_array_equal(stored_cols, built_cols)


@pytest.mark.parametrize("name", sorted(HAMLET))
def test_stored_hamlet_scenario_rebuilds_the_matrix(datasets_dir, name):
    folder = datasets_dir / "hamlet" / name
    built, _ = load_hamlet(folder)
    assert_same_metadata(Metadata.load(STORED / f"hamlet_{name.lower()}"), built.metadata)
    sources, _ = hamlet_sources(folder)
    loaded = NormalizedMatrix.load(STORED / f"hamlet_{name.lower()}", sources=sources)
    assert_same_metadata(loaded.metadata, built.metadata)
    assert loaded.nnz == built.nnz


def test_stored_synthetic_scenario_matches_the_generator():
    built, _ = make_star(random_state=0)
    assert_same_metadata(Metadata.load(STORED / "synthetic_star"), built.metadata)
