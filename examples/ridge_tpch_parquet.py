"""
Ridge regression on a snowflake of Parquet files (TPC-H)
========================================================

TPC-H's ``lineitem`` refers to ``orders`` (which refers to ``customer``) and to ``part``. The
tables are opened lazily with :meth:`ilargi.Table.from_parquet` (a column is read only when a
merge or the encoding needs it), joined along the snowflake's keys as ``pandas.merge`` would join
them, encoded with :meth:`~ilargi.Table.to_matrix` (numbers as numbers, strings one-hot, per
source table) and fitted with :class:`ilargi.Ridge`.

The joined table would repeat every order, customer and part for each of its line items; the fit
computes its Gram matrix from the source tables instead. The target ``l_extendedprice`` is
``l_quantity * p_retailprice``, a product across the join, so a linear model explains most of it
only with the part's price. The one-hot columns of a categorical sum to one, like the intercept,
which makes plain least squares singular: the small ridge penalty makes it well-posed.

The Parquet files come from ``tpchgen-cli`` (``pip install "ilargi[datasets]"``), generated into
a cache folder by :func:`ilargi.datasets.tpch_dir` on the first run (a second for scale factor
0.01), or from any folder holding ``lineitem.parquet``, ``orders.parquet``, ``customer.parquet``
and ``part.parquet``::

    python examples/ridge_tpch_parquet.py --sf 0.01          # 60 thousand line items
    python examples/ridge_tpch_parquet.py --sf 1             # 6 million
    python examples/ridge_tpch_parquet.py --parquet DIR      # your own TPC-H files
"""

import argparse
import time
from pathlib import Path

import numpy as np

import ilargi

FEATURES = [
    "l_quantity",
    "l_discount",
    "l_tax",
    "l_returnflag",
    "l_shipmode",  # lineitem
    "o_orderpriority",
    "o_orderstatus",  # orders
    "c_acctbal",
    "c_mktsegment",  # customer
    "p_size",
    "p_retailprice",
    "p_mfgr",
    "p_container",
]  # part


# %%
# Tables in, a lazy join out
# --------------------------
# Each merge checks that a line item finds at most one order, customer or part
# (``validate="many_to_one"``) and composes index vectors: nothing is joined row by row.
def snowflake(folder):
    lineitem, orders, customer, part = (
        ilargi.Table.from_parquet(Path(folder) / f"{name}.parquet")
        for name in ("lineitem", "orders", "customer", "part")
    )
    return (
        lineitem.merge(orders, left_on="l_orderkey", right_on="o_orderkey", validate="many_to_one")
        .merge(customer, left_on="o_custkey", right_on="c_custkey", validate="many_to_one")
        .merge(part, left_on="l_partkey", right_on="p_partkey", validate="many_to_one")
    )


# %%
# Fit, predict, score
# -------------------
# A random 80/20 split of the line items by row selection (the matrix stays factorized), a fit
# whose plan the chooser picks, R² on the held-out rows.
def fit_and_score(X, y, seed=0):
    rows = np.random.default_rng(seed).permutation(X.shape[0])
    train, test = rows[: int(0.8 * len(rows))], rows[int(0.8 * len(rows)) :]
    model = ilargi.Ridge(alpha=1.0, plan="auto")
    start = time.perf_counter()
    model.fit(X[train], y[train])
    print(f"  fit: {time.perf_counter() - start:.2f} s, plan {model.plan_!r}")
    print(f"  test R^2 {model.score(X[test], y[test]):.4f}")
    predicted = model.predict(X[test[:3]])
    for truth, guess in zip(y[test[:3]], predicted):
        print(f"  l_extendedprice {truth:10.2f}, predicted {guess:10.2f}")
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description="Ridge regression on TPC-H Parquet files.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--sf",
        type=float,
        default=0.1,
        help="TPC-H scale factor to generate (default: %(default)s)",
    )
    source.add_argument("--parquet", type=Path, help="a folder of TPC-H Parquet files instead")
    args = parser.parse_args(argv)
    folder = args.parquet or ilargi.datasets.tpch_dir(args.sf)  # runs tpchgen-cli the first time

    start = time.perf_counter()
    table = snowflake(folder)
    X, y = table.to_matrix(columns=FEATURES, target="l_extendedprice")
    print(f"TPC-H from {folder}: {table}")
    print(
        f"  X: {X.shape[0]:,} rows x {X.shape[1]} columns in {len(X.parts)} parts "
        f"({', '.join(part.name for part in X.parts)}); built in {time.perf_counter() - start:.2f} s"
    )
    fit_and_score(X, y)


if __name__ == "__main__":
    main()
