"""Choose how a hybrid cost model learns from the selection set's real workloads, by holding out
whole datasets: no timing, no test set.

    python benchmarks/chooser_testset.py select --threads 1 --sweep-out real_t1.csv > select_t1.md
    python benchmarks/chooser_testset.py select --threads 2 --sweep-out real_t2.csv > select_t2.md
    python benchmarks/chooser_selection/holdout.py real_t1.csv real_t2.csv > holdout.md

The regressors are trained on the shipped synthetic sweeps (those the model in ``estimators``
names) and on the real rows of the other folds (each dataset in one fold, at every thread count,
weighted ``--weights``; weight 0 leaves the real rows out, as the shipped models were trained),
and predict the held-out fold's rows. Their decisions, ``rule + correction × regressors`` against
``margin``, are scored on the measured times of every real row, iterative and one-shot, per
thread count, with the test set's metrics (ties within 10 % either way count as right): the
numbers a (weight, correction, margin) would have on data it never saw. ``correction = 0`` is the
analytic rule alone.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from ilargi.chooser import cost_model, rules
from ilargi.chooser.metrics import evaluate

HERE = Path(__file__).resolve().parent
ESTIMATORS = HERE.parents[1] / "estimators"
CORRECTIONS = (0.0, 0.5, 0.75, 1.0)
MARGINS = (-0.2, -0.1, 0.0, 0.1)
TIE = 0.10


def shipped_sweeps():
    """(sweeps, fits-only sweeps) of the shipped CPU model, as stored (``.csv.xz``)."""
    meta = json.loads((ESTIMATORS / "chooser_cpu.json").read_text())
    return tuple(
        [ESTIMATORS / f"{name}.xz" for name in meta[key]] for key in ("sweeps", "fits_only_sweeps")
    )


def held_out_corrections(real_csvs, weight, folds, extra_sweeps=()):
    """(real rows, the regressors' held-out corrections of log t_mat/t_fact and log
    t_join/t_fact, the rule's predictions of both); ``extra_sweeps`` are trained on beside the
    shipped ones."""
    sweeps, fits_only = shipped_sweeps()
    sweeps = sweeps + list(extra_sweeps)
    frame, columns, X, (y_op, y_join), (base_op, base_join), weights = cost_model.training_data(
        sweeps, "cpu", fits_only, real_csvs, weight
    )
    real = frame["style"].astype(str).str.startswith("real:").to_numpy()
    datasets = sorted(set(frame.loc[real, "style"]))
    fold_of = {name: i % folds for i, name in enumerate(datasets)}
    fold = np.array([fold_of.get(style, -1) for style in frame["style"]])
    families = cost_model._families(frame)
    corr_op, corr_join = np.zeros(len(frame)), np.zeros(len(frame))
    for k in range(folds):
        held = fold == k
        for mask in families.values():
            fit = mask & ~held & (weights > 0)
            for target, base, out in ((y_op, base_op, corr_op), (y_join, base_join, corr_join)):
                regressor = cost_model._fit(
                    X[fit], (target - base)[fit], columns, weight=weights[fit]
                )
                out[held & mask] = regressor.predict(X[held & mask])
    return frame[real], corr_op[real], corr_join[real], base_op[real], base_join[real]


def scores(frame, corr_op, corr_join, base_op, base_join, correction, margin):
    """{(threads, case): metrics} of the decisions of one (correction, margin)."""
    out = {}
    log_op = base_op + correction * corr_op
    log_join = base_join + correction * corr_join
    for threads in sorted(set(frame["threads"])):
        rows = (frame["threads"] == threads).to_numpy()
        t_fact, t_mat = frame["t_fact"].to_numpy()[rows], frame["t_mat"].to_numpy()[rows]
        t_join = frame["t_join"].to_numpy()[rows]
        for case, materialized, repeats in (
            ("iterative", t_mat, None),
            ("one_shot", t_mat + t_join, 1),
        ):
            decided = cost_model._decisions(log_op[rows], log_join[rows], margin, repeats)
            out[threads, case] = evaluate(t_fact, materialized, decided, tie=TIE)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("real", nargs="+", type=Path, help="sweep CSVs of the selection set")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 1.0, 5.0])
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument(
        "--cross-bytes",
        type=float,
        nargs="+",
        default=[rules.CROSS_SPARSE_BYTES],
        help="prices of the factorized crossprod's sparse work to try (rules.CROSS_SPARSE_BYTES)",
    )
    parser.add_argument(
        "--sweeps",
        type=Path,
        nargs="+",
        default=[],
        help="more sweep CSVs to train on beside the shipped model's",
    )
    args = parser.parse_args(argv)
    print(
        "| cross bytes | weight | correction | margin | threads | case | accuracy | time saved "
        "| worst regret |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for price in args.cross_bytes:
        rules.CROSS_SPARSE_BYTES = price
        for weight in args.weights:
            held = held_out_corrections(args.real, weight, args.folds, args.sweeps)
            for correction in CORRECTIONS:
                for margin in MARGINS:
                    for (threads, case), m in scores(*held, correction, margin).items():
                        print(
                            f"| {price:g} | {weight:g} | {correction:g} | {margin:g} | {threads} "
                            f"| {case} | {m['tie_accuracy']:.3f} | {m['time_saved']:.3f} | "
                            f"{m['worst_regret']:.2f} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
