"""The chooser's analytic cost (its fallback outside the training data) and two baselines.

* :func:`analytic_seconds` -- the *analytic rule*: each plan's time from its first-order work
  (:func:`ilargi.chooser.features.workload_costs`) at this host's probed rates
  (:mod:`ilargi.chooser.host`); factorize iff the predicted speed-up exceeds 1
  (:func:`analytic`). It is what decides on a host or a workload outside the cost model's
  training range, and the base the learned model corrects. Per plan,

      t = passes · calls · call_us + FLOPs / gemm + bytes / bandwidth + gathered / gather

  with ``calls`` = :data:`CALLS_FIXED` + :data:`CALLS_PER_PART` × parts for the factorized plan
  and :data:`CALLS_FIXED` for the materialized one (an operator pass of the factorized plan is a
  few primitive calls per part), ``gathered`` the bytes read or written at random rows (charged
  on top of their streamed cost), and the work both plans do alike (``flops_common``: an
  estimator's vector arithmetic and solves) at one value read per operation; a factorized
  crossprod adds calls per pair of parts (:data:`CALLS_PER_PAIR`) and its blocks' sparse
  multiply-adds at :data:`CROSS_SPARSE_BYTES` byte-equivalents each. The join:
  :data:`CALLS_PER_PART` calls per part (and :data:`SPARSE_JOIN_CALLS` for a CSR table), its
  bytes streamed and its entries gathered.
* :func:`morpheus` -- factorize iff tuple ratio >= 5 and feature ratio >= 1 (Chen et al., "Towards
  linear algebra over normalized data", VLDB 2017), on the aggregate ratios of the features.
* :func:`flop_rule` -- factorize iff the materialized plan needs more than 1.5 times the FLOPs of the
  factorized one (join FLOPs charged to the ``repeats`` executions when given).
"""

import math

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
    return (
        features["tuple_ratio"] >= MORPHEUS_TUPLE_RATIO
        and features["feature_ratio"] >= MORPHEUS_FEATURE_RATIO
    )


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
    return (
        f"Morpheus rule: tuple ratio {features['tuple_ratio']:.3g} "
        f"{'>=' if features['tuple_ratio'] >= MORPHEUS_TUPLE_RATIO else '<'} "
        f"{MORPHEUS_TUPLE_RATIO:g}, feature ratio {features['feature_ratio']:.3g} "
        f"{'>=' if features['feature_ratio'] >= MORPHEUS_FEATURE_RATIO else '<'} "
        f"{MORPHEUS_FEATURE_RATIO:g}"
    )


# Primitive calls (NumPy, BLAS, a compiled kernel's launch) of one operator pass: the
# materialized plan's few, and the factorized plan's few more per part.
CALLS_FIXED = 10.0
CALLS_PER_PART = 20.0
# A factorized crossprod's calls beyond those: its setup and, per pair of parts, a cross block
# (the co-occurrence pattern, a product on each side, the block's accumulation), costlier where
# the sources are sparse (SciPy's constructors, the sparse result's assembly). Fitted to tiny
# stars (300 and 3,000 rows, 2 to 5 parts, dense and sparse, 1 and 2 threads), where nothing but
# calls costs: a 400-row table's crossprod runs in a tenth of the factorized one's time.
CROSSPROD_CALLS = 160.0
CALLS_PER_PAIR = 65.0
CALLS_PER_SPARSE_PAIR = 165.0
# Byte-equivalents of one multiply-add of the factorized crossprod's blocks with a sparse side
# (``sparse_work_fact``): compiled gathers and sums into a block, far cheaper than the SpGEMM
# multiply-add the materialized CSR crossprod pays (:data:`ilargi.chooser.features.SPGEMM_BYTES`).
# Chosen on the selection set: of the prices benchmarks/chooser_selection/holdout.py tried (50 and
# SpGEMM's 200), the one whose hybrid decided the held-out real workloads best; cross_bytes.py
# scores the rule alone on them.
CROSS_SPARSE_BYTES = 50.0
# The workloads that run one factorized crossprod.
WITH_CROSSPROD = ("crossprod", "linreg_cholesky")
# Building a CSR table: its fixed calls (each source as CSR, the row lengths, the offsets),
# fitted on the same stars.
SPARSE_JOIN_CALLS = 150.0


# What the rule reads of a workload's features (sweeps of old formats may lack the counts).
INPUTS = (
    "flops_fact",
    "bytes_fact",
    "gather_fact",
    "sparse_work_fact",
    "flops_mat",
    "bytes_mat",
    "gather_mat",
    "flops_common",
    "join_bytes",
    "join_gather",
    "passes",
    "n_parts",
    "bandwidth_gbs",
    "gemm_gflops",
    "gather_gbs",
    "call_us",
)


def constants():
    """The analytic rule's constants, as recorded with a cost model built on it.

    Returns
    -------
    dict
        Name -> value.
    """
    return {
        "calls_fixed": CALLS_FIXED,
        "calls_per_part": CALLS_PER_PART,
        "crossprod_calls": CROSSPROD_CALLS,
        "calls_per_pair": CALLS_PER_PAIR,
        "calls_per_sparse_pair": CALLS_PER_SPARSE_PAIR,
        "sparse_join_calls": SPARSE_JOIN_CALLS,
        "cross_sparse_bytes": CROSS_SPARSE_BYTES,
    }


def _crossprod_calls(features, parts):
    """Calls of a factorized crossprod beyond an operator pass's (none for other workloads)."""
    if features.get("workload") not in WITH_CROSSPROD:
        return 0.0
    pairs = parts * (parts - 1) / 2
    sparse = features.get("sparse_frac", 0.0)
    return CROSSPROD_CALLS + pairs * (CALLS_PER_PAIR + CALLS_PER_SPARSE_PAIR * sparse)


def analytic_seconds(features):
    """Predicted seconds of both plans and of the join, from the work counts and the host's rates.

    Parameters
    ----------
    features : dict
        Features with the work counts of :class:`ilargi.chooser.features.Work`, ``n_parts``,
        ``itemsize`` and the probed rates ``bandwidth_gbs``, ``gemm_gflops``, ``gather_gbs``,
        ``call_us``.

    Returns
    -------
    (float, float, float)
        Seconds of the factorized plan, the materialized plan (join excluded) and the join.

    Examples
    --------
    >>> from ilargi.chooser.rules import analytic_seconds
    >>> host = {"bandwidth_gbs": 10.0, "gemm_gflops": 50.0, "gather_gbs": 2.0, "call_us": 1.0}
    >>> work = {"flops_fact": 2e6, "bytes_fact": 1e7, "gather_fact": 4e6, "flops_mat": 2e7,
    ...         "bytes_mat": 8e7, "gather_mat": 0.0, "flops_common": 0.0, "join_bytes": 1.6e8,
    ...         "join_gather": 8e7, "passes": 1, "n_parts": 3}
    >>> [round(t * 1e3, 2) for t in analytic_seconds({**work, **host})]
    [3.11, 8.41, 56.06]
    """
    bandwidth = features["bandwidth_gbs"] * 1e9
    gemm, gather = features["gemm_gflops"] * 1e9, features["gather_gbs"] * 1e9
    call = features["call_us"] * 1e-6
    parts, passes = features["n_parts"], features["passes"]
    common = features["flops_common"] * 8 / bandwidth

    def seconds(flops, moved, gathered, calls):
        return passes * calls * call + flops / gemm + moved / bandwidth + gathered / gather + common

    fact = (
        seconds(
            features["flops_fact"],
            features["bytes_fact"],
            features["gather_fact"],
            CALLS_FIXED + CALLS_PER_PART * parts,
        )
        + _crossprod_calls(features, parts) * call
        + CROSS_SPARSE_BYTES * features.get("sparse_work_fact", 0.0) / bandwidth
    )
    mat = seconds(features["flops_mat"], features["bytes_mat"], features["gather_mat"], CALLS_FIXED)
    join_calls = parts * CALLS_PER_PART + (SPARSE_JOIN_CALLS if features.get("mat_sparse") else 0)
    join = join_calls * call + features["join_bytes"] / bandwidth + features["join_gather"] / gather
    return fact, mat, join


def analytic_features(features):
    """The analytic rule's predictions, as features (the learned model's base and inputs).

    Parameters
    ----------
    features : dict
        As :func:`analytic_seconds` takes them.

    Returns
    -------
    dict
        ``analytic_fact_s``, ``analytic_mat_s``, ``analytic_join_s`` (seconds),
        ``analytic_log_speedup`` = log(t_mat / t_fact) and ``analytic_log_join`` =
        log(t_join / t_fact).
    """
    fact, mat, join = (max(t, 1e-12) for t in analytic_seconds(features))
    return {
        "analytic_fact_s": fact,
        "analytic_mat_s": mat,
        "analytic_join_s": join,
        "analytic_log_speedup": math.log(mat / fact),
        "analytic_log_join": math.log(join / fact),
    }


def analytic_speedup(features, repeats=None):
    """The analytic rule's predicted speed-up of factorizing, the join charged to ``repeats``.

    Parameters
    ----------
    features : dict
        Features with the ``analytic_*`` predictions (:func:`analytic_features`).
    repeats : int, optional
        Executions the join is charged to (None: amortized, not charged).

    Returns
    -------
    float
        exp(log_speedup) + exp(log_join) / repeats.
    """
    join = math.exp(features["analytic_log_join"]) / repeats if repeats else 0.0
    return math.exp(features["analytic_log_speedup"]) + join


def analytic(features, repeats=None):
    """The analytic rule: factorize iff its predicted speed-up exceeds 1.

    Parameters
    ----------
    features : dict
        Features with the ``analytic_*`` predictions (:func:`analytic_features`).
    repeats : int, optional
        Executions the join is charged to (None: not charged).

    Returns
    -------
    bool
        Whether to factorize.
    """
    return analytic_speedup(features, repeats) > 1.0


def analytic_reason(features, repeats=None):
    """The analytic rule's decision in words, for :attr:`Plan.reason <ilargi.chooser.Plan>`.

    Parameters
    ----------
    features : dict
        Features with the ``analytic_*`` predictions.
    repeats : int, optional
        Executions the join is charged to.

    Returns
    -------
    str
        One line: both plans' predicted times and the speed-up.
    """
    speedup = analytic_speedup(features, repeats)
    join = f", join {_ms(features['analytic_join_s'])} charged to {repeats}" if repeats else ""
    return (
        f"analytic cost at this host's probed rates: factorized "
        f"{_ms(features['analytic_fact_s'])}, materialized "
        f"{_ms(features['analytic_mat_s'])}{join}: predicted speed-up {speedup:.2f}x "
        f"{'>' if speedup > 1.0 else '<='} 1"
    )


def _ms(seconds):
    return f"{seconds * 1e3:.3g} ms"
