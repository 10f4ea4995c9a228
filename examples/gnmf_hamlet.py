"""Gaussian NMF of a Hamlet one-hot star schema, without the join: X ~= W H, W, H >= 0.

Each multiplicative update touches the data twice, X @ H^T and X^T @ W, both computed per source
table; W (rows x rank) and H (rank x columns) are small. The objective 0.5 ||X - W H||^2 falls at
every iteration (printed every few iterations); the table compares the two plans and the relative
reconstruction error ||X - W H|| / ||X|| on held-out rows (W fitted to them with H fixed).

    python examples/gnmf_hamlet.py                          # Walmart, rank 5
    python examples/gnmf_hamlet.py --dataset Yelp --rank 10 --rows 20000
"""
import argparse
import os
from pathlib import Path

from ilargi.cli import compare_plans, format_comparison
from ilargi.datasets import load_hamlet
from ilargi.models import GNMF

DATASETS = Path(os.environ.get("ILARGI_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=["Flights", "Walmart", "Yelp"], default="Walmart")
    parser.add_argument("--rank", type=int, default=5)
    parser.add_argument("--max-iter", type=int, default=50, help="multiplicative updates at most")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS fact rows (default: all)")
    parser.add_argument("--data", type=Path, default=DATASETS / "hamlet", help="folder of the Hamlet datasets")
    args = parser.parse_args(argv)

    X, _ = load_hamlet(args.data / args.dataset)
    X = X[: args.rows]
    print(f"{args.dataset}: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns from {len(X.parts)} tables")
    model = GNMF(n_components=args.rank, max_iter=args.max_iter, tol=0.0, random_state=0, plan="factorized").fit(X)
    history = model.loss_history_
    shown = sorted({*range(0, len(history), 10), len(history) - 1})
    print("objective after iteration " + ", ".join(f"{i + 1}: {history[i]:.6g}" for i in shown))
    print(format_comparison(model, X, compare_plans(model, X)))


if __name__ == "__main__":
    main()
