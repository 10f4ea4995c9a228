"""
Gradient-boosted trees on Parquet files, binned as they are read (TPC-H)
========================================================================

TPC-H's ``lineitem`` refers to ``orders`` (which refers to ``customer``) and to ``part``. The
tables are opened lazily with :meth:`ilargi.Table.from_parquet` and joined along the snowflake's
keys without building the join. A tree ensemble reads each column only as bins, so
:meth:`~ilargi.Table.to_binned` reads, encodes and bins one column at a time (strings as the
codes of their sorted levels): the float64 values of a table are never held, only a byte per
source row and column. The bins are found from the training rows (``fit_rows``), and the
held-out rows are binned with them, as LightGBM bins a validation set with its training set's
bins; a row slice of the result shares its codes.

The target ``l_extendedprice`` is ``l_quantity * p_retailprice``, a product across the join,
which trees learn where a linear model cannot (compare ``ridge_tpch_parquet.py``).

The Parquet files come from ``tpchgen-cli`` (``pip install "ilargi[datasets]"``), generated into
a cache folder by :func:`ilargi.datasets.tpch_dir` on the first run, or from any folder holding
``lineitem.parquet``, ``orders.parquet``, ``customer.parquet`` and ``part.parquet``::

    python examples/gbdt_tpch_parquet.py --sf 0.01           # 60 thousand line items
    python examples/gbdt_tpch_parquet.py --sf 1 --trees 200  # 6 million
    python examples/gbdt_tpch_parquet.py --parquet DIR       # your own TPC-H files
"""

import argparse
import resource
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
# Bins in, trees out
# ------------------
# The last fifth of the line items is held out; the estimator's ``max_bin`` is the binning's.
def fit_and_score(binned, y, trees):
    split = binned.shape[0] - binned.shape[0] // 5
    model = ilargi.GradientBoostingRegressor(n_estimators=trees, num_leaves=31, learning_rate=0.1)
    start = time.perf_counter()
    model.fit(binned[:split], y[:split])
    print(
        f"  fit: {time.perf_counter() - start:.2f} s, {model.n_iter_} trees, plan {model.plan_!r}"
    )
    predicted = model.predict(binned[split:])
    rmse = float(np.sqrt(np.mean((predicted - y[split:]) ** 2)))
    print(f"  test RMSE {rmse:,.2f} (the target's spread {np.std(y[split:]):,.2f})")
    ranked = np.argsort(model.feature_importances_)[::-1][:3]
    print("  most split on: " + ", ".join(str(model.feature_names_in_[j]) for j in ranked))
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(description="Gradient-boosted trees on TPC-H Parquet files.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--sf",
        type=float,
        default=0.1,
        help="TPC-H scale factor to generate (default: %(default)s)",
    )
    source.add_argument("--parquet", type=Path, help="a folder of TPC-H Parquet files instead")
    parser.add_argument("--trees", type=int, default=50, help="boosting rounds (default: 50)")
    args = parser.parse_args(argv)
    folder = args.parquet or ilargi.datasets.tpch_dir(args.sf)  # runs tpchgen-cli the first time

    start = time.perf_counter()
    table = snowflake(folder)
    n = len(table)
    binned, y = table.to_binned(
        FEATURES,
        target="l_extendedprice",
        categorical="ordinal",
        fit_rows=slice(0, n - n // 5),
    )
    print(f"TPC-H from {folder}: {table}")
    print(
        f"  binned: {binned.shape[0]:,} rows x {binned.shape[1]} columns in "
        f"{time.perf_counter() - start:.2f} s"
    )
    del table  # the join's index vectors go too where the bins no longer need them
    fit_and_score(binned, y, args.trees)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"  peak resident memory of the process: {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
