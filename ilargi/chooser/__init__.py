"""The plan chooser: factorized or materialized execution, decided by a learned cost model.

:func:`choose` computes features of (data, workload, device) from metadata and shapes alone
(:mod:`.features`; the workload of an operator or an estimator, :mod:`.workload`), predicts the
speed-up of factorizing with the *cost model* -- two LightGBM regressors trained on ilargi's own
timings (:mod:`.cost_model`) -- and falls back to the Morpheus rule outside the cost model's
training distribution (:mod:`.rules`). The timings come from the sweep of
:mod:`ilargi.calibration`, whose :func:`ilargi.calibrate` re-trains the cost model on the user's
machine.

Examples
--------
>>> import ilargi
>>> from ilargi.datasets import make_star
>>> nm, _ = make_star(1000, tuple_ratio=10, n_dims=2, target=None, random_state=0)
>>> plan = ilargi.choose(nm, "lmm", m=8)                 # an operator, the join amortized
>>> plan = ilargi.choose(nm, "crossprod", repeats=1)     # one-shot: the join is charged
>>> plan = ilargi.choose(nm, ilargi.LogisticRegression(max_iter=20))
>>> isinstance(plan.factorize, bool), isinstance(plan.reason, str)
(True, True)
"""

from .cost_model import Plan, choose

__all__ = ["Plan", "choose"]
