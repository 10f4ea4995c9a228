"""Choose a hybrid cost model's correction share and margin on the selection set, without timing.

    python benchmarks/chooser_testset.py select --threads 1 --model DIR > benchmarks/chooser_selection/select_t1.md
    python benchmarks/chooser_testset.py select --threads 2 --model DIR > benchmarks/chooser_selection/select_t2.md
    python benchmarks/chooser_selection/tune.py DIR

The selection runs time both plans of every workload (their logs hold the times); this script
rebuilds each selection dataset, asks the cost model in DIR for the analytic rule's and the
regressors' predictions of every workload at each thread count (metadata only), and scores the
decisions of ``rule + correction × regressors`` against ``margin`` on the logged times, for a
grid of both (``correction = 0``: the analytic rule alone). A model is then trained with the pair
chosen (``python -m ilargi.calibration train ... --correction C --margin M``): the regressors
are the same, so its decisions on the selection set are the ones scored here.
"""

import math
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import chooser_testset as harness  # noqa: E402

import ilargi  # noqa: E402
from ilargi.chooser import cost_model  # noqa: E402
from ilargi.chooser.features import extract  # noqa: E402
from ilargi.chooser.metrics import evaluate  # noqa: E402
from ilargi.chooser.workload import workload_of  # noqa: E402

LINE = re.compile(
    r"(.{30}) (\S+(?: \S+)?)\s+fact\s+([\d.]+) ms\s+mat\s+([\d.]+) ms\s+join\s+([\d.]+) ms"
)
CORRECTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
MARGINS = (-0.3, -0.2, -0.1, 0.0, 0.1)


def logged_times(threads):
    """{(dataset, workload): (t_fact, t_mat, t_join) in ms} from a selection run's log."""
    times = {}
    for line in (HERE / f"select_t{threads}.md").read_text().splitlines():
        match = LINE.match(line)
        if match:
            key = (match.group(1).strip(), match.group(2).strip())
            times[key] = tuple(float(v) for v in match.groups()[2:])
    return times


def predictions(model, threads):
    """Per workload of the selection set: (dataset, workload, outside?, rule's log speed-up and
    log join ratio, the regressors' corrections)."""
    rows = []
    with ilargi.threads(threads):
        for dataset in harness.selection(
            ilargi.get_config()["datasets_dir"] or harness.DEFAULT_DATASETS
        ):
            nm, _ = dataset.build()
            jobs = [(f"{k} m={m}" if m > 1 else k, nm, k, m) for k, m in harness.OPERATORS]
            absolute = None
            for label in harness.ESTIMATORS:
                data = nm
                if label == "gnmf" and float(nm.min()) < 0:  # as the harness fits it
                    absolute = absolute or abs(nm)
                    data = absolute
                jobs.append((label, data, harness.estimator(label), None))
            for label, data, what, m in jobs:
                f = extract(data, workload_of(what, data.shape, m), "cpu")
                op, join = model.predict(f)
                rule_op, rule_join = f["analytic_log_speedup"], f["analytic_log_join"]
                correction = (op - rule_op, join - rule_join)
                rows.append(
                    (dataset.name, label, bool(model.outside(f)), rule_op, rule_join, *correction)
                )
    return rows


def decide(row, share, margin, repeats):
    _, _, outside, rule_op, rule_join, fix_op, fix_join = row
    if outside or share == 0:  # the analytic rule decides, at speed-up 1
        share, margin = 0.0, 0.0
    speedup = math.exp(rule_op + share * fix_op)
    speedup += math.exp(rule_join + share * fix_join) / repeats if repeats else 0.0
    return math.log(speedup) > margin


def main(folder):
    harness._use_model(folder)
    model = cost_model.load("cpu")
    model.correction = 1.0  # the full correction, scaled here
    print(
        "| correction | margin | "
        + " | ".join(f"{t} thr. {case}" for t in (1, 2) for case in ("iterative", "one-shot"))
        + " |"
    )
    print("|---|---|" + "---|" * 4)
    table = {t: (predictions(model, t), logged_times(t)) for t in (1, 2)}
    for share in CORRECTIONS:
        for margin in (0.0,) if share == 0 else MARGINS:
            cells = []
            for t, (rows, times) in table.items():
                t_fact = np.array([times[r[:2]][0] for r in rows])
                for repeats in (None, 1):
                    t_mat = np.array(
                        [times[r[:2]][1] + (times[r[:2]][2] if repeats else 0.0) for r in rows]
                    )
                    e = evaluate(
                        t_fact,
                        t_mat,
                        [decide(r, share, margin, repeats) for r in rows],
                        tie=harness.TIE,
                    )
                    cells.append(
                        f"{e['tie_accuracy']:.3f} / {e['time_saved']:.3f} / {e['worst_regret']:.2f}"
                    )
            print(f"| {share:g} | {margin:+g} | " + " | ".join(cells) + " |")
    print("\ncells: accuracy (ties within 10 %) / time saved / worst regret")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
