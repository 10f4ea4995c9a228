"""
Training curves, factorized vs materialized
===========================================

Both plans minimize the same objective with the same steps, so a fit's ``loss_history_`` is the
same whichever plan runs (up to rounding); what differs is the time each iteration takes, and
what a fit pays before its first iteration (the materialized plan builds the joined table, the
factorized one its index structures). This example trains :class:`ilargi.LogisticRegression`
with L-BFGS and with gradient descent on a joined table built from pandas tables, and draws the
objective against wall time.

A fit with ``max_iter=k`` takes exactly the first k steps of a longer fit (the solvers are
deterministic), so the time of the k-th point is measured as the wall time of a whole fit with
``max_iter=k`` on a fresh matrix: set-up included, as a user's first fit pays it.
"""

import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.exceptions import ConvergenceWarning

import ilargi
from ilargi.datasets import make_star_tables

# %%
# Tables in, a matrix out
# -----------------------
# A fact table of 100,000 rows and two dimension tables of 5,000 rows each (TR = 20), 40 columns
# each (FR = 4), with a planted logistic target in the fact table's column ``y``.
tables = make_star_tables(
    100_000,
    tuple_ratio=20,
    feature_ratio=4,
    n_dims=2,
    d_fact=10,
    target="logistic",
    noise=0.1,
    random_state=0,
)
table = (
    ilargi.Table(tables["fact"], name="fact")
    .merge(ilargi.Table(tables["dim1"], name="dim1"), on="fk1", validate="many_to_one")
    .merge(ilargi.Table(tables["dim2"], name="dim2"), on="fk2", validate="many_to_one")
)
features = [c for c in table.columns if c not in ("fk1", "fk2", "y")]


def fresh():
    """A new matrix each time, so that no fit reuses what an earlier one built."""
    return table.to_matrix(columns=features, target="y")


X, y = fresh()
print(f"{table}: X {X.shape[0]:,} x {X.shape[1]}")

# %%
# Timing the fits
# ---------------
# The short fits stop on purpose before convergence: their warnings are expected.
warnings.simplefilter("ignore", ConvergenceWarning)
SOLVERS = {"lbfgs": 50, "newton-cg": 20, "gd": 60}  # solver: iterations at most
curves = {}
for solver, max_iter in SOLVERS.items():
    history = (
        ilargi.LogisticRegression(solver=solver, max_iter=max_iter, plan="factorized")
        .fit(X, y)
        .loss_history_
    )
    last = len(history) - 1  # L-BFGS and Newton-CG may converge sooner
    steps = sorted({0, *np.linspace(0, last, 4).round().astype(int).tolist(), last})
    for plan in ("factorized", "materialized"):
        seconds = []
        for k in steps:
            best = np.inf
            for _ in range(3):  # the fastest of three fits: the machine is shared
                X, y = fresh()
                start = time.perf_counter()
                model = ilargi.LogisticRegression(solver=solver, max_iter=k, plan=plan).fit(X, y)
                best = min(best, time.perf_counter() - start)
            seconds.append(best)
            assert np.isclose(model.loss_history_[-1], history[k], rtol=1e-6)
        curves[solver, plan] = (np.array(seconds), np.array([history[k] for k in steps]))
        print(
            f"{solver:>9} {plan:<12}: {last} iterations in {seconds[-1]:.3f} s "
            f"(set-up and first evaluation {seconds[0]:.3f} s), final objective {history[-1]:.5f}"
        )

# %%
# The objective against time
# --------------------------
# The objective is shown above its best value over all runs (log scale), so that the late
# iterations stay visible. Each curve starts at the time its plan needs before the first step.
best = min(loss.min() for _, loss in curves.values())
fig, axes = plt.subplots(1, 3, figsize=(12, 4.2), layout="constrained", sharey=True)
for ax, solver in zip(axes, SOLVERS):
    for plan, color in (("factorized", "tab:blue"), ("materialized", "tab:orange")):
        seconds, loss = curves[solver, plan]
        ax.plot(seconds, loss - best + 1e-6, "o-", color=color, label=plan)
    ax.set(yscale="log", xlabel="wall time of the fit (s)", title=f"solver={solver!r}")
    ax.set_xlim(left=0)
    ax.grid(True, alpha=0.3)
axes[0].set_ylabel("objective - best objective")
axes[0].legend()
fig.suptitle(
    f"LogisticRegression on a joined table of {X.shape[0]:,} x {X.shape[1]} (two dimensions, TR = 20)"
)
plt.show()
