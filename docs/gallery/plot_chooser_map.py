"""
The plan chooser's decisions against the measured winner
========================================================

:func:`ilargi.choose` predicts, from metadata and shapes alone, how much faster the factorized
plan runs than the materialized one, and picks the plan. This example asks it about every cell
of a grid of synthetic stars (tuple ratio TR against feature ratio FR), then times both plans on
the machine that built this page and compares.

Three workloads:

* ``T @ x`` and ``T.T @ T`` with the joined table built once beforehand (``choose(T, op)``: the
  join is not charged, as for an operator run many times);
* a :class:`ilargi.LogisticRegression` fit (gradient descent, 20 iterations), where the
  materialized plan builds the join inside the fit (``choose(T, model, repeats=1)``, what
  ``plan="auto"`` asks).

The cost model ships with ilargi, trained on another machine's timings (several threads);
here both plans run at one thread on a machine shared with other jobs, so some disagreement near
a speed-up of 1 is expected: there the two plans cost about the same and either choice is cheap.
:func:`ilargi.calibrate` re-trains the cost model on the user's machine.
"""

import time

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

import ilargi
from ilargi.datasets import make_star

N_FACT, D_FACT = 100_000, 10
TUPLE_RATIOS = [1, 2, 5, 10, 20]
FEATURE_RATIOS = [0.5, 1, 2, 4]
REPEATS = 7


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


def fit_logistic(plan):
    """A function that fits on a fresh copy of the star, so that every fit pays its own set-up
    (the materialized plan builds the join, the factorized one its index structures)."""

    def run():
        T, y = make_star(
            N_FACT,
            tuple_ratio=tr,
            feature_ratio=fr,
            d_fact=D_FACT,
            target="logistic",
            random_state=0,
        )
        start = time.perf_counter()
        ilargi.LogisticRegression(solver="gd", max_iter=20, plan=plan).fit(T, y)
        return time.perf_counter() - start

    return run


# %%
# Predicted and measured speed-ups
# --------------------------------
WORKLOADS = ["T @ x", "T.T @ T", "LogisticRegression fit"]
shape = (len(FEATURE_RATIOS), len(TUPLE_RATIOS))
predicted = {name: np.zeros(shape) for name in WORKLOADS}
chosen = {name: np.zeros(shape, dtype=bool) for name in WORKLOADS}
measured = {name: np.zeros(shape) for name in WORKLOADS}
model = ilargi.LogisticRegression(solver="gd", max_iter=20)
with ilargi.threads(1):
    for i, fr in enumerate(FEATURE_RATIOS):
        for j, tr in enumerate(TUPLE_RATIOS):
            T, y = make_star(
                N_FACT,
                tuple_ratio=tr,
                feature_ratio=fr,
                d_fact=D_FACT,
                target="logistic",
                random_state=0,
            )
            plans = {
                "T @ x": ilargi.choose(T, "lmm"),
                "T.T @ T": ilargi.choose(T, "crossprod"),
                "LogisticRegression fit": ilargi.choose(T, model, repeats=1),
            }
            for name, plan in plans.items():
                predicted[name][i, j], chosen[name][i, j] = plan.speedup, plan.factorize
            M, x = T.materialize(), np.ones(T.shape[1])
            t_fact, t_mat = side_by_side(lambda: T @ x, lambda: M @ x)
            measured["T @ x"][i, j] = t_mat / t_fact
            t_fact, t_mat = side_by_side(lambda: T.crossprod(), lambda: M.T @ M)
            measured["T.T @ T"][i, j] = t_mat / t_fact
            fits = [
                min(fit_logistic(plan)() for _ in range(3))
                for plan in ("factorized", "materialized")
            ]
            measured["LogisticRegression fit"][i, j] = fits[1] / fits[0]
            del M

for name in WORKLOADS:
    right = chosen[name] == (measured[name] > 1)
    print(
        f"{name:<24} chooser agrees with the measured winner in {right.sum()} of {right.size} cells"
    )
    print(f"{'':<24} {plans[name].reason}")

# %%
# The decision map
# ----------------
# Colour: the measured speed-up (blue: factorizing is faster, red: materializing is). Marker: the
# chooser's decision, ``F`` factorize or ``M`` materialize, circled in black where it agrees with
# the measured winner and crossed out where it does not; the number under it is the measured
# speed-up. Right: predicted against measured speed-up, every cell of the three maps.
fig = plt.figure(figsize=(10.5, 8.5), layout="constrained")
grid = fig.add_gridspec(2, 2)
limit = max(np.abs(np.log2(values)).max() for values in measured.values())
for k, name in enumerate(WORKLOADS):
    ax = fig.add_subplot(grid[k // 2, k % 2] if k < 2 else grid[1, 0])
    image = ax.imshow(
        np.log2(measured[name]), cmap="RdBu", vmin=-limit, vmax=limit, origin="lower", aspect="auto"
    )
    for (i, j), value in np.ndenumerate(measured[name]):
        agree = chosen[name][i, j] == (value > 1)
        ax.text(
            j,
            i + 0.12,
            "F" if chosen[name][i, j] else "M",
            ha="center",
            va="center",
            fontsize=11,
            fontweight="bold",
            color="black" if agree else "crimson",
        )
        ax.text(j, i - 0.22, f"{value:.2f}x", ha="center", va="center", fontsize=7)
        if not agree:
            ax.plot([j - 0.3, j + 0.3], [i - 0.35, i + 0.35], color="crimson", linewidth=1.5)
    right = (chosen[name] == (measured[name] > 1)).sum()
    ax.set_xticks(range(len(TUPLE_RATIOS)), [str(tr) for tr in TUPLE_RATIOS])
    ax.set_yticks(range(len(FEATURE_RATIOS)), [f"{fr:g}" for fr in FEATURE_RATIOS])
    ax.set(
        title=f"{name}: right in {right}/{measured[name].size}",
        xlabel="tuple ratio",
        ylabel="feature ratio",
    )
fig.colorbar(image, ax=fig.axes, location="left", label="measured log2 speed-up", shrink=0.6)

ax = fig.add_subplot(grid[1, 1])
markers = dict(zip(WORKLOADS, "osD"))
for name in WORKLOADS:
    ok = np.isfinite(predicted[name])  # NaN where a rule decided instead of the cost model
    ax.scatter(predicted[name][ok], measured[name][ok], marker=markers[name], label=name, alpha=0.8)
ax.axline((1, 1), slope=1, color="0.5", linewidth=1)
ax.axhline(1, color="0.7", linestyle="--", linewidth=1)
ax.axvline(1, color="0.7", linestyle="--", linewidth=1)
ax.set(
    xscale="log",
    yscale="log",
    xlabel="predicted speed-up",
    ylabel="measured speed-up",
    title="predicted vs measured",
)
for axis in (ax.xaxis, ax.yaxis):
    axis.set_major_locator(LogLocator(base=2))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}x"))
    axis.set_minor_formatter(NullFormatter())
ax.legend(fontsize=8)
fig.legend(
    handles=[
        Line2D(
            [],
            [],
            marker="$F$",
            color="black",
            linestyle="",
            markersize=10,
            label="chooser: factorize (agrees)",
        ),
        Line2D(
            [],
            [],
            marker="$M$",
            color="black",
            linestyle="",
            markersize=10,
            label="chooser: materialize (agrees)",
        ),
        Line2D(
            [],
            [],
            marker="$F$",
            color="crimson",
            linestyle="",
            markersize=10,
            label="decision the timing contradicts",
        ),
    ],
    loc="outside lower center",
    ncol=3,
    fontsize=9,
)
fig.suptitle(f"ilargi.choose vs the measured winner; stars of {N_FACT:,} fact rows, one thread")
plt.show()
