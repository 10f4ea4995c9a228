"""
Gradient-boosted trees: accuracy and time against the number of trees
=====================================================================

:class:`ilargi.GradientBoostingClassifier` boosts trees on the sources of a join: the bins are
stored per source row, a leaf's histograms are summed by foreign key, and the join is never
built. The usual way is to build the joined table with ``pandas.merge`` and train LightGBM on it.
Both grow the same kind of trees with the same parameters and bins (LightGBM's rule, leaf-wise
growth), so their held-out accuracy should agree at every number of trees; what differs is the
time. This example draws both against the number of trees, on a synthetic star of pandas tables
(:func:`ilargi.datasets.make_star_tables`).

Each point is one whole fit with that many trees, timed from the tables: for LightGBM the join
(``pandas.merge``), its binning and its trees; for ilargi the matrix built from the tables, the
binning of the sources and the trees. Where a time curve meets zero trees is what a fit pays
before its first tree (the join and the binning: what the factorized plan saves, the more so the
wider and the more repeated the dimensions); its slope is the time of a tree. The star is small
so that the page builds in seconds; ``N_FACT`` scales it (see :ref:`gbdt`).
"""

import time

import lightgbm
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from sklearn.metrics import roc_auc_score

import ilargi
from ilargi.datasets import make_star_tables

N_FACT = 20_000
TREES = [10, 20, 40, 80]
REPEATS = 2
PARAMS = dict(num_leaves=31, learning_rate=0.1, min_child_samples=20)

# %%
# The tables
# ----------
# A fact table of 20,000 rows (5 columns, a binary label ``y``) with two dimension tables of
# 200 rows and 40 columns each (tuple ratio 100, feature ratio 8). A fifth of the fact rows is
# held out before any join.
tables = make_star_tables(
    N_FACT,
    tuple_ratio=100,
    feature_ratio=8,
    n_dims=2,
    d_fact=5,
    target="logistic",
    noise=0.3,
    random_state=0,
)
fact, dim1, dim2 = tables["fact"], tables["dim1"], tables["dim2"]
held_out = np.random.default_rng(0).random(len(fact)) < 0.2
fact_train, fact_test = fact[~held_out], fact[held_out]
features = [c for c in (*fact.columns, *dim1.columns, *dim2.columns) if c[0] in "sr"]


def ilargi_matrix(fact):
    """The factorized matrix of fact ⋈ dim1 ⋈ dim2 and its labels (no joined table)."""
    table = (
        ilargi.Table(fact, name="fact")
        .merge(ilargi.Table(dim1, name="dim1"), on="fk1", validate="many_to_one")
        .merge(ilargi.Table(dim2, name="dim2"), on="fk2", validate="many_to_one")
    )
    return table.to_matrix(columns=features, target="y")


def joined(fact):
    """The joined table, as pandas builds it."""
    table = fact.merge(dim1, on="fk1", validate="many_to_one").merge(
        dim2, on="fk2", validate="many_to_one"
    )
    return table[features].to_numpy(), table["y"].to_numpy()


def fit_ilargi(trees):
    X, y = ilargi_matrix(fact_train)
    return ilargi.GradientBoostingClassifier(n_estimators=trees, plan="factorized", **PARAMS).fit(
        X, y
    )


def fit_lightgbm(trees):
    D, y = joined(fact_train)
    model = lightgbm.LGBMClassifier(
        n_estimators=trees, n_jobs=ilargi.get_num_threads(), verbose=-1, **PARAMS
    )
    return model.fit(D, y)


X_test, y_test = ilargi_matrix(fact_test)
D_test, y_test_lgb = joined(fact_test)
print(f"train: {int((~held_out).sum()):,} rows x {len(features)} columns; test: {len(y_test):,}")

# %%
# Timing the fits
# ---------------
# Each fit is timed twice and the faster kept (the machine may be shared); a first fit of
# each, untimed, loads the compiled kernels and LightGBM's library. The held-out metric is the
# area under the ROC curve of each fit's probabilities.
PLANS = {
    "ilargi, factorized": (fit_ilargi, lambda m: m.predict_proba(X_test)[:, 1], y_test),
    "pandas.merge + LightGBM": (fit_lightgbm, lambda m: m.predict_proba(D_test)[:, 1], y_test_lgb),
}
curves = {}
for name, (fit, proba, labels) in PLANS.items():
    fit(2)
    seconds, auc = [], []
    for trees in TREES:
        best = np.inf
        for _ in range(REPEATS):
            start = time.perf_counter()
            model = fit(trees)
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
        auc.append(roc_auc_score(labels, proba(model)))
    curves[name] = (np.array(seconds), np.array(auc))
    print(f"{name:<24} " + "  ".join(f"{t} trees {s:.3f} s" for t, s in zip(TREES, seconds)))
print(
    pd.DataFrame({f"AUC, {name}": auc for name, (_, auc) in curves.items()}, index=TREES)
    .rename_axis("trees")
    .round(4)
)

# %%
# Accuracy and time against the number of trees
# ----------------------------------------------
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained", sharex=True)
# The same trees make the same AUC: LightGBM's curve is drawn dashed over ilargi's.
for (name, (seconds, auc)), color, style in zip(
    curves.items(),
    ("tab:blue", "tab:orange"),
    ({"marker": "o", "ms": 8}, {"marker": "x", "ls": "--"}),
):
    left.plot(TREES, auc, color=color, label=name, **style)
    right.plot(TREES, seconds, color=color, label=name, **style)
left.set(xlabel="trees", ylabel="held-out AUC", title="accuracy")
right.set(xlabel="trees", ylabel="wall time of the fit (s)", title="time, join included")
right.set_ylim(bottom=0)
right.set_xlim(left=0)
for ax in (left, right):
    ax.grid(True, alpha=0.3)
left.legend()
fig.suptitle(
    f"Boosted trees on fact ⋈ dim1 ⋈ dim2: {int((~held_out).sum()):,} training rows x "
    f"{len(features)} columns ({ilargi.get_num_threads()} threads)"
)
plt.show()
