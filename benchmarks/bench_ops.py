"""Factorized vs materialized time of every NormalizedMatrix operator, side by side in one run.

    python benchmarks/bench_ops.py                     # Hamlet datasets + the dense stars
    python benchmarks/bench_ops.py --only hamlet       # or --only synthetic, or --workloads "Hamlet Yelp"
    python benchmarks/bench_ops.py --quick             # smaller dense stars (n_R = 1e4), one round

Both plans are those of :func:`ilargi.calibration.runs.operator_calls`, which the chooser's sweep
times too: the factorized operator on the NormalizedMatrix, and the materialized one on the joined
table T through the backend's kernels (:mod:`ilargi.rewriter.materialized`: ilargi's parallel
kernels, at the same thread count and in the same thread pool). NumPy/SciPy's own product on T
(``T @ X``, ``T.T @ T``; BLAS at the same thread count, SciPy's sparse products on one thread) is
timed too, and each speed-up divides by the faster of the two materialized times. The join itself
is not timed.

Every operator and plan is timed in blocks of --calls calls in a row (41), each block after a
pause (so that no thread pool left spinning by the block before is still holding a core) and two
untimed calls, at the default thread count (every core, set by nothing, as a user runs it) and at
one thread. A block whose calls take over --block-seconds in all has fewer calls (at least 5; the
tables say how many). --rounds rounds (3) run the blocks in the order factorized, materialized,
NumPy/SciPy, then the reverse, so that a drift of the machine's speed hits every plan alike.

Tables:

* **Stability at the default thread count** (issue 41, must-show 2): per operator and plan, the
  median and 90th percentile of a block's calls, their ratio (the worst block of all rounds), and
  the median time at the default count over the median at one thread (above 1: slower with more
  threads).
* **Speed-up**: per thread count, each plan's median over rounds with its range, and the speed-up
  (the faster materialized time / the factorized time) as the median of the rounds' ratios with
  their range.
* The LMM m=1 lower bounds: Σ_p t(S_p·x_p) + one gather (of the largest dimension's result), and
  + one gather per dimension table.

Each block also records the CPU time that other processes took while it ran (from /proc/stat, on
Linux): on a machine shared with other jobs, a block where they took more than a tenth of the
cores is run again (up to --retries times), and marked with ``*`` in the tables if it still was.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _timing import markdown_table, median_time
from numba import njit, prange

import ilargi
from ilargi.backend import cpu
from ilargi.calibration.runs import operator_calls
from ilargi.chooser.workload import Workload
from ilargi.datasets import load_hamlet, make_star

DEFAULT_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"

OPERATORS = [
    ("LMM m=1", Workload("lmm", 1)),
    ("LMM m=8", Workload("lmm", 8)),
    ("RMM m=1", Workload("rmm", 1)),
    ("TMM m=8", Workload("tmm", 8)),
    ("rowSums", Workload("rowsums")),
    ("colSums", Workload("colsums")),
    ("crossprod", Workload("crossprod")),
    ("gramvec", Workload("gramvec")),
]
PLANS = ("factorized", "materialized", "NumPy/SciPy")

# A pause before each block: OpenBLAS's idle threads spin ~0.1 s after a call, GNU OpenMP's
# tens of milliseconds after a kernel (ilargi.rewriter.pool).
PAUSE = 0.3
FOREIGN = 0.1  # other processes' share of the cores above which a block is marked


def numpy_calls(T, rng):
    """NumPy/SciPy's own form of each operator on the table T (BLAS at the thread count set;
    SciPy's sparse products on one thread): the sums as products, the fastest form for a
    dense table (NumPy's sum over short rows is ~3x slower than a GEMV) and SciPy's own for a
    sparse one."""
    n, d = T.shape
    x, X8 = rng.standard_normal(d), rng.standard_normal((d, 8))
    y, Y8 = rng.standard_normal(n), rng.standard_normal((n, 8))
    v, ones_d, ones_n = rng.random(n), np.ones(d), np.ones(n)
    return {
        "LMM m=1": lambda: T @ x,
        "LMM m=8": lambda: T @ X8,
        "RMM m=1": lambda: y @ T,
        "TMM m=8": lambda: T.T @ Y8,
        "rowSums": lambda: T @ ones_d,
        "colSums": lambda: ones_n @ T,
        "crossprod": lambda: T.T @ T,
        "gramvec": lambda: T.T @ (v * (T @ x)),
    }


def _busy_jiffies():
    """Busy CPU time of the whole machine (all processes), in clock ticks; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(f) for f in stat.readline().split()[1:]]
    except OSError:
        return None
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def _own_seconds():
    t = os.times()
    return t.user + t.system


class Block:
    """The times of ``calls`` calls of fn in a row (after a pause and two untimed calls), and
    the share of the cores other processes took meanwhile (None where unknown)."""

    def __init__(self, fn, calls, budget):
        time.sleep(PAUSE)
        start = time.perf_counter()
        fn()
        fn()
        once = (time.perf_counter() - start) / 2
        self.calls = calls if once * calls <= budget else max(5, int(budget / max(once, 1e-9)))
        busy, own, wall = _busy_jiffies(), _own_seconds(), time.perf_counter()
        self.times = []
        for _ in range(self.calls):
            start = time.perf_counter()
            fn()
            self.times.append(time.perf_counter() - start)
        wall = time.perf_counter() - wall
        self.foreign = None
        if busy is not None:
            others = (_busy_jiffies() - busy) / os.sysconf("SC_CLK_TCK") - (_own_seconds() - own)
            self.foreign = max(0.0, others) / (wall * (os.cpu_count() or 1))

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def p90(self):
        ordered = sorted(self.times)
        return ordered[int(0.9 * (len(ordered) - 1))]


def quiet_block(fn, calls, budget, retries):
    """A Block, run again (up to ``retries`` times) while other processes took more than FOREIGN
    of the cores during it."""
    block = Block(fn, calls, budget)
    for _ in range(retries):
        if block.foreign is None or block.foreign <= FOREIGN:
            break
        block = Block(fn, calls, budget)
    return block


def run_operator(calls3, args):
    """{(plan, k): [Block per round]} for k in ("default", 1): the three plans of one operator
    in the order of the module docstring."""
    blocks = {}
    for r in range(args.rounds):
        order = PLANS if r % 2 == 0 else PLANS[::-1]
        for plan in order:
            fn, settings = calls3[plan], (args.calls, args.block_seconds, args.retries)
            blocks.setdefault((plan, "default"), []).append(quiet_block(fn, *settings))
            with ilargi.threads(1):
                blocks.setdefault((plan, 1), []).append(quiet_block(fn, *settings))
    return blocks


def lmm_lower_bounds(nm, x, repeats):
    """(Σ_p t(S_p · x_p) + t(one gather of the largest dimension's result into n rows),
    the same + t(one gather per dimension table)): the issue's bound and the per-table one."""
    products = median_time(lambda: [p.source @ x[p.cols] for p in nm.parts], repeats)
    dims = [p for p in nm.parts if not p.indicator.is_identity]
    if not dims:
        return products, products
    gathers = [
        median_time(lambda p=p, z=p.source @ x[p.cols]: cpu.gather(z, p.indicator), repeats)
        for p in dims
    ]
    return products + max(gathers), products + sum(gathers)


@njit(parallel=True, fastmath=True, cache=True)
def _stream_sum(a):
    total = 0.0
    for i in prange(a.shape[0]):
        total += a[i]
    return total


def memory_ceiling(repeats=10):
    """(1 thread, default) median seconds of a compiled sum over 320 MB: the thread scaling that
    the machine's memory bandwidth allows a kernel that streams its operands once (on a shared VM
    it moves from run to run)."""
    a = np.ones(40_000_000)
    with ilargi.threads(1):
        one = median_time(lambda: _stream_sum(a), repeats)
    return one, median_time(lambda: _stream_sum(a), repeats)


def _ms(seconds):
    return f"{seconds * 1e3:.2f}"


def _range(values, scale=1e3):
    values = [v * scale for v in values]
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def _foreign(blocks):
    shares = [b.foreign for b in blocks if b.foreign is not None]
    return "*" if shares and max(shares) > FOREIGN else ""


class Report:
    """The rows of the tables, filled workload by workload."""

    def __init__(self, k):
        self.k, self.stability, self.speedups, self.bounds = k, [], [], []

    def add(self, name, op, blocks):
        for plan in PLANS[:2]:
            default, one = blocks[plan, "default"], blocks[plan, 1]
            worst = max(default, key=lambda b: b.p90 / b.median)
            slower = statistics.median(b.median for b in default) / statistics.median(
                b.median for b in one
            )
            self.stability.append(
                [
                    name,
                    op,
                    plan,
                    _ms(statistics.median(b.median for b in default)),
                    _ms(worst.p90),
                    f"{worst.p90 / worst.median:.2f}",
                    f"{slower:.2f}",
                    f"{worst.calls}" + _foreign(default + one),
                ]
            )
        for k in ("default", 1):
            fact, mat, ref = (blocks[plan, k] for plan in PLANS)
            ratios = [min(m.median, r.median) / f.median for f, m, r in zip(fact, mat, ref)]
            self.speedups.append(
                [
                    name,
                    op,
                    self.k if k == "default" else 1,
                    *(_range([b.median for b in blocks[plan, k]]) for plan in PLANS),
                    _range(ratios, scale=1) + _foreign(fact + mat + ref),
                ]
            )

    def print_last(self, count):
        for row in self.stability[-2 * count :]:
            print("stability | " + " | ".join(map(str, row)), flush=True)

    def tables(self):
        out = [
            f"### Stability at the default thread count ({self.k}), 41 calls a block\n",
            markdown_table(
                [
                    "workload",
                    "operator",
                    "plan",
                    "median ms",
                    "p90 ms",
                    "p90 / median (worst block)",
                    f"{self.k} threads / 1 thread",
                    "calls a block",
                ],
                self.stability,
            ),
            "\n### Speed-up (materialized: the faster of ilargi's kernels and NumPy/SciPy)\n",
            markdown_table(
                [
                    "workload",
                    "operator",
                    "threads",
                    "factorized ms",
                    "materialized ms (ilargi kernels)",
                    "NumPy/SciPy ms",
                    "speed-up",
                ],
                self.speedups,
            ),
        ]
        if self.bounds:
            out += [
                "\n### LMM m=1 against its lower bounds\n",
                markdown_table(
                    [
                        "workload",
                        "threads",
                        "factorized / bound (one gather)",
                        "factorized / bound (a gather per table)",
                    ],
                    self.bounds,
                ),
            ]
        return "\n".join(out)


def run_workload(name, nm, args, report, rng):
    T = nm.materialize()
    print(f"{name}: {nm.shape[0]} x {nm.shape[1]}, table {type(T).__name__}", flush=True)
    for op, workload in OPERATORS:
        fact, mat = operator_calls(nm, T, workload, rng)
        blocks = run_operator(
            {"factorized": fact, "materialized": mat, "NumPy/SciPy": numpy_calls(T, rng)[op]}, args
        )
        report.add(name, op, blocks)
        report.print_last(1)
        if op == "LMM m=1":
            fact_times = {
                k: statistics.median(b.median for b in blocks["factorized", k])
                for k in ("default", 1)
            }
            for k in ("default", 1):
                with ilargi.threads(report.k if k == "default" else 1):
                    bounds = lmm_lower_bounds(nm, rng.standard_normal(nm.shape[1]), 11)
                report.bounds.append(
                    [name, report.k if k == "default" else 1]
                    + [f"{fact_times[k] / b:.2f}" for b in bounds]
                )
    del T


def workloads(args):
    """(name, loader) of every workload asked for."""
    found = []
    if args.only != "synthetic":
        for name in ("Flights", "Walmart", "Yelp"):
            folder = args.datasets / "hamlet" / name
            if folder.exists():
                found.append((f"Hamlet {name}", lambda folder=folder: load_hamlet(folder)[0]))
            else:
                print(f"skipping Hamlet {name}: {folder} not found", file=sys.stderr)
    if args.only != "hamlet":
        n_r, d_s = (10_000 if args.quick else 100_000), 20
        found.append(
            (
                "dense star, 2 dims TR=5 FR=2",
                lambda: make_star(
                    5 * n_r,
                    tuple_ratio=5,
                    feature_ratio=2,
                    n_dims=2,
                    d_fact=8,
                    target=None,
                    random_state=0,
                )[0],
            )
        )
        for tr in (1, 5, 20):
            for fr in (1, 4):
                found.append(
                    (
                        f"dense TR={tr} FR={fr}",
                        lambda tr=tr, fr=fr: make_star(
                            n_fact=tr * n_r,
                            tuple_ratio=tr,
                            feature_ratio=fr,
                            n_dims=1,
                            d_fact=d_s,
                            target=None,
                            random_state=0,
                        )[0],
                    )
                )
    if args.workloads:
        wanted = [w.strip() for w in args.workloads.split(",")]
        found = [(name, load) for name, load in found if name in wanted]
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--datasets", type=Path, default=ilargi.get_config()["datasets_dir"] or DEFAULT_DATASETS
    )
    parser.add_argument("--calls", type=int, default=41, help="calls a block (41)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of blocks (3; --quick: 1)")
    parser.add_argument(
        "--block-seconds",
        type=float,
        default=20.0,
        help="fewer calls in a block whose calls would take longer (20 s)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=3,
        help="runs again of a block during which other processes were busy (3)",
    )
    parser.add_argument("--quick", action="store_true", help="n_R = 1e4 instead of 1e5")
    parser.add_argument("--only", choices=["hamlet", "synthetic"], default=None)
    parser.add_argument(
        "--workloads",
        default=None,
        help='comma-separated workload names, e.g. "Hamlet Yelp,dense TR=1 FR=1"',
    )
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (1 if args.quick else 3)
    k = ilargi.get_num_threads()
    report = Report(k)
    rng = np.random.default_rng(0)
    one, default = memory_ceiling()
    print(
        f"memory ceiling, a compiled sum over 320 MB: 1 thread {_ms(one)} ms, {k} threads "
        f"{_ms(default)} ms; scaling {one / default:.2f}",
        flush=True,
    )
    for name, load in workloads(args):
        run_workload(name, load(), args, report, rng)
    one, default = memory_ceiling()
    print(
        f"memory ceiling after: 1 thread {_ms(one)} ms, {k} threads {_ms(default)} ms; "
        f"scaling {one / default:.2f}\n",
        flush=True,
    )
    print(report.tables())


if __name__ == "__main__":
    main()
