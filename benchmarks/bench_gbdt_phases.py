"""Where the factorized learner's fit spends its time, per phase, and the md5 of its trees.

    python benchmarks/bench_gbdt_phases.py --dataset yelp --trees 200 --threads 2
    python benchmarks/bench_gbdt_phases.py --dataset walmart --no-phases   # md5 and fit time only

The dataset is built as ``bench_gbdt_real.py`` builds it for ilargi's plan (the same matrix, the
same parameters, training rows the first nine tenths), after an untimed two-tree warm-up fit.
With phases, the learner's steps are wrapped in timers (partitions, the leaf pass over the rows,
the dimensions' histograms, the threshold scan, the rest of a leaf's Python); the wrappers add
their own overhead, so the fit time to compare between versions is the one of ``--no-phases``.
The md5 is that of the model's LightGBM text (``model_to_string``): equal md5s, equal trees.
"""

import argparse
import hashlib
import json
import time
from collections import defaultdict

from bench_gbdt_real import LOADERS

import ilargi


def _timed(owner, name, totals, counts, label=None):
    original = getattr(owner, name)
    label = label or name

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label] += time.perf_counter() - start
            counts[label] += 1

    setattr(owner, name, wrapper)


def _install(totals, counts):
    import ilargi.backend.compiled.trees as compiled
    import ilargi.models.gbdt_trees as trees
    import ilargi.rewriter.histograms as histograms

    binned = histograms.BinnedMatrix
    _timed(binned, "partition", totals, counts)
    _timed(binned, "split", totals, counts)
    _timed(binned, "compact", totals, counts)
    _timed(binned, "leaf_histograms", totals, counts)
    _timed(binned, "subtract", totals, counts)
    _timed(binned, "candidates", totals, counts)
    _timed(trees.TreeLearner, "_leaf_best", totals, counts)
    _timed(trees.TreeLearner, "grow", totals, counts)
    for name in ("leaf_pass", "column_histograms", "sparse_histograms", "bin_histograms"):
        _timed(compiled, name, totals, counts)
    # the histograms module looks the kernels up through the backend: rebind there too
    from ilargi.backend import compiled as package

    for name in ("leaf_pass", "column_histograms", "sparse_histograms", "bin_histograms"):
        if hasattr(package, name):
            setattr(package, name, getattr(compiled, name))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(LOADERS), default="yelp")
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--files", action="store_true")
    parser.add_argument("--no-phases", action="store_true")
    args = parser.parse_args()
    load, factorized, _, task = LOADERS[args.dataset]
    data = load(args)
    model_type = (
        ilargi.GradientBoostingClassifier if task == "binary" else ilargi.GradientBoostingRegressor
    )
    totals, counts = defaultdict(float), defaultdict(int)
    with ilargi.threads(args.threads):
        X, y = factorized(data)
        model_type(n_estimators=2, plan="factorized").fit(X[:2000], y[:2000])  # its kernels
        split = X.shape[0] - X.shape[0] // 10
        if not args.no_phases:
            _install(totals, counts)
        model = model_type(
            plan="factorized", n_estimators=args.trees, num_leaves=31, learning_rate=0.1
        )
        start = time.perf_counter()
        model.fit(X[:split], y[:split])
        fit = time.perf_counter() - start
    md5 = hashlib.md5(model.model_to_string().encode()).hexdigest()
    result = dict(dataset=args.dataset, fit=round(fit, 3), md5=md5)
    if not args.no_phases:
        result["phases"] = {k: [round(v, 3), counts[k]] for k, v in sorted(totals.items())}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
