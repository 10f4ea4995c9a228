"""Factorized vs materialized time of every NormalizedMatrix operator, side by side in one run.

    python benchmarks/bench_ops.py                 # Hamlet datasets + the synthetic dense grid
    python benchmarks/bench_ops.py --quick         # a smaller grid (n_R = 1e4), for a smoke run

For each workload, operator and thread count (--threads, default 1 and every core; both plans at
the same count, ``ilargi.threads(k)``: the compiled kernels and BLAS alike): the factorized time,
the materialized time (dense ndarray or CSR, as the data is; the join itself is not timed) and their
ratio (materialized / factorized: > 1 means factorized is faster); then each plan's thread scaling
(its time at 1 thread over its time at every core). Each plan's operators run in a block of their
own; each operator's time at each thread count is the median of 2·ceil(--repeats / 2) calls, in
blocks at the thread counts in the order 1, k, k, 1, each block after one untimed call, so the
scaling is measured side by side too, and the synthetic grid is framed by the memory ceiling: the
thread scaling of a compiled sum over 320 MB, which bounds that of any kernel streaming its
operands. For LMM, the overhead of the factorized time over the lower bound Σ_p t(S_p·X_p) + one gather
is reported too, and over Σ_p t(S_p·X_p) + one gather per dimension table.
"""
import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit, prange

from _timing import block_times, markdown_table, median_time

import ilargi
from ilargi.backend import cpu
from ilargi.datasets import load_hamlet, make_star

DEFAULT_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"


def operators(nm, T, rng):
    """(name, factorized call, materialized call) for every operator of the benchmark."""
    n, d = nm.shape
    x, X8 = rng.standard_normal(d), rng.standard_normal((d, 8))
    y, Y8 = rng.standard_normal(n), rng.standard_normal((n, 8))
    v = rng.random(n)
    return [
        ("LMM m=1", lambda: nm @ x, lambda: T @ x),
        ("LMM m=8", lambda: nm @ X8, lambda: T @ X8),
        ("RMM m=1", lambda: y @ nm, lambda: T.T @ y),
        ("TMM m=8", lambda: nm.T @ Y8, lambda: T.T @ Y8),
        # The materialized sums as products: the fastest form for a dense table (NumPy's sum over
        # short rows is ~3x slower than a GEMV), and what SciPy does for a sparse one anyway.
        ("rowSums", lambda: nm.sum(axis=1), lambda: T @ np.ones(d)),
        ("colSums", lambda: nm.sum(axis=0), lambda: np.ones(n) @ T),
        ("crossprod", lambda: nm.crossprod(), lambda: T.T @ T),
        ("gramvec", lambda: nm.gramvec(x, v), lambda: T.T @ (v * (T @ x))),
    ]


def lmm_lower_bounds(nm, x, repeats):
    """(Σ_p t(S_p · x_p) + t(one gather of the largest dimension's result into n rows),
    the same + t(one gather per dimension table)): the issue's bound and the per-table one."""
    products = median_time(lambda: [p.source @ x[p.cols] for p in nm.parts], repeats)
    dims = [p for p in nm.parts if not p.indicator.is_identity]
    if not dims:
        return products, products
    gathers = [median_time(lambda p=p, z=p.source @ x[p.cols]: cpu.gather(z, p.indicator), repeats)
               for p in dims]
    return products + max(gathers), products + sum(gathers)


# Each plan's operators are timed in a block, after a pause: at 2 threads a compiled kernel launched
# right after a multi-threaded BLAS call (or a BLAS call right after a compiled kernel) waits for a
# core that the other pool's idle threads still hold (RESULTS.md, "Thread interference at 2
# threads"), which a user running one plan does not see.
PAUSE = 0.5


def by_threads(fn, counts, repeats):
    """{k: median seconds of fn at k threads}: blocks of calls at each count in the order
    low..high, high..low, so that a drift of the machine's speed (memory bandwidth on a shared
    host moves by tens of percent within minutes) hits every count alike and the thread scaling
    is measured side by side; each block starts with an untimed call."""
    half = (repeats + 1) // 2
    times = {k: [] for k in counts}
    for k in [*counts, *reversed(counts)]:
        with ilargi.threads(k):
            times[k] += block_times(fn, half)
    return {k: statistics.median(seconds) for k, seconds in times.items()}


@njit(parallel=True, fastmath=True, cache=True)
def _stream_sum(a):
    total = 0.0
    for i in prange(a.shape[0]):
        total += a[i]
    return total


def memory_ceiling(counts, repeats):
    """{k: median seconds of a compiled sum over 320 MB at k threads}: the scaling that the
    machine's memory bandwidth allows a kernel that streams its operands once (on a shared VM it
    moves from run to run: 1.5-2x in one session, none in another)."""
    a = np.ones(40_000_000)
    return by_threads(lambda: _stream_sum(a), counts, 2 * repeats)


def print_ceiling(counts, repeats):
    if len(counts) > 1:
        ceiling = memory_ceiling(counts, repeats)
        print("memory ceiling, a compiled sum over 320 MB: " + ", ".join(
            f"{k} thread{'s' if k > 1 else ''} {t * 1e3:.2f} ms" for k, t in ceiling.items()) +
            f"; scaling {ceiling[counts[0]] / ceiling[counts[-1]]:.2f}", flush=True)


def run_workload(name, nm, repeats, rng, rows, counts, times):
    T = nm.materialize()
    ops = operators(nm, T, rng)
    blocks = []
    for plan in (1, 2):  # factorized, then materialized
        time.sleep(PAUSE)
        blocks.append([by_threads(calls[plan], counts, repeats) for calls in ops])
    for k in counts:
        for (op, _, _), t_f, t_m in zip(ops, *blocks):
            t_f, t_m = t_f[k], t_m[k]
            times[name, op, k] = (t_f, t_m)
            extra = ["", ""]
            if op == "LMM m=1":
                with ilargi.threads(k):
                    bounds = lmm_lower_bounds(nm, rng.standard_normal(nm.shape[1]), repeats)
                extra = [f"{t_f / bound:.2f}" for bound in bounds]
            rows.append([name, op, k, f"{t_f * 1e3:.2f}", f"{t_m * 1e3:.2f}", f"{t_m / t_f:.2f}",
                         *extra])
            print(" | ".join(map(str, rows[-1])), flush=True)
    del T


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path,
                        default=Path(os.environ.get("ILARGI_DATASETS", DEFAULT_DATASETS)))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="n_R = 1e4 instead of 1e5")
    parser.add_argument("--only", choices=["hamlet", "synthetic"], default=None)
    parser.add_argument("--threads", default=None,
                        help="comma-separated thread counts (default: 1 and every core)")
    args = parser.parse_args(argv)
    counts = sorted({1, ilargi.get_num_threads()} if args.threads is None else
                    {int(k) for k in args.threads.split(",")})
    rng = np.random.default_rng(0)
    rows, times = [], {}
    if args.only != "synthetic":
        for name in ("Flights", "Walmart", "Yelp"):
            folder = args.datasets / "hamlet" / name
            if not folder.exists():
                print(f"skipping Hamlet {name}: {folder} not found", file=sys.stderr)
                continue
            nm, _ = load_hamlet(folder)
            run_workload(f"Hamlet {name}", nm, args.repeats, rng, rows, counts, times)
    if args.only != "hamlet":
        print_ceiling(counts, args.repeats)
        n_r, d_s = (10_000 if args.quick else 100_000), 20
        for tr in (1, 5, 20):
            for fr in (1, 4):
                nm, _ = make_star(n_fact=tr * n_r, tuple_ratio=tr, feature_ratio=fr, n_dims=1,
                                  d_fact=d_s, target=None, random_state=0)
                run_workload(f"dense TR={tr} FR={fr}", nm, args.repeats, rng, rows, counts, times)
        print_ceiling(counts, args.repeats)
    print()
    print(markdown_table(["workload", "operator", "threads", "factorized ms", "materialized ms",
                          "speed-up", "LMM / bound (one gather)", "LMM / bound (gather per table)"],
                         rows))
    if len(counts) > 1:
        low, high = counts[0], counts[-1]
        scaling = [[name, op, f"{times[name, op, low][0] / times[name, op, high][0]:.2f}",
                    f"{times[name, op, low][1] / times[name, op, high][1]:.2f}"]
                   for name, op, k in times if k == low]
        print(f"\n### Thread scaling ({low} thread vs {high})\n")
        print(markdown_table(["workload", "operator", f"factorized {low}t / {high}t",
                              f"materialized {low}t / {high}t"], scaling))


if __name__ == "__main__":
    main()
