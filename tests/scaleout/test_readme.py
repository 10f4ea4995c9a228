"""The README's Dask example runs as written: its code block, executed in a folder holding small
``lineitem.parquet`` and ``orders.parquet`` files, fits the model the in-memory matrix gives."""

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ilargi import Ridge, Table
from tests.scaleout.conftest import assert_close

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- dask-example: run as written by tests/scaleout/test_readme.py -->"


def _example():
    text = README.read_text()
    assert MARKER in text, "the README lost its Dask example"
    match = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    return match.group(1)


def _tables(folder):
    rng = np.random.default_rng(0)
    n_orders, n = 40, 300
    orders = pd.DataFrame(
        {
            "o_orderkey": np.arange(n_orders) * 4 + 1,
            "o_totalprice": rng.uniform(1e3, 5e4, n_orders),
            "o_orderpriority": rng.choice(["1-URGENT", "2-HIGH", "5-LOW"], n_orders),
            "o_orderdate": pd.Timestamp("1995-01-01"),
        }
    )  # a date column, left out
    lineitem = pd.DataFrame(
        {
            "l_orderkey": np.sort(rng.choice(orders["o_orderkey"], n)),
            "l_quantity": rng.integers(1, 50, n).astype(float),
            "l_discount": rng.uniform(0, 0.1, n),
        }
    )
    lineitem["l_extendedprice"] = 900 * lineitem["l_quantity"] + rng.normal(0, 50, n)
    lineitem.to_parquet(folder / "lineitem.parquet", row_group_size=100)
    orders.to_parquet(folder / "orders.parquet")
    return lineitem, orders


def test_readme_dask_example(tmp_path, monkeypatch):
    lineitem, orders = _tables(tmp_path)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    try:
        exec(compile(_example(), str(README), "exec"), namespace)
        X, model = namespace["X"], namespace["model"]
        expected_X, expected_y = (
            Table(lineitem, name="lineitem")
            .merge(Table(orders, name="orders"), left_on="l_orderkey", right_on="o_orderkey")
            .to_matrix(
                columns=["l_quantity", "l_discount", "o_totalprice", "o_orderpriority"],
                target="l_extendedprice",
            )
        )
        assert type(X).__name__ == "DaskNormalizedMatrix" and X.shape == expected_X.shape
        expected = Ridge(alpha=1.0).fit(expected_X, expected_y)
        assert_close(model.coef_, expected.coef_, what="coef")
        assert_close(model.predict(X).compute(), expected.predict(expected_X), what="predict")
    finally:
        client = namespace.get("client")
        if client is not None:
            cluster = client.cluster
            client.close()
            cluster.close()
