"""Linear regression on TPC-H: lineitem ⋈ orders ⋈ customer ⋈ part, target l_extendedprice.

The tables are generated with tpchgen-cli (cached after the first run), joined lazily along the
snowflake's foreign keys with ilargi.Table and encoded per source table (numbers as numbers, strings
one-hot). The join would repeat every order, customer and part row for each of its line items; the
factorized fit computes the Gram matrix from the sources instead. l_extendedprice is
l_quantity * p_retailprice, a product across the join: a linear model gets most of it (R^2 printed).

The one-hot columns of each categorical sum to 1, like the intercept, so plain least squares is
singular here (LinearRegression would fall back to lsqr, which iterates over the data); a small
ridge penalty makes the normal equations well-posed, solved in closed form from the Gram matrix.

    python examples/linear_tpch.py              # scale factor 1 (6 million line items)
    python examples/linear_tpch.py --sf 0.01
"""
import argparse
import time

from ilargi.cli import compare_plans, format_comparison
from ilargi.datasets import tpch_regression
from ilargi.models import Ridge


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    X, y = tpch_regression(args.sf)
    print(f"TPC-H sf={args.sf:g}: {X.shape[0]:,} line items x {X.shape[1]} features from "
          f"{len(X.parts)} source parts ({', '.join(part.name for part in X.parts)}); "
          f"built in {time.perf_counter() - start:.1f} s")
    model = Ridge(alpha=1.0)
    results = compare_plans(model, X, y)
    print(format_comparison(model, X, results))


if __name__ == "__main__":
    main()
