"""
Thread scaling
==============

ilargi's compiled kernels (Numba) and BLAS share one thread count, set with
:func:`ilargi.set_num_threads` or, for a block, :func:`ilargi.threads`. The factorized plan
spends its time in gathers and segment-sums over the fact rows (the compiled kernels), the
materialized plan in BLAS calls on the joined table; both run at the same count here, from one
thread to every core of the machine that built this page (its number is in the title; CI
machines have few).

A star of 200,000 fact rows (10 columns) with two dimensions (TR = 20, FR = 2) from
:func:`ilargi.datasets.make_star`. Times are the fastest of 5 runs after a warm-up, both plans
in turns; the fit's join is built once beforehand, so the figure compares iterations only.
"""

import os
import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

import ilargi
from ilargi.datasets import make_star

REPEATS = 5
cores = ilargi.get_num_threads()  # the default: every core this process may use
counts = sorted({1, *[k for k in (2, 4, 8, 16, 32, 64) if k < cores], cores})

T, y = make_star(
    200_000, tuple_ratio=20, feature_ratio=2, n_dims=2, d_fact=10, target="logistic", random_state=0
)
M = T.materialize()
X = np.random.default_rng(0).standard_normal((T.shape[1], 8))


def side_by_side(first, second, repeats=REPEATS):
    """Wall times of ``first()`` and ``second()``, in turns after a warm-up, fastest of ``repeats``."""
    first(), second()
    times = np.zeros((repeats, 2))
    for r in range(repeats):
        for k, run in enumerate((first, second)):
            start = time.perf_counter()
            run()
            times[r, k] = time.perf_counter() - start
    return times.min(axis=0)


def fit(data, plan):
    # 30 L-BFGS iterations whatever the gradient (tol=0): the same work at every thread count.
    return lambda: ilargi.LogisticRegression(max_iter=30, tol=0, plan=plan).fit(data, y)


# %%
# Timing each workload at each thread count
# -----------------------------------------
WORKLOADS = {
    "T @ X  (X: d x 8)": (lambda: T @ X, lambda: M @ X),
    "T.T @ T": (lambda: T.crossprod(), lambda: M.T @ M),
    "LogisticRegression (30 L-BFGS steps)": (fit(T, "factorized"), fit(M, "materialized")),
}
seconds = {name: np.zeros((len(counts), 2)) for name in WORKLOADS}
for i, k in enumerate(counts):
    with ilargi.threads(k):
        for name, (factorized, materialized) in WORKLOADS.items():
            seconds[name][i] = side_by_side(factorized, materialized)
for name, table in seconds.items():
    print(name)
    for k, (t_fact, t_mat) in zip(counts, table):
        print(
            f"  {k:>2} threads: factorized {t_fact * 1e3:8.1f} ms, materialized {t_mat * 1e3:8.1f} ms"
        )

# %%
# Time against threads
# --------------------
# Solid: the measured time; dotted: perfect scaling from one thread. The vertical gap between the
# two plans at a thread count is the speed-up of factorizing there. The title gives the machine's
# load average while it ran: where other jobs already keep the cores busy (a load near or above
# the number of cores, as on a shared CI machine), a parallel kernel waits for its slowest thread
# and more threads make both plans slower, not faster.
fig, axes = plt.subplots(1, len(WORKLOADS), figsize=(12, 4), layout="constrained")
for ax, (name, table) in zip(axes, seconds.items()):
    for column, (plan, color) in enumerate(
        [("factorized", "tab:blue"), ("materialized", "tab:orange")]
    ):
        ax.plot(counts, table[:, column] * 1e3, "o-", color=color, label=plan)
        ax.plot(counts, table[0, column] * 1e3 / np.array(counts), ":", color=color)
    ax.set(xscale="log", yscale="log", title=name, xlabel="threads", ylabel="ms")
    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(
        FuncFormatter(  # label 2, 5, 20, 50, ... between the decades
            lambda value, _: (
                f"{value:g}" if round(value / 10 ** np.floor(np.log10(value))) in (2, 5) else ""
            )
        )
    )
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlim(0.8, max(counts) * 1.25)
    ax.grid(True, which="both", alpha=0.3)
axes[0].legend()
load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
fig.suptitle(
    f"Thread scaling on {os.cpu_count()} cores ({cores} usable by this process; load average "
    f"{load:.1f} when measured), star {T.shape[0]:,} x {T.shape[1]}"
)
plt.show()
