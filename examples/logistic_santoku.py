"""Logistic regression on a Santoku dataset, built from its raw categorical tables with ilargi.Table.

The fact table and its dimension tables are CSV files of categorical strings. They are joined lazily
(``Table.merge``, pandas semantics), the training and the holdout split are stacked with
``ilargi.concat`` so both are encoded with the same one-hot columns, and ``to_matrix`` one-hot encodes
each source table once, as sparse parts of a NormalizedMatrix. The model never sees a joined row.
Both plans minimize the same objective; on these redundant one-hot columns L-BFGS's path is sensitive
to rounding, so they may stop at slightly different points of the same optimum (compare the objective).

    python examples/logistic_santoku.py                     # Flights
    python examples/logistic_santoku.py --dataset Yelp
"""
import argparse
import time
from pathlib import Path

import ilargi
from ilargi.cli import shared_datasets
from ilargi.datasets import load_santoku
from ilargi.models import LogisticRegression



def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=["Flights", "Walmart", "Yelp"], default="Flights")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS training rows (default: all)")
    parser.add_argument("--data", type=Path, default=shared_datasets() / "santoku", help="folder of the Santoku datasets")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    train = load_santoku(args.data / args.dataset)                 # fact ⋈ dimensions, lazy
    holdout = load_santoku(args.data / args.dataset, split="hold")
    target = train.columns[0]
    X, y = ilargi.concat([train, holdout]).to_matrix(target=target)  # one-hot per source table
    n_train = train.shape[0] if args.rows is None else min(args.rows, train.shape[0])
    fit_rows, test_rows = slice(0, n_train), slice(train.shape[0], X.shape[0])
    print(f"{args.dataset}: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns from {len(X.parts)} "
          f"source parts, target {target!r}; built in {time.perf_counter() - start:.2f} s")

    for plan in ("factorized", "materialized"):
        model = LogisticRegression(C=1.0, max_iter=1000, plan=plan)
        start = time.perf_counter()
        model.fit(X[fit_rows], y[fit_rows])
        seconds = time.perf_counter() - start
        print(f"  {plan:<13} fit {seconds:6.2f} s   holdout accuracy {model.score(X[test_rows], y[test_rows]):.4f}"
              f"   objective {model.loss_history_[-1]:.6f} after {model.n_iter_} L-BFGS iterations")


if __name__ == "__main__":
    main()
