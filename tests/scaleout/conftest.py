"""Fixtures of the scale-out tests: one LocalCluster per test module (two worker processes, one
thread each, as CI runs them), and small join scenarios built through ilargi.Table.

The tests skip cleanly where the optional ``dask`` extra is not installed.
"""

import logging

import numpy as np
import pandas as pd
import pytest

from ilargi import Table
from ilargi.datasets import make_star

try:
    import dask  # noqa: F401
    import distributed  # noqa: F401
except ImportError:  # without the optional dask extra, this folder's tests are not collected
    collect_ignore_glob = ["test_*.py"]

RTOL = 1e-8


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of 2 worker processes with 1 thread each, and its Client (the default
    scheduler of every computation while the module's tests run)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as c,
    ):
        yield c


def assert_close(actual, expected, rtol=RTOL, what=""):
    """‖actual − expected‖∞ ≤ rtol · ‖expected‖∞ (entries near 0 judged at the result's scale)."""
    actual = np.asarray(actual.toarray() if hasattr(actual, "toarray") else actual, dtype=float)
    expected = np.asarray(
        expected.toarray() if hasattr(expected, "toarray") else expected, dtype=float
    )
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-300)
    error = float(np.abs(actual - expected).max(initial=0.0))
    assert error <= rtol * scale, f"{what}: max error {error:.3g} > {rtol} × {scale:.3g}"


def frames(n=257, seed=0):
    """A fact table (numbers, a category with a missing value, a foreign key with misses) and the
    tables of a snowflake: orders -> customer, and a product dimension."""
    rng = np.random.default_rng(seed)
    n_orders, n_customers, n_products = 60, 15, 12
    fact = pd.DataFrame(
        {
            "order": rng.integers(0, n_orders, n),
            "product": rng.integers(0, n_products + 3, n),  # keys >= 12 have no product: NULL rows
            "qty": rng.integers(1, 20, n).astype(float),
            "price": rng.normal(10, 3, n),
            "mode": rng.choice(["air", "rail", "ship", None], n),
        }
    )
    fact["y"] = 2 * fact["qty"] + rng.normal(size=n)
    orders = pd.DataFrame(
        {
            "order_id": np.arange(n_orders),
            "customer": rng.integers(0, n_customers, n_orders),
            "priority": rng.choice(["1-URGENT", "2-HIGH", "3-LOW"], n_orders),
            "discount": rng.uniform(0, 0.1, n_orders),
        }
    )
    customers = pd.DataFrame(
        {
            "customer_id": np.arange(n_customers),
            "balance": rng.normal(100, 30, n_customers),
            "segment": rng.choice(["a", "b", "c", "d"], n_customers),
        }
    )
    products = pd.DataFrame(
        {
            "product_id": np.arange(n_products),
            "size": rng.integers(1, 50, n_products).astype(float),
            "brand": rng.choice(["x", "y", "z"], n_products),
        }
    )
    return fact, orders, customers, products


def snowflake_table(n=257, seed=0, how="left"):
    """fact ⋈ orders ⋈ customers (snowflake) ⋈ products (left join: NULL rows)."""
    fact, orders, customers, products = frames(n, seed)
    table = Table(fact, name="fact").merge(
        Table(orders, name="orders"), left_on="order", right_on="order_id", validate="many_to_one"
    )
    table = table.merge(
        Table(customers, name="customers"),
        left_on="customer",
        right_on="customer_id",
        validate="many_to_one",
    )
    return table.merge(
        Table(products, name="products"),
        left_on="product",
        right_on="product_id",
        how=how,
        validate="many_to_one",
    )


FEATURES = ["qty", "price", "mode", "priority", "discount", "balance", "segment", "size", "brand"]


def scenario(name, n=257):
    """(in-memory NormalizedMatrix, y) of a named scenario."""
    if name == "dense":
        return make_star(n, tuple_ratio=8, n_dims=2, d_fact=3, random_state=1)
    if name == "onehot":
        X, y = snowflake_table(n).to_matrix(
            columns=["mode", "priority", "segment", "brand"], target="y"
        )
        return X, y
    if name == "snowflake":  # numbers and one-hot, NULL rows of the left join, a snowflake
        return snowflake_table(n).to_matrix(columns=FEATURES, target="y")
    raise ValueError(name)


SCENARIOS = ("dense", "onehot", "snowflake")
CHUNKINGS = (64, 100, (50, 7, 200), 257)
