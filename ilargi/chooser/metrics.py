"""How good a set of decisions is, given the measured times of both plans of each workload.

* accuracy: the fraction of workloads where the chosen plan is the faster one;
* tie-aware accuracy: the fraction where the chosen plan is within ``tie`` (default ``TIE``, 5 %) of the faster one
  (on a near-tie either choice costs almost nothing, and which one wins is timing noise);
* time saved: the fraction of the oracle's saving over always taking the slower plan,
  Σ (t_worst − t_chosen) / Σ (t_worst − t_best), sums over all workloads (1 = the oracle, 0 = always
  wrong); it ranks strategies by their total time, as any fixed baseline would;
* worst regret: max over workloads of t_chosen / t_best (1 = never worse than the best plan).
"""

import numpy as np

TIE = 0.05


def evaluate(t_fact, t_mat, factorize, tie=TIE):
    """How good some decisions are, given the measured times of both plans.

    Parameters
    ----------
    t_fact, t_mat : array-like of float
        Per workload, the time of the factorized and of the materialized plan.
    factorize : array-like of bool
        Per workload, the decision.
    tie : float, default=TIE
        A chosen plan within this share of the faster one counts as right in ``tie_accuracy``
        (the evaluation protocol of the frozen test set uses 0.10).

    Returns
    -------
    dict
        ``accuracy``, ``tie_accuracy``, ``time_saved``, ``worst_regret`` (see the module
        docstring) and ``total_seconds`` of the chosen plans.

    Examples
    --------
    >>> from ilargi.chooser.metrics import evaluate
    >>> scores = evaluate([1.0, 2.0], [2.0, 1.0], [True, True])
    >>> scores["accuracy"], scores["time_saved"], scores["worst_regret"]
    (0.5, 0.5, 2.0)
    """
    t_fact, t_mat = np.asarray(t_fact, float), np.asarray(t_mat, float)
    factorize = np.asarray(factorize, bool)
    chosen = np.where(factorize, t_fact, t_mat)
    best, worst = np.minimum(t_fact, t_mat), np.maximum(t_fact, t_mat)
    gain = float((worst - best).sum())
    return {
        "accuracy": float((factorize == (t_fact < t_mat)).mean()),
        "tie_accuracy": float((chosen <= (1 + tie) * best).mean()),
        "time_saved": float((worst - chosen).sum()) / gain if gain > 0 else 1.0,
        "worst_regret": float((chosen / best).max()),
        "total_seconds": float(chosen.sum()),
    }
