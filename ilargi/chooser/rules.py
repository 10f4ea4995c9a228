"""The baselines the chooser is measured against, and its fallback outside the training data.

* :func:`morpheus` -- factorize iff tuple ratio >= 5 and feature ratio >= 1 (Chen et al., "Towards
  linear algebra over normalized data", VLDB 2017), on the aggregate ratios of the features.
* :func:`flop_rule` -- factorize iff the materialized plan needs more than 1.5 times the FLOPs of the
  factorized one (join FLOPs charged to the ``repeats`` executions when given).
"""
MORPHEUS_TUPLE_RATIO = 5.0
MORPHEUS_FEATURE_RATIO = 1.0
FLOP_RATIO = 1.5


def morpheus(features, repeats=None):
    """Morpheus' rule of thumb: factorize iff tuple ratio >= 5 and feature ratio >= 1.

    Parameters
    ----------
    features : dict
        Features with ``tuple_ratio`` and ``feature_ratio``.
    repeats : int, optional
        Ignored: the rule ignores the operator and the number of executions.

    Returns
    -------
    bool
        Whether to factorize.

    Examples
    --------
    >>> from ilargi.chooser.rules import morpheus
    >>> morpheus({"tuple_ratio": 10.0, "feature_ratio": 2.0})
    True
    """
    return (features["tuple_ratio"] >= MORPHEUS_TUPLE_RATIO
            and features["feature_ratio"] >= MORPHEUS_FEATURE_RATIO)


def flop_rule(features, repeats=None):
    """Factorize iff the materialized plan needs over 1.5 times the FLOPs of the factorized one.

    Parameters
    ----------
    features : dict
        Features with the FLOP estimates (``flops_fact``, ``flops_mat``, ``flops_common``,
        ``join_flops``).
    repeats : int, optional
        Charge the join's FLOPs to this many executions (None: not charged).

    Returns
    -------
    bool
        Whether to factorize.
    """
    join = features["join_flops"] / repeats if repeats else 0.0
    materialized = features["flops_mat"] + features["flops_common"] + join
    return materialized > FLOP_RATIO * max(features["flops_fact"] + features["flops_common"], 1.0)


def morpheus_reason(features):
    """The Morpheus rule's decision in words, for :attr:`Plan.reason <ilargi.chooser.Plan>`.

    Parameters
    ----------
    features : dict
        Features with ``tuple_ratio`` and ``feature_ratio``.

    Returns
    -------
    str
        One line, the ratios compared with the thresholds.
    """
    return (f"Morpheus rule: tuple ratio {features['tuple_ratio']:.3g} "
            f"{'>=' if features['tuple_ratio'] >= MORPHEUS_TUPLE_RATIO else '<'} "
            f"{MORPHEUS_TUPLE_RATIO:g}, feature ratio {features['feature_ratio']:.3g} "
            f"{'>=' if features['feature_ratio'] >= MORPHEUS_FEATURE_RATIO else '<'} "
            f"{MORPHEUS_FEATURE_RATIO:g}")
