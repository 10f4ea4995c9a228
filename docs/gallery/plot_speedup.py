"""
Speed-up against tuple ratio and feature ratio
==============================================

The classic figure of factorized learning: how much faster an operator runs on the sources
(factorized) than on the joined table built beforehand (materialized), as a function of the
*tuple ratio* TR = n_S / n_R (how many fact rows share one dimension row) and the *feature
ratio* FR = d_R / d_S (how wide the dimension is next to the fact table).

Each cell is a synthetic star (one fact table of 200,000 rows and 10 columns, one dense
dimension) from :func:`ilargi.datasets.make_star`, timed on the machine that built this page:
the fastest of 9 runs after a warm-up, both plans in turns at one thread (compiled kernels
and BLAS alike, so neither side gets more cores). The materialized side runs each operator in
its fastest NumPy form (row and column sums as matrix-vector products) and does not pay for the
join, which is built once, untimed.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

import ilargi
from ilargi.datasets import make_star

N_FACT, D_FACT = 200_000, 10
TUPLE_RATIOS = [1, 2, 5, 10, 20]
FEATURE_RATIOS = [0.5, 1, 2, 4]
REPEATS = 9


def side_by_side(first, second, repeats=REPEATS):
    """Wall times of ``first()`` and ``second()``: run in turns after a warm-up of each, so that a
    busy moment of the machine falls on both, and the fastest of ``repeats`` runs of each (on a
    machine shared with other jobs the minimum is the steadiest estimate)."""
    first(), second()
    times = np.zeros((repeats, 2))
    for r in range(repeats):
        for k, run in enumerate((first, second)):
            start = time.perf_counter()
            run()
            times[r, k] = time.perf_counter() - start
    return times.min(axis=0)


def times_axis(axis):
    """Speed-ups as 0.5x, 1x, 2x, ... on a log axis."""
    axis.set_major_locator(LogLocator(base=2))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axis.set_minor_formatter(NullFormatter())


# %%
# The operators
# -------------
# Each entry gives the factorized call on the NormalizedMatrix ``T`` and the same result on the
# materialized ndarray ``M``; ``x`` has one entry per column, ``y`` one per row.
OPERATORS = {
    "LMM  T @ x": (lambda T, x, y: T @ x, lambda M, x, y: M @ x),
    "TMM  T.T @ y": (lambda T, x, y: T.T @ y, lambda M, x, y: M.T @ y),
    "rowSums": (lambda T, x, y: T.sum(axis=1), lambda M, x, y: M @ np.ones(M.shape[1])),
    "colSums": (lambda T, x, y: T.sum(axis=0), lambda M, x, y: np.ones(M.shape[0]) @ M),
    "crossprod  T.T @ T": (lambda T, x, y: T.crossprod(), lambda M, x, y: M.T @ M),
    "gramvec  T.T @ (T @ x)": (lambda T, x, y: T.gramvec(x), lambda M, x, y: M.T @ (M @ x)),
}

# %%
# Timing the grid
# ---------------
speedup = {name: np.zeros((len(FEATURE_RATIOS), len(TUPLE_RATIOS))) for name in OPERATORS}
with ilargi.threads(1):
    for i, fr in enumerate(FEATURE_RATIOS):
        for j, tr in enumerate(TUPLE_RATIOS):
            T, _ = make_star(
                N_FACT, tuple_ratio=tr, feature_ratio=fr, d_fact=D_FACT, target=None, random_state=0
            )
            M = T.materialize()
            rng = np.random.default_rng(0)
            x, y = rng.standard_normal(T.shape[1]), rng.standard_normal(T.shape[0])
            for name, (factorized, materialized) in OPERATORS.items():
                assert np.allclose(factorized(T, x, y), materialized(M, x, y))
                t_fact, t_mat = side_by_side(
                    lambda: factorized(T, x, y), lambda: materialized(M, x, y)
                )
                speedup[name][i, j] = t_mat / t_fact
            del M

for name, grid in speedup.items():
    print(f"{name:<24} speed-up from {grid.min():.2f}x to {grid.max():.2f}x")

# %%
# Speed-up against the tuple ratio, one line per feature ratio
# -------------------------------------------------------------
# Above the dashed line factorizing pays. At TR = 1 (every dimension row used once) there is no
# redundancy to save, and the gathers and segment-sums of the factorized plan cost more than the
# BLAS calls of the materialized one; the wider the dimension (larger FR), the more the
# factorized plan saves once rows repeat.
fig, axes = plt.subplots(2, 3, figsize=(11, 6.2), sharex=True, layout="constrained")
colors = plt.cm.viridis(np.linspace(0.1, 0.85, len(FEATURE_RATIOS)))
for ax, (name, grid) in zip(axes.flat, speedup.items()):
    for i, fr in enumerate(FEATURE_RATIOS):
        ax.plot(TUPLE_RATIOS, grid[i], "o-", color=colors[i], label=f"FR = {fr:g}")
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1)
    ax.set(xscale="log", yscale="log", title=name)
    ax.set_xticks(TUPLE_RATIOS, [str(tr) for tr in TUPLE_RATIOS])
    ax.xaxis.set_minor_formatter(NullFormatter())
    times_axis(ax.yaxis)
    ax.grid(True, which="major", alpha=0.3)
for ax in axes[1]:
    ax.set_xlabel("tuple ratio n_S / n_R")
for ax in axes[:, 0]:
    ax.set_ylabel("speed-up (materialized / factorized)")
axes[0, 0].legend(title="feature ratio", fontsize=8)
fig.suptitle(
    f"Factorized vs materialized, one thread: star of {N_FACT:,} fact rows x {D_FACT} columns + "
    f"one dimension"
)
plt.show()

# %%
# The same numbers as heat maps
# -----------------------------
# Red: materializing is faster; blue: factorizing is. The plan chooser
# (:func:`ilargi.choose`) learns where that boundary lies, see
# :ref:`sphx_glr_auto_gallery_plot_chooser_map.py`.
fig, axes = plt.subplots(2, 3, figsize=(11, 6.2), layout="constrained")
limit = max(np.abs(np.log2(grid)).max() for grid in speedup.values())
for ax, (name, grid) in zip(axes.flat, speedup.items()):
    image = ax.imshow(
        np.log2(grid), cmap="RdBu", vmin=-limit, vmax=limit, origin="lower", aspect="auto"
    )
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(TUPLE_RATIOS)), [str(tr) for tr in TUPLE_RATIOS])
    ax.set_yticks(range(len(FEATURE_RATIOS)), [f"{fr:g}" for fr in FEATURE_RATIOS])
    ax.set(title=name, xlabel="tuple ratio", ylabel="feature ratio")
fig.colorbar(image, ax=axes, label="log2 speed-up", shrink=0.8)
plt.show()
