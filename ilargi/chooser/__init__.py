"""The chooser: a learned cost model that picks factorized or materialized execution.

:func:`choose` computes features of (data, workload, device) from metadata and shapes alone
(:mod:`.features`), predicts the speed-up of factorizing with LightGBM models trained on ilargi's own
measurements (:mod:`.model`, data from :mod:`.sweep`), and falls back to the Morpheus rule outside the
training distribution (:mod:`.rules`). :func:`calibrate` re-fits the models to the user's machine.

    >>> plan = ilargi.choose(nm, "lmm", m=8)                 # an operator, join amortized
    >>> plan = ilargi.choose(nm, "crossprod", repeats=1)     # one-shot: the join is charged
    >>> plan = ilargi.choose(nm, ilargi.LogisticRegression(max_iter=20))
    >>> plan.factorize, plan.speedup, plan.reason

``python -m ilargi.chooser sweep|train|calibrate`` runs the same steps from the shell.
"""
from .cost_model import Plan, choose

__all__ = ["Plan", "choose"]
