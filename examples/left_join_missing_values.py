"""
Left joins, missing values, and a saved join (synthetic tables)
===============================================================

Three pandas DataFrames from :func:`ilargi.datasets.make_star_tables`: a fact table whose rows
refer to two dimension tables, and some of whose foreign keys match no dimension row (dangling
keys). A left join keeps those fact rows; their dimension cells are missing. ``to_matrix(...,
missing="indicator")`` fills them with 0 and adds a ``<column>__missing`` indicator column per
column that has a missing cell, built from the index vectors, never per joined row.

The join is saved (metadata and sources) and loaded again, as a later session would; then a
:class:`ilargi.LinearRegression` predicts the planted target ``y`` and a
:class:`ilargi.KMeans` clusters the standardized rows. Gradient-boosted trees take the missing
cells as NaN instead (``missing="nan"``, as ``pandas.merge`` leaves them) and learn where they
go at each split. No data files are needed::

    python examples/left_join_missing_values.py                 # 200,000 fact rows
    python examples/left_join_missing_values.py --rows 20000
"""

import argparse
import tempfile
import time

import numpy as np

import ilargi


# %%
# Tables in, a lazy left join out
# -------------------------------
def joined_table(tables):
    fact = ilargi.Table(tables["fact"], name="fact")
    return fact.merge(
        ilargi.Table(tables["dim1"], name="dim1"), on="fk1", how="left", validate="many_to_one"
    ).merge(ilargi.Table(tables["dim2"], name="dim2"), on="fk2", how="left", validate="many_to_one")


# %%
# Save the join, load it back
# ---------------------------
# ``sources=True`` writes every source table as Parquet beside the metadata (index vectors and
# layout); without it, a Parquet source is referenced by path and a DataFrame source is passed to
# :meth:`ilargi.Table.load` by name.
def save_and_load(table, folder):
    table.save(folder, sources=True)
    return ilargi.Table.load(folder)


# %%
# Fit, predict, score
# -------------------
def fit_and_score(X, y, n_clusters, seed=0):
    rows = np.random.default_rng(seed).permutation(X.shape[0])
    train, test = rows[: int(0.8 * len(rows))], rows[int(0.8 * len(rows)) :]

    regression = ilargi.LinearRegression(plan="auto").fit(X[train], y[train])
    print(
        f"  LinearRegression ({regression.plan_}): test R^2 {regression.score(X[test], y[test]):.4f}, "
        f"first predictions {np.round(regression.predict(X[test[:3]]), 3).tolist()}"
    )

    scaler = ilargi.StandardScaler().fit(X[train])
    Z = scaler.transform(X)  # still a NormalizedMatrix
    kmeans = ilargi.KMeans(n_clusters=n_clusters, random_state=seed, plan="auto").fit(Z[train])
    sizes = np.bincount(kmeans.predict(Z[test]), minlength=n_clusters)
    print(
        f"  KMeans ({kmeans.plan_}, {kmeans.n_iter_} iterations): test inertia per row "
        f"{-kmeans.score(Z[test]) / len(test):.3f}, test cluster sizes {sizes.tolist()}"
    )
    return regression, kmeans


# %%
# Trees: missing cells as NaN
# ---------------------------
# ``missing="nan"`` leaves a missing cell NaN; :class:`ilargi.GradientBoostingRegressor` gives
# NaN a bin of its own and learns, split by split, whether it goes left or right (LightGBM's
# rule: the same trees as LightGBM on ``pandas.merge``'s table).
def boost_with_nan(table, features, seed=0):
    X, y = table.to_matrix(columns=features, target="y", missing="nan")
    rows = np.random.default_rng(seed).permutation(X.shape[0])
    train, test = rows[: int(0.8 * len(rows))], rows[int(0.8 * len(rows)) :]
    trees = ilargi.GradientBoostingRegressor(n_estimators=50, plan="auto")
    trees.fit(X[train], y[train])
    print(
        f"  GradientBoostingRegressor ({trees.learner_}, NaN where cells are missing): "
        f"test R^2 {trees.score(X[test], y[test]):.4f}"
    )
    return trees


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Left joins and missing values on synthetic tables."
    )
    parser.add_argument(
        "--rows", type=int, default=200_000, help="fact table rows (default: %(default)s)"
    )
    parser.add_argument(
        "--clusters", type=int, default=5, help="k of k-means (default: %(default)s)"
    )
    args = parser.parse_args(argv)

    tables = ilargi.datasets.make_star_tables(
        args.rows,
        tuple_ratio=20,
        feature_ratio=2,
        n_dims=2,
        d_fact=5,
        join="left",
        dangling=0.1,
        random_state=0,
    )
    for name, frame in tables.items():
        print(f"{name}: {frame.shape[0]:,} rows, columns {list(frame.columns[:4])}...")

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        table = save_and_load(joined_table(tables), folder)
        features = [c for c in table.columns if c not in ("fk1", "fk2", "y")]
        X, y = table.to_matrix(columns=features, target="y", missing="indicator")
        missing = [c for c in X.columns if c.endswith("__missing")]
        print(
            f"{table}: X {X.shape[0]:,} x {X.shape[1]} ({len(missing)} indicator columns, e.g. "
            f"{missing[0]!r}), built, saved and loaded in {time.perf_counter() - start:.2f} s"
        )
        fit_and_score(X, y, args.clusters)
        boost_with_nan(table, features)


if __name__ == "__main__":
    main()
