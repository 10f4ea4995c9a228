"""k-means and Gaussian NMF of a Hamlet one-hot star schema, without the join.

k-means: squared distances need ||x||^2 (row sums of the squared table, computed per source table) and
X @ C^T (one factorized product per iteration); new centers are X^T Z / counts for the one-hot label
matrix Z. GNMF (X ~= W H, W, H >= 0): each multiplicative update touches the data twice, X @ H^T and
X^T @ W; the objective 0.5 ||X - W H||^2 falls at every iteration. Both plans give the same model; the
tables compare their cost, and the inertia per row / relative reconstruction error on held-out rows.

    python examples/clustering_hamlet.py                     # Walmart, 8 clusters, rank 5
    python examples/clustering_hamlet.py --dataset Flights --clusters 5 --rank 10 --rows 20000
"""
import argparse
from pathlib import Path

from ilargi.cli import compare_plans, format_comparison, shared_datasets
from ilargi.datasets import load_hamlet
from ilargi.models import GNMF, KMeans


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=["Flights", "Walmart", "Yelp"], default="Walmart")
    parser.add_argument("--clusters", type=int, default=8, help="k of k-means")
    parser.add_argument("--rank", type=int, default=5, help="rank of GNMF")
    parser.add_argument("--max-iter", type=int, default=50, help="iterations of each model at most")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS fact rows (default: all)")
    parser.add_argument("--data", type=Path, default=shared_datasets() / "hamlet", help="Hamlet datasets folder")
    args = parser.parse_args(argv)

    X, _ = load_hamlet(args.data / args.dataset)
    X = X[: args.rows]
    print(f"{args.dataset}: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns from {len(X.parts)} tables")

    kmeans = KMeans(n_clusters=args.clusters, max_iter=args.max_iter, random_state=0)
    print(f"\nk-means, k = {args.clusters}")
    print(format_comparison(kmeans, X, compare_plans(kmeans, X)))

    gnmf = GNMF(n_components=args.rank, max_iter=args.max_iter, tol=0.0, random_state=0)
    history = gnmf.set_params(plan="factorized").fit(X).loss_history_
    shown = sorted({*range(0, len(history), 10), len(history) - 1})
    print(f"\nGNMF, rank {args.rank}; objective after iteration "
          + ", ".join(f"{i + 1}: {history[i]:.6g}" for i in shown))
    print(format_comparison(gnmf, X, compare_plans(gnmf, X)))


if __name__ == "__main__":
    main()
