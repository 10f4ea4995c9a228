"""Gradient-boosted trees on a synthetic star: ilargi factorized, ilargi on the materialized table,
and the join plus LightGBM, side by side in one process at one thread count.

    python benchmarks/bench_gbdt.py --n 1000000 --trees 100 --threads 2 --repeats 3

Each plan fits a regressor with the same parameters (num_leaves 31, learning rate 0.1); ilargi's
two plans grow the same trees (checked: their predictions are equal), LightGBM bins from its own
row sample (``bin_construct_sample_cnt``), so its trees differ slightly. Times are the median of
``--repeats`` fits after one warm-up fit on a slice (kernels compiled and loaded); the held-out
RMSE of each model is printed beside its time.
"""

import argparse

import numpy as np
from _timing import block_times, markdown_table

import ilargi
from ilargi.datasets import make_star


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="fact rows")
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    X, y = make_star(
        args.n, tuple_ratio=100, feature_ratio=5, n_dims=2, d_fact=4, noise=0.5, random_state=0
    )
    test = np.arange(args.n - args.n // 10, args.n)
    train = np.arange(test[0])
    X_train, X_test = X[train], X[test]
    params = dict(n_estimators=args.trees, num_leaves=31, learning_rate=0.1)
    rows, models = [], {}

    def rmse(prediction):
        return float(np.sqrt(np.mean((prediction - y[test]) ** 2)))

    with ilargi.threads(args.threads):
        warm = ilargi.GradientBoostingRegressor(n_estimators=2, plan="factorized")
        warm.fit(X[:5000], y[:5000])  # ilargi's kernels loaded before the clock
        for plan in ("factorized", "materialized"):

            def fit(plan=plan):
                models[plan] = ilargi.GradientBoostingRegressor(plan=plan, **params).fit(
                    X_train, y[train]
                )

            times = block_times(fit, repeats=args.repeats, warmup=0)
            rows.append(
                [
                    f"ilargi, {plan}",
                    f"{np.median(times):.2f}",
                    f"{rmse(models[plan].predict(X_test)):.4f}",
                ]
            )
        import lightgbm

        def join_and_fit():
            table = X_train.materialize()
            models["lightgbm"] = lightgbm.train(
                dict(
                    objective="regression",
                    num_leaves=31,
                    learning_rate=0.1,
                    num_threads=args.threads,
                    verbose=-1,
                ),
                lightgbm.Dataset(table, y[train]),
                num_boost_round=args.trees,
            )

        times = block_times(join_and_fit, repeats=args.repeats, warmup=0)
        prediction = models["lightgbm"].predict(X_test.materialize())
        rows.append(["join + LightGBM", f"{np.median(times):.2f}", f"{rmse(prediction):.4f}"])
    same = np.array_equal(
        models["factorized"].predict(X_test), models["materialized"].predict(X_test)
    )
    print(X, f"{args.trees} trees, {args.threads} threads, median of {args.repeats}")
    print(markdown_table(["plan", "fit (s)", "held-out RMSE"], rows))
    print(f"ilargi's two plans predict the same: {same}")


if __name__ == "__main__":
    main()
