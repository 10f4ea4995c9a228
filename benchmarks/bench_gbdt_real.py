"""Gradient-boosted trees on real and synthetic multi-table data, end to end: ilargi's factorized
fit against pandas.merge + LightGBM, time, held-out metric and peak memory, side by side in one run.

    python benchmarks/bench_gbdt_real.py --dataset tpch --sf 1 --trees 200 --threads 2
    python benchmarks/bench_gbdt_real.py --dataset walmart --dataset yelp --dataset flights
    python benchmarks/bench_gbdt_real.py --dataset snowflake --n 2000000
    python benchmarks/bench_gbdt_real.py --dataset categories --n 2000000 --categorical
    python benchmarks/bench_gbdt_real.py --dataset holes --n 2000000 --categorical

Both plans start from the same tables in memory (files read before the clock starts) and fit the
same parameters (``num_leaves`` 31, learning rate 0.1, 255 bins, ``min_child_samples`` 20):

* *ilargi*: the join metadata and the encoded sources (``Table.merge`` + ``to_matrix``, or the
  Hamlet loader's index vectors), then ``GradientBoostingRegressor/Classifier(plan="factorized")``
  (its binning included in the fit);
* *ilargi factorized, Table.to_binned* (the datasets read as Tables: TPC-H, the snowflake): the
  same learner on the table binned as read (``Table.to_binned``, a column at a time, the bins
  found from the training rows): the sources' float64 blocks never exist;
* *ilargi plan="materialized"*: the same matrix, then the estimator's materialized plan: the
  joined table built in the fit, LightGBM trained on it with ilargi's bins (found factorized,
  then given to LightGBM's Dataset, which bins from every row) -- the same trees as the
  factorized plan;
* *LightGBM*: ``pandas.merge`` (Hamlet: the gathered CSR blocks stacked), the same encoding of
  string columns (sorted level codes), then ``lightgbm.train`` (its Dataset construction included)
  with LightGBM's own binning (its defaults: 200,000 sampled rows).

The *holes* star is the categories star with a left join and NaN (missing stores, unknown
sizes, formats and prices): ilargi encodes it with ``missing="nan"`` and learns where NaN goes,
as LightGBM does on pandas.merge's table (NaN where the merge leaves it).

With ``--categorical`` the string columns (and the integer codes of the synthetic ``categories``
star) are categorical features: every plan splits them on sets of categories
(``categorical_feature``: ilargi's learner and LightGBM by name and position; LightGBM then finds
their bins itself, every plan the same ones), not on thresholds of their codes.

The *auto picks* column is what ``plan="auto"`` would run on the training rows of the factorized
matrix on this machine (``ilargi.choose(X, estimator)``, its rule: LightGBM on the table where the
table and LightGBM's dataset fit in the available memory).

Each plan runs in a fresh process of its own (so peak memory is its own); ilargi's after an untimed
two-tree fit of the same plan on 2,000 rows of the same matrix (kernels loaded for its kinds of
tables: a process's first factorized fit loads them from Numba's cache, about 0.1 s); the
plans alternate over ``--repeats`` and each figure is the median.
The held-out set is the last tenth of the joined rows. The metric is RMSE for regression targets
and AUC for binary ones; *peak* is the process's maximum resident memory from the start of the
timed work (join and fit; on Linux the peak is reset there, so loading the tables does not count),
*over data* that peak minus the resident memory just before it: the tables loaded, the learner's
code loaded (LightGBM's import, ilargi's kernels by the warm-up) and the memory that loading
freed handed back to the OS (``malloc_trim``), so that what loading left behind is not counted.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from _timing import markdown_table

DATASETS = ("tpch", "snowflake", "categories", "holes", "walmart", "yelp", "flights")
PLANS = ("ilargi", "binned", "materialized", "lightgbm")
PLAN_NAMES = {
    "ilargi": "ilargi factorized",
    "binned": "ilargi factorized, Table.to_binned",
    "materialized": 'ilargi plan="materialized"',
    "lightgbm": "pandas.merge + LightGBM",
}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# TPC-H: the snowflake lineitem -> orders -> customer -> nation, lineitem -> part, supplier; every
# column a model may use except the target and what is computed from it (o_totalprice).
TPCH_TARGET = "l_extendedprice"
TPCH_FEATURES = {
    "lineitem": ["l_quantity", "l_discount", "l_tax", "l_returnflag", "l_linestatus",
                 "l_shipinstruct", "l_shipmode"],
    "orders": ["o_orderstatus", "o_orderpriority", "o_shippriority"],
    "customer": ["c_acctbal", "c_mktsegment"],
    "nation": ["n_regionkey"],
    "part": ["p_size", "p_retailprice", "p_mfgr", "p_brand", "p_type", "p_container"],
    "supplier": ["s_acctbal"],
}  # fmt: skip


def _rss_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _settle():
    """Collect garbage and hand freed memory back to the OS (glibc's malloc_trim), so that the
    resident memory the peak is measured from is the data's, not what loading left freed."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _reset_peak():
    """Start the process's peak resident memory afresh from now (Linux: VmHWM, reset by writing 5
    to clear_refs), so that the peak is that of the timed work, not of loading the tables."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:  # elsewhere: the peak since the process started
        pass


def _peak_mib():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------------------------------------
# Datasets: load() -> data (untimed), factorized(data) -> (NormalizedMatrix, y),
# joined(data) -> (array/CSR, y); both in the same row order.


def _tpch_columns():
    from ilargi.datasets.tpch import SNOWFLAKE

    columns = {TPCH_TARGET, *(c for cs in TPCH_FEATURES.values() for c in cs)}
    return columns | {key for step in SNOWFLAKE for key in (step[1], step[3])}


def _tpch_load(args):
    """The frames in memory, or with ``--files`` the Parquet folder (each plan reads it, timed)."""
    from ilargi.datasets import load_tpch_frames, tpch_dir

    if args.files:
        return tpch_dir(args.sf)
    return load_tpch_frames(args.sf, tables=("lineitem", *TPCH_FEATURES), columns=_tpch_columns())


def _tpch_features():
    return [c for cs in TPCH_FEATURES.values() for c in cs]


def _tpch_factorized(frames):
    return _tpch_table(frames).to_matrix(_tpch_features(), TPCH_TARGET, categorical="ordinal")


def _tpch_binned(frames, categorical=None):
    table = _tpch_table(frames)
    return table.to_binned(
        _tpch_features(),
        TPCH_TARGET,
        categorical="ordinal",
        fit_rows=_training(len(table)),
        categorical_features=categorical,
    )


def _training(n):
    """The training rows: all but the last tenth (the held-out set)."""
    return slice(0, n - n // 10)


def _tpch_table(frames):
    from ilargi import Table
    from ilargi.datasets.tpch import SNOWFLAKE

    if isinstance(frames, dict):
        tables = {name: Table(frame, name=name) for name, frame in frames.items()}
    else:  # read lazily: only the columns the merges and the matrix need
        tables = {
            name: Table.from_parquet(frames / f"{name}.parquet")
            for name in ("lineitem", *TPCH_FEATURES)
        }
    table = tables["lineitem"]
    for name, key, _, foreign_key in SNOWFLAKE:
        table = table.merge(
            tables[name], left_on=foreign_key, right_on=key, how="inner", validate="many_to_one"
        )
    return table


def _ordinal(frame):
    """Strings as the codes of their sorted levels, as ``to_matrix(categorical="ordinal")``."""
    import pandas as pd

    for name in frame.columns:
        if not pd.api.types.is_numeric_dtype(frame[name]):
            codes = frame[name].astype("category").cat.codes
            frame[name] = codes.where(codes >= 0)  # a missing string: NaN, as missing="nan"
    return frame


def _tpch_joined(frames):
    from ilargi.datasets.tpch import SNOWFLAKE

    if not isinstance(frames, dict):
        from ilargi.datasets.tpch import _read  # pandas.read_parquet, decimals as float64

        folder = frames
        frames = {
            name: _read(folder / f"{name}.parquet", _tpch_columns())
            for name in ("lineitem", *TPCH_FEATURES)
        }
    joined = frames["lineitem"]
    for name, key, _, foreign_key in SNOWFLAKE:
        joined = joined.merge(
            frames[name], left_on=foreign_key, right_on=key, how="inner", validate="many_to_one"
        )
    features = _ordinal(joined[_tpch_features()].copy())
    return features.to_numpy(dtype=np.float64), joined[TPCH_TARGET].to_numpy(dtype=np.float64)


def _categories_load(args):
    """A star whose categories matter: sales (an item of 200, a channel of 3) of stores (a
    region of 50, a format of 5, a size), the target their random effects, an interaction and
    noise; strings where a warehouse would hold them."""
    import pandas as pd

    rng = np.random.default_rng(0)
    n, m = args.n, 2000
    regions = np.array([f"region{i:02d}" for i in range(50)])
    stores = pd.DataFrame(
        {
            "store": np.arange(m),
            "region": regions[rng.integers(0, 50, m)],
            "format": rng.choice(list("ABCDE"), m),
            "size": rng.gamma(2.0, 1.0, m),
        }
    )
    item = rng.choice(200, n, p=rng.dirichlet(np.full(200, 0.5)))
    fact = pd.DataFrame(
        {
            "store": rng.integers(0, m, n),
            "item": item,
            "channel": rng.choice(["online", "shop", "phone"], n, p=[0.5, 0.4, 0.1]),
            "price": rng.gamma(3.0, 2.0, n),
        }
    )
    at = stores.set_index("store").loc[fact["store"]]
    region = np.searchsorted(regions, at["region"].to_numpy())
    fact["y"] = (
        rng.normal(0, 1, 200)[item]
        + rng.normal(0, 1, 50)[region]
        + 0.5 * (fact["channel"] == "online") * rng.normal(0, 1, 200)[item]
        + 0.3 * np.log(fact["price"])
        + 0.2 * at["size"].to_numpy()
        + rng.normal(0, 0.5, n)
    )
    return {"fact": fact, "stores": stores}


CATEGORIES_FEATURES = ["item", "channel", "price", "region", "format", "size"]


def _categories_table(frames):
    from ilargi import Table

    fact = Table(frames["fact"], name="sales")
    return fact.merge(Table(frames["stores"], name="stores"), on="store", validate="many_to_one")


def _categories_factorized(frames):
    table = _categories_table(frames)
    return table.to_matrix(CATEGORIES_FEATURES, "y", categorical="ordinal")


def _categories_binned(frames, categorical=None):
    table = _categories_table(frames)
    return table.to_binned(
        CATEGORIES_FEATURES,
        "y",
        categorical="ordinal",
        fit_rows=_training(len(table)),
        categorical_features=categorical,
    )


def _categories_joined(frames):
    joined = frames["fact"].merge(frames["stores"], on="store", validate="many_to_one")
    features = _ordinal(joined[CATEGORIES_FEATURES].copy())
    return features.to_numpy(dtype=np.float64), joined["y"].to_numpy(dtype=np.float64)


def _holes_load(args):
    """The categories star with holes: a twentieth of the stores the sales name are missing
    from the stores table (the left join leaves them absent), a fifth of the stores' sizes and
    formats and a tenth of the sales' prices are unknown; the target also depends on what is
    missing."""
    frames = _categories_load(args)
    fact, stores = frames["fact"], frames["stores"]
    rng = np.random.default_rng(1)
    unknown_size = rng.random(len(stores)) < 0.2
    stores.loc[unknown_size, "size"] = np.nan
    stores.loc[rng.random(len(stores)) < 0.2, "format"] = None
    gone = rng.random(len(stores)) < 0.05
    unknown_price = rng.random(len(fact)) < 0.1
    fact.loc[unknown_price, "price"] = np.nan
    store = fact["store"].to_numpy()
    fact["y"] += 0.8 * unknown_price - 0.6 * gone[store] + 0.5 * unknown_size[store]
    return {"fact": fact, "stores": stores[~gone].reset_index(drop=True)}


def _holes_table(frames):
    from ilargi import Table

    fact = Table(frames["fact"], name="sales")
    stores = Table(frames["stores"], name="stores")
    return fact.merge(stores, on="store", how="left", validate="many_to_one")


def _holes_factorized(frames):
    table = _holes_table(frames)
    return table.to_matrix(CATEGORIES_FEATURES, "y", categorical="ordinal", missing="nan")


def _holes_binned(frames, categorical=None):
    table = _holes_table(frames)
    return table.to_binned(
        CATEGORIES_FEATURES,
        "y",
        categorical="ordinal",
        missing="nan",
        fit_rows=_training(len(table)),
        categorical_features=categorical,
    )


def _holes_joined(frames):
    joined = frames["fact"].merge(frames["stores"], on="store", how="left", validate="many_to_one")
    features = _ordinal(joined[CATEGORIES_FEATURES].copy())
    return features.to_numpy(dtype=np.float64), joined["y"].to_numpy(dtype=np.float64)


def _snowflake_load(args):
    from ilargi.datasets import make_star_tables

    return make_star_tables(
        args.n, 20, 4, n_dims=3, d_fact=4, snowflake=True, noise=0.5, random_state=0
    )


def _snowflake_chain(frames):
    names = sorted(name for name in frames if name.startswith("dim"))
    return [(name, f"fk{name[3:]}") for name in names]


def _snowflake_factorized(frames):
    table, features = _snowflake_table(frames)
    return table.to_matrix(features, "y")


def _snowflake_binned(frames, categorical=None):
    table, features = _snowflake_table(frames)
    return table.to_binned(
        features, "y", fit_rows=_training(len(table)), categorical_features=categorical
    )


def _snowflake_table(frames):
    from ilargi import Table

    table = Table(frames["fact"], name="fact")
    for name, key in _snowflake_chain(frames):
        table = table.merge(Table(frames[name], name=name), on=key, validate="many_to_one")
    return table, [c for c in table.columns if c != "y" and not c.startswith("fk")]


def _snowflake_joined(frames):
    joined = frames["fact"]
    for name, key in _snowflake_chain(frames):
        joined = joined.merge(frames[name], on=key, validate="many_to_one")
    features = [c for c in joined.columns if c != "y" and not c.startswith("fk")]
    return joined[features].to_numpy(dtype=np.float64), joined["y"].to_numpy(dtype=np.float64)


def _hamlet_load(args):
    import ilargi
    from ilargi.datasets.hamlet import _read_hamlet

    root = ilargi.get_config()["datasets_dir"] or os.path.join(REPO, "..", "shared", "datasets")
    folder = os.path.join(root, "hamlet", args.dataset.capitalize())
    return _read_hamlet(folder)  # [(name, CSR source, index vector or None)], y


def _hamlet_factorized(data):
    from ilargi import NormalizedMatrix

    parts, y = data
    widths = np.cumsum([0] + [source.shape[1] for _, source, _ in parts])
    nm = NormalizedMatrix.from_parts(
        [source for _, source, _ in parts],
        [rows for _, _, rows in parts],
        [np.arange(start, stop) for start, stop in zip(widths[:-1], widths[1:])],
        shape=(len(y), int(widths[-1])),
    )
    return nm, y


def _hamlet_joined(data):
    import scipy.sparse as sp

    parts, y = data
    blocks = [source if rows is None else source[rows] for _, source, rows in parts]
    return sp.hstack(blocks, format="csr"), y


# Datasets read as Tables, binned as read: ``Table.to_binned`` (the plan "binned")
BINNED = {
    "tpch": _tpch_binned,
    "snowflake": _snowflake_binned,
    "categories": _categories_binned,
    "holes": _holes_binned,
}

# With --categorical: the features split on sets of categories, and every feature in order
CATEGORICAL = {
    "tpch": (
        ["l_returnflag", "l_linestatus", "l_shipinstruct", "l_shipmode", "o_orderstatus",
         "o_orderpriority", "c_mktsegment", "p_mfgr", "p_brand", "p_type", "p_container"],
        _tpch_features,
    ),
    "categories": (["item", "channel", "region", "format"], lambda: CATEGORIES_FEATURES),
    "holes": (["item", "channel", "region", "format"], lambda: CATEGORIES_FEATURES),
}  # fmt: skip

LOADERS = {
    "tpch": (_tpch_load, _tpch_factorized, _tpch_joined, "regression"),
    "snowflake": (_snowflake_load, _snowflake_factorized, _snowflake_joined, "regression"),
    "categories": (_categories_load, _categories_factorized, _categories_joined, "regression"),
    "holes": (_holes_load, _holes_factorized, _holes_joined, "regression"),
    "walmart": (_hamlet_load, _hamlet_factorized, _hamlet_joined, "regression"),
    "yelp": (_hamlet_load, _hamlet_factorized, _hamlet_joined, "regression"),
    "flights": (_hamlet_load, _hamlet_factorized, _hamlet_joined, "binary"),
}


# ---------------------------------------------------------------------------------------------
# One plan in this process.


def _metric(task, y, score):
    if task == "binary":
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(y, score))
    return float(np.sqrt(np.mean((score - y) ** 2)))


def run_plan(args):
    """Time one plan on one dataset; print a JSON line."""
    load, factorized, joined, task = LOADERS[args.dataset]
    data = load(args)
    params = dict(n_estimators=args.trees, num_leaves=31, learning_rate=0.1)
    import ilargi

    categorical, features = CATEGORICAL.get(args.dataset, ([], list))
    categorical = categorical if args.categorical else []
    if args.plan == "binned":  # the table binned as read, the bins found from the training rows

        def factorized(data):
            return BINNED[args.dataset](data, categorical or None)

    categories = dict(categorical_feature=categorical) if categorical else {}
    with ilargi.threads(args.threads):
        if args.plan in ("ilargi", "binned", "materialized"):
            model_type = (
                ilargi.GradientBoostingClassifier
                if task == "binary"
                else ilargi.GradientBoostingRegressor
            )
            plan = "materialized" if args.plan == "materialized" else "factorized"
            # kernels loaded for this data's kinds (untimed): the plan's own learner, which
            # plan="auto" would not run on 2,000 rows
            warm_X, warm_y = factorized(data)
            model_type(n_estimators=2, plan=plan, **categories).fit(warm_X[:2000], warm_y[:2000])
            del warm_X, warm_y
            _settle()
            loaded = _rss_mib()
            _reset_peak()
            start = time.perf_counter()
            X, y = factorized(data)
            split = X.shape[0] - X.shape[0] // 10
            mid = time.perf_counter()
            model = model_type(plan=plan, **params, **categories).fit(X[:split], y[:split])
            end = time.perf_counter()
            auto = (
                None
                if args.plan == "binned"
                else ilargi.choose(X[:split], model_type(**params, **categories))
            )
            test = X[split:]
            score = model.predict_proba(test)[:, 1] if task == "binary" else model.predict(test)
        else:
            import lightgbm

            _settle()
            loaded = _rss_mib()
            _reset_peak()
            start = time.perf_counter()
            X, y = joined(data)
            split = X.shape[0] - X.shape[0] // 10
            mid = time.perf_counter()
            booster = lightgbm.train(
                dict(
                    objective="binary" if task == "binary" else "regression",
                    num_threads=args.threads,
                    verbose=-1,
                    **{k: v for k, v in params.items() if k != "n_estimators"},
                ),
                lightgbm.Dataset(
                    X[:split],
                    y[:split],
                    categorical_feature=[features().index(c) for c in categorical] or "auto",
                ),
                num_boost_round=args.trees,
            )
            end = time.perf_counter()
            score = booster.predict(X[split:])
    result = dict(
        plan=args.plan,
        join=mid - start,
        fit=end - mid,
        total=end - start,
        metric=_metric(task, y[split:], score),
        loaded_mib=loaded,
        peak_mib=_peak_mib(),
        shape=list(X.shape),
    )
    if args.plan in ("ilargi", "materialized"):
        result["auto"] = "factorized" if auto.factorize else "materialized"
        result["auto_reason"] = auto.reason
    print("RESULT " + json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# The side-by-side run.


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", action="append", choices=DATASETS)
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--n", type=int, default=2_000_000, help="snowflake fact rows")
    parser.add_argument(
        "--files", action="store_true", help="TPC-H: each plan reads the Parquet files (timed)"
    )
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--categorical", action="store_true", help="split string columns on sets of categories"
    )
    parser.add_argument("--plan", choices=PLANS, help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args()
    if args.plan:
        args.dataset = args.dataset[0]
        return run_plan(args)
    rows, reasons = [], []
    for dataset in args.dataset or ["tpch"]:
        runs = {plan: [] for plan in PLANS if plan != "binned" or dataset in BINNED}
        for _ in range(args.repeats):
            for plan in runs:
                runs[plan].append(_child(args, dataset, plan))
        rows += _rows(dataset, args, runs)
        reasons.append((dataset, runs["ilargi"][0]["auto_reason"]))
    print(f"{args.trees} trees, {args.threads} threads, median of {args.repeats} run(s) per plan")
    header = ["dataset", "rows x columns", "plan", "join (s)", "fit (s)", "total (s)",
              "speed-up over LightGBM", "held-out metric", "relative difference", "peak (MiB)",
              "over data (MiB)", "auto picks"]  # fmt: skip
    print(markdown_table(header, rows))
    for dataset, reason in reasons:
        print(f"* {dataset}: plan='auto' -- {reason}")


def _child(args, dataset, plan):
    command = [sys.executable, __file__, "--dataset", dataset, "--plan", plan]
    for name in ("sf", "n", "trees", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    command += ["--files"] if args.files else []
    command += ["--categorical"] if args.categorical else []
    done = subprocess.run(command, capture_output=True, text=True, cwd=os.path.dirname(__file__))
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode or not lines:
        sys.exit(f"{dataset} {plan} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def _rows(dataset, args, runs):
    task = LOADERS[dataset][3]
    name = f"TPC-H sf={args.sf:g}" if dataset == "tpch" else dataset
    name += " (from Parquet)" if args.files and dataset == "tpch" else ""
    name += ", categorical splits" if args.categorical and dataset in CATEGORICAL else ""
    med = {
        p: {
            k: statistics.median(r[k] for r in runs[p])
            for k in runs[p][0]
            if k not in ("plan", "shape", "auto", "auto_reason")
        }
        for p in runs
    }  # noqa: E501
    rows = []
    for plan in runs:
        m = med[plan]
        speedup = med["lightgbm"]["total"] / m["total"]
        diff = m["metric"] / med["lightgbm"]["metric"] - 1
        rows.append(
            [
                name,
                "x".join(map(str, runs[plan][0]["shape"])),
                PLAN_NAMES[plan],
                f"{m['join']:.2f}",
                f"{m['fit']:.2f}",
                f"{m['total']:.2f}",
                f"**{speedup:.2f}x**" if plan != "lightgbm" else "",
                f"{'AUC' if task == 'binary' else 'RMSE'} {m['metric']:.5g}",
                f"{diff:+.2%}" if plan != "lightgbm" else "",
                f"{m['peak_mib']:.0f}",
                f"{m['peak_mib'] - m['loaded_mib']:.0f}",
                runs[plan][0].get("auto", "") if plan == "ilargi" else "",
            ]
        )
    return rows


if __name__ == "__main__":
    main()
