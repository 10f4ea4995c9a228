"""
Logistic regression on raw tables (Santoku)
===========================================

A fact table with foreign keys into dimension tables, read from CSV files with pandas, joined with
:class:`ilargi.Table` (pandas' ``merge``, never built), one-hot encoded per source table with
:meth:`~ilargi.Table.to_matrix` and fitted with :class:`ilargi.LogisticRegression`. The model
never sees a joined row: every product runs on the fact table and the small dimension tables.

The Santoku datasets (Flights, Walmart, Yelp; see ``../shared/datasets/README.md``) are
categorical tables in CSV files whose values carry single quotes; a fact table's foreign-key
columns hold 1-based row numbers of the dimension files. Flights joins the airport domain twice,
once as the source and once as the destination airport.

Run it from the repository root (the data folder defaults to ``../shared/datasets/santoku``)::

    python examples/logistic_santoku.py                       # Flights
    python examples/logistic_santoku.py --dataset Walmart --rows 20000
    python examples/logistic_santoku.py --data /path/to/santoku --dataset Yelp
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import ilargi

# %%
# The files of each dataset
# -------------------------
# One fact file per split (the training rows and a holdout), one file per dimension, keyed by the
# fact table's foreign-key column, and the target with its positive label.
DATASETS = {
    "Flights": dict(
        train="OFtraintestnewtop5pMultS.csv",
        holdout="OFholdnewtop5pMultS.csv",
        dimensions={
            "airlineid": "airlinesc_discnewtop5p.csv",
            "sairportid": "sairportsc_discnewtop5p.csv",
            "dairportid": "dairportsc_discnewtop5p.csv",
        },
        target="codeshare",
        positive="t",
    ),
    "Walmart": dict(
        train="WTtraintest25pMultS.csv",
        holdout="WThold25pMultS.csv",
        dimensions={"purchaseidfk": "features_disc25p.csv", "storefk": "stores_disc.csv"},
        target="weekly_sales",
        positive="1",
    ),
    "Yelp": dict(
        train="YRtraintesttop5pMultS.csv",
        holdout="YRholdtop5pMultS.csv",
        dimensions={
            "useridfk": "user_disc_gendtop5p.csv",
            "businessidfk": "business_checkin_disctop5p.csv",
        },
        target="stars",
        positive="H",
    ),
}
# The datasets_dir setting ($ILARGI_DATASETS), else shared/datasets next to the checkout.
DEFAULT_DATA = Path(
    ilargi.get_config()["datasets_dir"]
    or Path(__file__).resolve().parents[2] / "shared" / "datasets"
)


def read_csv(path):
    """A Santoku CSV as strings, the single quotes around names and values stripped."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.columns = frame.columns.str.strip("'")
    return frame.apply(lambda column: column.str.strip("'"))


# %%
# Tables in, a lazy join out
# --------------------------
# The training and holdout fact rows are stacked with :func:`ilargi.concat` so that both are
# encoded with the same one-hot columns. Each dimension gets a column of its 1-based row numbers,
# which is what the fact table's foreign key holds; the merges then follow pandas' semantics
# (``validate="many_to_one"`` checks that each fact row finds at most one dimension row).
def joined_table(folder, spec, rows=None):
    train, holdout = read_csv(folder / spec["train"]), read_csv(folder / spec["holdout"])
    if rows is not None:
        train = train.head(rows)
    keys = {fk: f"{fk}_row" for fk in spec["dimensions"]}
    facts = []
    for frame in (train, holdout):
        frame = frame.rename(columns=keys)
        frame[spec["target"]] = (frame[spec["target"]] == spec["positive"]).astype(float)
        facts.append(frame.astype({key: "int64" for key in keys.values()}))
    table = ilargi.concat(
        [ilargi.Table(facts[0], name="train"), ilargi.Table(facts[1], name="holdout")], name="fact"
    )
    for fk, file in spec["dimensions"].items():
        dimension = read_csv(folder / file)
        dimension[keys[fk]] = np.arange(1, len(dimension) + 1)
        table = table.merge(
            ilargi.Table(dimension, name=Path(file).stem),
            on=keys[fk],
            how="inner",
            validate="many_to_one",
        )
    return table, len(train), list(keys.values())


# %%
# Fit, predict, score
# -------------------
# Row selection (``X[:n]``) keeps the matrix factorized. ``plan="auto"`` lets the plan chooser
# decide between the factorized and the materialized plan; ``plan_`` says which one ran.
def fit_and_score(X, y, n_train, max_iter):
    X_train, y_train = X[:n_train], y[:n_train]
    X_test, y_test = X[n_train:], y[n_train:]
    model = ilargi.LogisticRegression(C=1.0, max_iter=max_iter, plan="auto")
    start = time.perf_counter()
    model.fit(X_train, y_train)
    print(
        f"  fit: {time.perf_counter() - start:.2f} s, plan {model.plan_!r}, {model.n_iter_} L-BFGS iterations"
    )
    print(
        f"  holdout accuracy {model.score(X_test, y_test):.4f} "
        f"(the majority class alone: {max(y_test.mean(), 1 - y_test.mean()):.4f})"
    )
    print(
        f"  P(positive) of the first holdout rows: {np.round(model.predict_proba(X_test[:5])[:, 1], 3).tolist()}"
    )
    return model


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Logistic regression on a Santoku dataset's raw tables."
    )
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="Flights")
    parser.add_argument(
        "--data",
        type=Path,
        default=DEFAULT_DATA / "santoku",
        help="the folder of the Santoku datasets (default: %(default)s)",
    )
    parser.add_argument(
        "--rows", type=int, default=None, help="use the first ROWS training rows (default: all)"
    )
    parser.add_argument("--max-iter", type=int, default=300, help="L-BFGS iterations at most")
    args = parser.parse_args(argv)
    folder = args.data / args.dataset
    if not folder.is_dir():
        sys.exit(
            f"{folder} not found: pass --data, the folder that holds Flights/, Walmart/ and Yelp/"
        )
    spec = DATASETS[args.dataset]

    start = time.perf_counter()
    table, n_train, row_keys = joined_table(folder, spec, args.rows)
    features = [c for c in table.columns if c != spec["target"] and c not in row_keys]
    X, y = table.to_matrix(columns=features, target=spec["target"])  # one-hot per source table
    print(f"{args.dataset}: {table}")
    print(
        f"  X: {X.shape[0]:,} rows x {X.shape[1]:,} one-hot columns in {len(X.parts)} parts, "
        f"built in {time.perf_counter() - start:.2f} s (the join itself is never built)"
    )
    fit_and_score(X, y, n_train, args.max_iter)


if __name__ == "__main__":
    main()
