"""Logistic regression on the Hamlet one-hot star schemas (Flights, Walmart, Yelp), without the join.

Each dataset is a fact table with foreign keys into one-hot encoded dimension tables. The target is
made binary as in the factorized-learning literature: a codeshare flight (Flights), weekly sales in
bin 4 or above (Walmart, bins 1-7), a review of 4 stars or more (Yelp). The model is trained twice on
the same 80 % of the rows, factorized (on the NormalizedMatrix) and on the materialized join, and
scored on the other 20 %: the same model at a different cost.

    python examples/logistic_hamlet.py                      # all three datasets, all rows
    python examples/logistic_hamlet.py --dataset Yelp --rows 20000
"""
import argparse
from pathlib import Path

from ilargi.cli import compare_plans, format_comparison, shared_datasets
from ilargi.datasets import load_hamlet
from ilargi.models import LogisticRegression

POSITIVE_FROM = {"Flights": 1, "Walmart": 4, "Yelp": 4}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=sorted(POSITIVE_FROM), action="append",
                        help="repeat for several (default: all three)")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS fact rows (default: all)")
    parser.add_argument("--max-iter", type=int, default=100, help="L-BFGS iterations")
    parser.add_argument("--data", type=Path, default=shared_datasets() / "hamlet", help="folder of the Hamlet datasets")
    args = parser.parse_args(argv)
    for name in args.dataset or sorted(POSITIVE_FROM):
        X, y = load_hamlet(args.data / name)
        X, y = X[: args.rows], (y[: args.rows] >= POSITIVE_FROM[name]).astype(float)
        print(f"\n{name}: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns from {len(X.parts)} tables, "
              f"{y.mean():.0%} positive")
        model = LogisticRegression(C=1.0, max_iter=args.max_iter)
        print(format_comparison(model, X, compare_plans(model, X, y)))


if __name__ == "__main__":
    main()
