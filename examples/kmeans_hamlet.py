"""k-means clustering of a Hamlet one-hot star schema, without the join.

Squared distances need ||x||^2 (row sums of the squared table, computed per source table) and the
products X @ C^T (one factorized multiplication per iteration); new centers are X^T Z / counts for
the one-hot label matrix Z. Both plans start from the same k-means++ seeds and give the same
clusters; the table compares their cost and the inertia per row on held-out rows.

    python examples/kmeans_hamlet.py                        # Walmart, 8 clusters
    python examples/kmeans_hamlet.py --dataset Flights --clusters 5 --rows 20000
"""
import argparse
import os
from pathlib import Path

from ilargi.cli import compare_plans, format_comparison
from ilargi.datasets import load_hamlet
from ilargi.models import KMeans

DATASETS = Path(os.environ.get("ILARGI_DATASETS", Path(__file__).resolve().parents[2] / "shared" / "datasets"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", choices=["Flights", "Walmart", "Yelp"], default="Walmart")
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--max-iter", type=int, default=50, help="Lloyd iterations at most")
    parser.add_argument("--rows", type=int, default=None, help="use the first ROWS fact rows (default: all)")
    parser.add_argument("--data", type=Path, default=DATASETS / "hamlet", help="folder of the Hamlet datasets")
    args = parser.parse_args(argv)

    X, _ = load_hamlet(args.data / args.dataset)
    X = X[: args.rows]
    print(f"{args.dataset}: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns from {len(X.parts)} tables")
    model = KMeans(n_clusters=args.clusters, max_iter=args.max_iter, random_state=0)
    print(format_comparison(model, X, compare_plans(model, X)))


if __name__ == "__main__":
    main()
