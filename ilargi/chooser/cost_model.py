"""The cost model: LightGBM regressors, their training, loading and the decision.

Targets, per workload, from the sweep's median times (seconds):

* ``op``:   log(t_mat / t_fact), the join excluded (the materialized table is built once and reused);
* ``join``: log(t_join / t_fact), the join against one execution of the factorized plan.

For ``repeats = k`` executions the predicted speed-up of factorizing is

    speedup = exp(op) + exp(join) / k        (k = None: the join is amortized, speedup = exp(op))

since k·t_mat + t_join over k·t_fact is exactly that. Decision: factorize iff log(speedup) > margin
(:data:`MARGIN`, 0: the cross-validated time saved at other margins is recorded in the JSON).

Operator calls and iterative estimator fits (the two *families*) get a pair of regressors each
when the training data hold at least :data:`FAMILY_ROWS` rows of each: a fit's speed-up includes
its link pass and its solver's vector work, which no operator call shows, and one regressor for
both over-predicted the large Hamlet fits by up to 2× (``benchmarks/RESULTS.md``). A smaller sweep (a
quick calibration) trains one pair for both.

The cost model is a *hybrid*: the analytic rule (:func:`ilargi.chooser.rules.analytic_seconds`,
each plan's work at this host's probed rates, :mod:`ilargi.chooser.host`) predicts both
log-ratios, and the regressors predict its error, with the host's probed properties (cores,
threads, bandwidth, GEMM and gather rates, call overhead) among their features. The JSON says so
(``"hybrid": true``); a cost model trained before (its regressors predicting the log-ratios
themselves, a host told apart by its last-level cache) is still read.

Outside its training distribution the cost model is not trusted and the analytic rule decides,
saying why in the Plan: when a device feature of this host lies outside the range of the
training rows' (:data:`DEVICE_CHECKED`; the rates widened by :data:`DEVICE_SLACK` on each side,
the core and thread counts not widened), or the workload does. The workload's check is explicit: the workload kind must occur in the training data, and each feature of
:data:`CHECKED` (log10) must lie within the range the training rows of the same family (operator
calls and direct solves, or iterative fits) span, widened by :data:`SLACK` decades on each side. ``iterations`` is not
checked: past a few iterations the per-iteration costs dominate, and a tree ensemble extrapolates
flat, as amortization does.

Cost-model files per device (``cpu``, ``gpu``): ``chooser_<device>.txt`` (op),
``chooser_<device>_join.txt`` (join), both LightGBM text format -- of the operators, and of the fits
too unless ``chooser_<device>_model.txt`` and ``chooser_<device>_model_join.txt`` exist and the JSON
names the ``model`` family among its ``families`` -- and ``chooser_<device>.json`` (columns,
families, ranges, margin, cross-validated metrics). They are looked up in the user folder first
(the ``chooser_dir`` setting of :func:`ilargi.get_config`, ``$ILARGI_CHOOSER_DIR`` by default, else
``~/.cache/ilargi/chooser``; written by :func:`ilargi.calibrate`),
then among the cost models shipped with the package (``ilargi.shipped``, the top-level
``estimators/`` folder), loaded once and cached.

Sweep CSVs may be xz-compressed (``.csv.xz``; the shipped sweeps are): pandas reads them as they
are, and the sweep writes one when its output's name ends with ``.xz``.
"""

import json
import lzma
import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from ilargi._config import get_config

from . import memory, rules
from .features import CATEGORICAL, RESIDENT_BYTES, extract, vector
from .metrics import evaluate
from .workload import MODELS, WIDE_OPERATORS, workload_of

CHECKED = (
    "n",
    "d",
    "stored",
    "nnz_t",
    "tuple_ratio",
    "feature_ratio",
    "redundancy",
    "density_t",
    "m",
)
SLACK = math.log10(2.0)
# The host's features checked against the training rows' (log10): the counts exactly, the rates
# widened by a factor of 2 -- more than the probe's run-to-run range on one host (widest for the
# bandwidth at several threads on a shared machine).
DEVICE_CHECKED = ("cores", "threads", "bandwidth_gbs", "gemm_gflops", "gather_gbs", "call_us")
DEVICE_COUNTS = ("cores", "threads")
DEVICE_SLACK = math.log10(2.0)
# Features a hybrid cost model does not read: a host's mark (its last-level cache: the probed
# rates describe the host), and the estimates at fixed rates the analytic ones replace.
NOT_FEATURES = ("llc_mib", "seconds_fact", "seconds_mat", "time_ratio", "join_time_ratio")
TINY = 1e-12
# The decision margin on the predicted log speed-up: 0, the unbiased choice. Cross-validation on
# the synthetic sweep reports the time saved at other margins too (for information: the held-out
# real data, not the sweep, is what a margin would have to be right for).
MARGIN = 0.0
MARGINS = (-0.2, -0.1, 0.0, 0.1, 0.2, 0.3)
# The share of the regressors' correction a hybrid adds to the analytic rule: 1, all of it. The
# sweeps are synthetic; where real data (the selection set) say the correction carries over only
# in part, a model is trained with less (``train(correction=...)``, recorded in its JSON).
CORRECTION = 1.0
LGB_PARAMS = {
    "objective": "regression",
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 10,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "verbose": -1,
    "num_threads": 1,
    "deterministic": True,
    "force_row_wise": True,
    "seed": 0,
}
ROUNDS = 400
# Rows of each family (operators, fits) from which each gets regressors of its own.
FAMILY_ROWS = 500

# The training CSV's columns besides the features (written by ilargi.calibration.sweep): the
# scenario's parameters, and the measurements.
META = (
    "scenario",
    "style",
    "join",
    "snowflake",
    "hetero",
    "n_fact_param",
    "tuple_ratio_param",
    "feature_ratio_param",
    "density_param",
    "dangling",
)
TIMES = ("t_fact", "t_mat", "t_join", "repeats")
# What read_sweeps adds: the CSV a row came from (its index) and its scenario's cross-validation group.
ADDED = ("source", "group")
# A scenario is its draw, not its row in one CSV: the same seed timed on two hosts is one group, so
# cross-validation never trains on one host's timing of the scenario it scores on the other's.
DRAW = META + ("n", "d", "stored")


@dataclass(frozen=True)
class Plan:
    """The plan chooser's decision, as :func:`choose` returns it.

    Parameters
    ----------
    factorize : bool
        Run factorized (else materialize the join).
    speedup : float
        Predicted t_materialized / t_factorized, the join charged as asked (by the analytic rule
        when it decided); NaN when no prediction exists (a transposed matrix's crossprod).
    features : dict
        The features the decision saw.
    reason : str
        One line: the cost model's prediction, or why a rule decided.
    """

    factorize: bool
    speedup: float
    features: dict = field(repr=False)
    reason: str


def user_folder():
    """The folder :func:`ilargi.calibrate` writes to, where cost models are looked up first.

    Returns
    -------
    pathlib.Path
        The ``chooser_dir`` setting (:func:`ilargi.get_config`, ``$ILARGI_CHOOSER_DIR`` by
        default), or ``~/.cache/ilargi/chooser``.
    """
    folder = get_config()["chooser_dir"]
    return folder if folder is not None else Path.home() / ".cache" / "ilargi" / "chooser"


@lru_cache(maxsize=None)
def shipped_folder():
    """The cost models installed with the package (``ilargi.shipped``), or ``estimators/`` of a
    checkout.

    Returns
    -------
    pathlib.Path
        The folder.
    """
    spec = find_spec("ilargi.shipped")  # a data folder without __init__.py: a namespace package
    if spec is None or not spec.submodule_search_locations:  # a source tree, not installed
        return Path(__file__).resolve().parents[2] / "estimators"
    return Path(next(iter(spec.submodule_search_locations)))


def _paths(folder, device, family="operator"):
    """(JSON, op regressor, join regressor) files of a family's cost model in a folder."""
    stem = Path(folder) / f"chooser_{device}"
    tail = "_model" if family == "model" else ""
    return stem.with_suffix(".json"), Path(f"{stem}{tail}.txt"), Path(f"{stem}{tail}_join.txt")


def _log10(value):
    return math.log10(max(float(value), TINY))


def _family(kind):
    """ "model" for an iterative fit; "operator" for an operator call, and for a direct solve
    (linreg_cholesky: one pass of crossprod, colsums and tmm, then a d × d solve, no iterations,
    link or solver loop), which the operators' regressors predict better (RMSE 0.39 against
    0.40 cross-validated; TPC-H 2.5× against 1.0×, measured 3.4×)."""
    return "model" if kind in MODELS and kind != "linreg_cholesky" else "operator"


class _CostModel:
    """Two boosters and their metadata, loaded from one folder."""

    def __init__(self, folder, device):
        import lightgbm as lgb

        self.folder = Path(folder)
        self.meta = json.loads(_paths(folder, device)[0].read_text())
        self.regressors = {}
        for family in self.meta.get("families", ["operator"]):
            _, op_path, join_path = _paths(folder, device, family)
            self.regressors[family] = (
                lgb.Booster(model_file=str(op_path)),
                lgb.Booster(model_file=str(join_path)),
            )
        self.columns = self.meta["columns"]
        self.margin = float(self.meta["margin"])
        self.hybrid = bool(self.meta.get("hybrid", False))
        self.correction = float(self.meta.get("correction", CORRECTION))
        self._device_ranges = self.meta.get("device_ranges")

    @property
    def device_ranges(self):
        """{device feature: [low, high] (log10)} of the training rows; for a cost model of
        before the probe, the core and thread counts of the sweeps it names, read from its
        folder (none where they are not there)."""
        if self._device_ranges is None:
            self._device_ranges = _legacy_device_ranges(self.folder, self.meta)
        return self._device_ranges

    def host_outside(self, features):
        """Why this host falls outside the training rows' hosts, or None."""
        for name, (low, high) in self.device_ranges.items():
            slack = 0.0 if name in DEVICE_COUNTS else DEVICE_SLACK
            value = _log10(features[name])
            if not low - slack <= value <= high + slack:
                side = ">" if value > high else "<"
                bound = 10 ** (high if value > high else low)
                return (
                    f"host outside the training range ({name} = {features[name]:.4g} {side} "
                    f"{bound:.4g}{'' if slack == 0 else ' by over 2x'})"
                )
        return None

    def outside(self, features):
        """Why ``features`` fall outside the training distribution (the host's, then the
        workload's), or None."""
        why = self.host_outside(features)
        if why:
            return why
        kind = features["workload"]
        if kind not in self.meta["kinds"]:
            return f"no {kind} workloads in the training data"
        ranges = self.meta["ranges"][_family(kind)]
        for name in CHECKED:
            if name == "m" and kind not in WIDE_OPERATORS:
                continue
            low, high = ranges[name]
            value = _log10(features[name])
            if not low - SLACK <= value <= high + SLACK:
                return (
                    f"{name} = {features[name]:.3g} is outside the training range "
                    f"[{10**low:.3g}, {10**high:.3g}]"
                )
        return None

    def predict(self, features):
        """(log speed-up without the join, log of join time over factorized time)."""
        row = np.array([vector(features, self.columns)])
        family = _family(features["workload"])
        op, join = self.regressors.get(family, self.regressors["operator"])
        log_op = float(op.predict(row, num_threads=1)[0])
        log_join = float(join.predict(row, num_threads=1)[0])
        if self.hybrid:  # the regressors predict the analytic rule's error
            log_op = features["analytic_log_speedup"] + self.correction * log_op
            log_join = features["analytic_log_join"] + self.correction * log_join
        return log_op, log_join


def _legacy_device_ranges(folder, meta):
    """The core and thread counts (log10 ranges) of the sweeps a cost model of before the probe
    was trained on, where they are in its folder."""
    import pandas as pd

    names = list(meta.get("sweeps", [])) + list(meta.get("fits_only_sweeps", []))
    paths = [_sweep_file(folder, name) for name in names]
    if not paths or not all(path.is_file() for path in paths):
        return {}
    frames = [pd.read_csv(path, usecols=["device", *DEVICE_COUNTS]) for path in paths]
    rows = pd.concat(frames)
    rows = rows[rows["device"] == meta.get("device", "cpu")]
    return {
        name: [_log10(rows[name].min()), _log10(rows[name].max())]
        for name in DEVICE_COUNTS
        if len(rows)
    }


def _sweep_file(folder, name):
    """A sweep a cost model's JSON names (``"sweeps"``), in its folder: the CSV as named, or where
    that is absent, the same CSV xz-compressed beside it (``<name>.xz``, as the shipped sweeps are
    stored).

    Parameters
    ----------
    folder : path-like
        The cost model's folder.
    name : str
        The file name as the JSON records it.

    Returns
    -------
    pathlib.Path
        The file to read (``name`` itself when neither exists).
    """
    path = Path(folder) / name
    compressed = path.with_name(path.name + ".xz")
    return compressed if not path.is_file() and compressed.is_file() else path


_CACHE: dict = {}


def clear_cache():
    """Forget the loaded cost models (after writing new cost-model files)."""
    _CACHE.clear()


def load(device="cpu"):
    """The cost model for a device: the user folder's if it has one, else the shipped one.

    Parameters
    ----------
    device : {"cpu", "gpu"}, default="cpu"
        The device the cost model was trained for.

    Returns
    -------
    object or None
        The loaded cost model (its ``folder`` says where from; ``predict(features)`` gives the
        two log-ratios), cached; None when neither folder has one.
    """
    for folder in (user_folder(), shipped_folder()):
        key = (str(folder), device)
        cost_model = _CACHE.get(key)
        if cost_model is not None:
            return cost_model
        if _paths(folder, device)[0].is_file():
            cost_model = _CACHE[key] = _CostModel(folder, device)
            return cost_model
    return None


# Operators on Tᵀ as operators on T (the base); the others have no factorized form on T itself.
_TRANSPOSED = {"lmm": "tmm", "rmm": "lmm", "tmm": "lmm", "rowsums": "colsums", "colsums": "rowsums"}


def choose(nm, op_or_model, *, m=None, repeats=None, device=None):
    """Decide between factorized and materialized execution of an operator or a fit.

    Features come from metadata and shapes only (O(n) statistics are built once per indicator and
    cached) and from this host's probed rates (:mod:`ilargi.chooser.host`: measured once per
    machine and thread count, in well under a second, then read from a cache), so a call is
    cheap after the first; the cost model predicts the speed-up, or the analytic rule decides
    for a host or a workload outside its training distribution, and the reason says which.

    Parameters
    ----------
    nm : NormalizedMatrix
        The data.
    op_or_model : str or estimator
        An operator name ("lmm" T·X, "rmm" X·T, "tmm" Tᵀ·Y, "rowsums", "colsums", "crossprod",
        "gramvec") or an estimator instance (LinearRegression, Ridge, LogisticRegression, KMeans,
        GNMF: its parameters describe the work; a bad parameter raises as ``fit`` would). An
        estimator with a rule of its own (the gradient-boosted trees: LightGBM on the table where
        it fits in memory) decides by that rule, whatever its ``plan``; ``m``, ``repeats`` and
        ``device`` do not enter it.
    m : int, optional
        Columns of X (lmm: d × m), rows of X (rmm: m × n) or columns of Y (tmm: n × m);
        default 1.
    repeats : int, optional
        None: the materialized table, if chosen, is built once and reused, so the join is not
        charged. k: the join is charged to k executions (1: a one-shot call).
    device : {"cpu", "gpu"}, optional
        The device to decide for; default: where nm's sources live.

    Returns
    -------
    Plan
        The decision, the predicted speed-up and the reason. A materialized plan is only chosen
        when the table it builds (dense or CSR, as ``materialize()`` builds it) fits in the
        available memory (:mod:`ilargi.chooser.memory`); otherwise the plan is factorized and
        the reason says why, with both sizes.

    Raises
    ------
    TypeError
        If ``nm`` is not a NormalizedMatrix, or ``op_or_model`` describes no workload.
    ValueError
        For a bad ``repeats``, ``device``, operator or ``m``.

    Examples
    --------
    >>> import ilargi
    >>> from ilargi.datasets import make_star
    >>> nm, _ = make_star(1000, tuple_ratio=10, target=None, random_state=0)
    >>> plan = ilargi.choose(nm, "crossprod", repeats=1)
    >>> isinstance(plan, ilargi.Plan), isinstance(plan.factorize, bool)
    (True, True)
    """
    if not (hasattr(nm, "parts") and hasattr(nm, "materialize")):
        raise TypeError(f"choose() needs a NormalizedMatrix, got {type(nm).__name__}")
    if repeats is not None and (
        isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1
    ):
        raise ValueError(f"repeats must be None or a positive integer, got {repeats!r}")
    device = device or nm.device
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    own_rule = getattr(op_or_model, "_plan_decision", None)
    if own_rule is not None:
        factorize, reason = own_rule(nm)
        return Plan(factorize, float("nan"), {}, reason)
    unsupported = None
    if nm.transposed:  # decide on T for the equivalent operator
        nm = nm.T
        if isinstance(op_or_model, str) and op_or_model.lower() in _TRANSPOSED:
            op_or_model = _TRANSPOSED[op_or_model.lower()]
        else:
            unsupported = "no cost model for this workload on a transposed matrix"
    workload = workload_of(op_or_model, nm.shape, m)
    features = extract(nm, workload, device)
    if unsupported:  # neither model knows this work: Morpheus' ratios are all there is
        return _memory_guard(
            nm,
            device,
            Plan(
                rules.morpheus(features),
                float("nan"),
                features,
                f"{unsupported}; {rules.morpheus_reason(features)}",
            ),
        )
    cost_model = load(device)
    why_not = (
        f"no trained cost model for device {device}"
        if cost_model is None
        else cost_model.outside(features)
    )
    if why_not:
        return _memory_guard(
            nm,
            device,
            Plan(
                rules.analytic(features, repeats),
                rules.analytic_speedup(features, repeats),
                features,
                f"{why_not}: {rules.analytic_reason(features, repeats)}",
            ),
        )
    log_op, log_join = cost_model.predict(features)
    speedup = math.exp(log_op) + (math.exp(log_join) / repeats if repeats else 0.0)
    factorize = math.log(speedup) > cost_model.margin
    charged = (
        f"join charged to {repeats} run{'s' if repeats > 1 else ''}"
        if repeats
        else "join amortized"
    )
    return _memory_guard(
        nm,
        device,
        Plan(
            factorize,
            speedup,
            features,
            f"cost model ({cost_model.folder}): predicted speed-up {speedup:.2f}x "
            f"{'>' if factorize else '<='} {math.exp(cost_model.margin):.2f} for {workload.kind}"
            f"{f' m={workload.m}' if workload.m > 1 else ''} ({charged})",
        ),
    )


def _memory_guard(nm, device, plan):
    """``plan``, unless it materializes a table that does not fit: then factorized, saying why.

    A materialized plan that fits says so too, with the table's size."""
    if plan.factorize:
        return plan
    fits, why = memory.fits(nm, device)
    if fits:
        return Plan(False, plan.speedup, plan.features, f"{plan.reason}; {why}")
    return Plan(
        True,
        plan.speedup,
        plan.features,
        f"factorized: {why} (the decision was materialized: {plan.reason})",
    )


# ---------------------------------------------------------------------------------------------
# Training.


def _design(frame, columns):
    """The feature matrix of a sweep frame, categorical columns as their codes."""
    X = frame[columns].copy()
    for name, values in CATEGORICAL.items():
        if name in X:
            X[name] = X[name].map({v: float(i) for i, v in enumerate(values)})
    return X.to_numpy(dtype=float)


def _fit(X, y, columns, rounds=ROUNDS, weight=None):
    import lightgbm as lgb

    categorical = [i for i, c in enumerate(columns) if c in CATEGORICAL]
    data = lgb.Dataset(
        X,
        y,
        weight=weight,
        feature_name=list(columns),
        categorical_feature=categorical,
        free_raw_data=False,
    )
    return lgb.train(LGB_PARAMS, data, num_boost_round=rounds)


def _decisions(log_op, log_join, margin, repeats=None):
    speedup = np.exp(log_op) + (np.exp(log_join) / repeats if repeats else 0.0)
    return np.log(speedup) > margin


def _families(frame):
    """{family: its rows (a mask)}: operators and fits apart when each has FAMILY_ROWS rows, else
    one family, "operator", for all."""
    family = frame["workload"].map(_family).to_numpy()
    masks = {name: family == name for name in ("operator", "model")}
    if min(int(mask.sum()) for mask in masks.values()) >= FAMILY_ROWS:
        return masks
    return {"operator": np.ones(len(frame), bool)}


def _cross_validate(frame, X, y_op, y_join, columns, folds=5, weight=None):
    """Held-out predictions of both targets (grouped by scenario, so no scenario leaks), each
    family's by its own regressors."""
    from sklearn.model_selection import GroupKFold

    pred_op, pred_join = np.empty(len(frame)), np.empty(len(frame))
    families = _families(frame).values()
    for train_idx, test_idx in GroupKFold(n_splits=folds).split(X, groups=frame["group"]):
        for mask in families:
            fit_rows, held_out = train_idx[mask[train_idx]], test_idx[mask[test_idx]]
            w = None if weight is None else weight[fit_rows]
            for y, pred in ((y_op, pred_op), (y_join, pred_join)):
                pred[held_out] = _fit(X[fit_rows], y[fit_rows], columns, weight=w).predict(
                    X[held_out]
                )
    return pred_op, pred_join


def _with_rule(frame):
    """The sweep rows with the analytic rule's predictions recomputed from their work counts and
    probe: a change of the rule's constants then needs no re-featurized sweeps (rows of a format
    without the counts keep the predictions they were written with)."""
    import pandas as pd

    if not set(rules.INPUTS) <= set(frame.columns):
        return frame

    predicted = pd.DataFrame(
        [rules.analytic_features(row) for row in frame.to_dict("records")], index=frame.index
    )
    return frame.assign(**{column: predicted[column] for column in predicted.columns})


def _analytic_base(frame):
    """The analytic rule's (log speed-up, log join ratio) of every row: the hybrid's base."""
    return frame["analytic_log_speedup"].to_numpy(float), frame["analytic_log_join"].to_numpy(float)


def _device_ranges(frame):
    """{device feature: [low, high] (log10)} of the training rows."""
    return {
        name: [
            float(np.log10(max(frame[name].min(), TINY))),
            float(np.log10(max(frame[name].max(), TINY))),
        ]
        for name in DEVICE_CHECKED
    }


def _report(frame, pred_op, pred_join, y_op, margin):
    """Cross-validated metrics of the chooser and the baselines, iterative and one-shot."""
    records = frame.to_dict("records")
    t_fact, t_mat = frame["t_fact"].to_numpy(), frame["t_mat"].to_numpy()
    once = t_mat + frame["t_join"].to_numpy()
    report = {"rmse_log_speedup": float(np.sqrt(np.mean((pred_op - y_op) ** 2)))}
    for case, materialized, repeats in (("iterative", t_mat, None), ("one_shot", once, 1)):
        strategies = {
            "chooser": _decisions(pred_op, pred_join, margin, repeats),
            "analytic": np.array([rules.analytic(r, repeats) for r in records]),
            "morpheus": np.array([rules.morpheus(r, repeats) for r in records]),
            "flop_rule": np.array([rules.flop_rule(r, repeats) for r in records]),
            "always_factorize": np.ones(len(frame), bool),
            "always_materialize": np.zeros(len(frame), bool),
        }
        report[case] = {
            name: evaluate(t_fact, materialized, decided) for name, decided in strategies.items()
        }
    return report


def _ranges(frame):
    ranges = {}
    for family in ("operator", "model"):
        rows = frame[frame["workload"].map(_family) == family]
        if len(rows) == 0:
            continue
        ranges[family] = {}
        for name in CHECKED:
            values = np.log10(np.maximum(rows[name].to_numpy(dtype=float), TINY))
            if name == "m":
                wide = rows["workload"].isin(WIDE_OPERATORS).to_numpy()
                values = values[wide] if wide.any() else values
            ranges[family][name] = [float(values.min()), float(values.max())]
    return ranges


def read_sweeps(csvs, device="cpu"):
    """The training rows of sweep CSVs for one device.

    Parameters
    ----------
    csvs : list of path-like
        CSVs written by :func:`ilargi.calibration.sweep.sweep` (plain, or xz-compressed:
        ``.csv.xz``).
    device : {"cpu", "gpu"}, default="cpu"
        Keep this device's rows.

    Returns
    -------
    pandas.DataFrame
        Rows with positive times, plus ``source`` (the index of the row's CSV) and ``group`` (its
        scenario's draw: the same in every CSV that timed that scenario, on any host).

    Raises
    ------
    FileNotFoundError
        If a CSV is missing.
    ValueError
        If a CSV is not a sweep CSV (unreadable, missing columns, non-numeric measurements or
        features, other columns than the first CSV) -- the message names the file and the
        columns -- or no row is left.
    """
    import pandas as pd

    frames, first = [], None
    for i, path in enumerate(csvs):
        frame = _read_sweep(Path(path))
        first = set(frame.columns) if first is None else first
        if set(frame.columns) != first:
            differ = sorted(map(str, set(frame.columns) ^ first))
            raise ValueError(
                f"{path}: its columns differ from {csvs[0]}'s ({differ}); train on sweeps "
                "written by one version of the sweep"
            )
        frame["source"] = i
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    frame["group"] = frame[list(DRAW)].astype(str).agg("|".join, axis=1)
    frame = frame[
        (frame["device"] == device)
        & (frame["t_fact"] > 0)
        & (frame["t_mat"] > 0)
        & (frame["t_join"] > 0)
    ]
    if len(frame) == 0:
        raise ValueError(f"no {device} rows with positive times in {list(map(str, csvs))}")
    return frame.reset_index(drop=True)


# What train() reads from a sweep CSV besides the features: the scenario, the device and
# workload (categorical features), the times; the checked features define the trusted ranges,
# the probed device features the hosts', and the analytic rule's predictions are the base.
REQUIRED = ("scenario", "device", "workload", "t_fact", "t_mat", "t_join", *CHECKED)
HYBRID_REQUIRED = (*DEVICE_CHECKED, "analytic_log_speedup", "analytic_log_join")


def _read_sweep(path):
    """One sweep CSV (or ``.csv.xz``), checked: readable, the required columns, numbers where
    numbers belong."""
    import pandas as pd

    if not path.is_file():
        raise FileNotFoundError(f"sweep CSV {path} does not exist")
    try:
        frame = pd.read_csv(path)
    except (
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
        UnicodeDecodeError,
        lzma.LZMAError,
        EOFError,
    ) as error:
        raise ValueError(f"{path} is not a sweep CSV: {str(error).strip()}") from None
    missing = [column for column in REQUIRED if column not in frame.columns]
    if missing:
        raise ValueError(
            f"{path} is not a sweep CSV: missing columns {missing} (write one with "
            "'python -m ilargi.calibration sweep')"
        )
    numeric = [c for c in frame.columns if c not in META and c not in CATEGORICAL]
    wrong = [c for c in numeric if not pd.api.types.is_numeric_dtype(frame[c])]
    if wrong:
        raise ValueError(f"{path}: columns {wrong} must hold numbers")
    return frame


def training_data(csvs, device="cpu", fits_only=(), selection=(), selection_weight=1.0):
    """What the regressors of :func:`train` learn from: (frame of the rows, feature columns,
    design matrix, (log t_mat / t_fact, log t_join / t_fact), the analytic rule's predictions of
    both, each row's weight), the rule recomputed from each row's work counts and probe; the rows
    of ``selection`` weigh ``selection_weight``, the others 1."""
    paths = [Path(c) for c in list(csvs) + list(fits_only) + list(selection)]
    frame = read_sweeps(paths, device)
    unprobed = [column for column in HYBRID_REQUIRED if column not in frame.columns]
    if unprobed:
        raise ValueError(
            f"{paths[0]}: no probe of the host that timed it (missing {unprobed}); "
            "on that host, 'python -m ilargi.calibration refeaturize --probe-host' "
            "adds it; a sweep of a host that cannot be probed any more cannot "
            "train the host-aware cost model"
        )
    from_fits_only = (frame["source"] >= len(csvs)) & (frame["source"] < len(csvs) + len(fits_only))
    frame = frame[~(from_fits_only & (frame["workload"].map(_family) == "operator"))]
    frame = _with_rule(frame.reset_index(drop=True))
    columns = [c for c in frame.columns if c not in META + TIMES + ADDED + NOT_FEATURES]
    y_op = np.log(frame["t_mat"].to_numpy() / frame["t_fact"].to_numpy())
    y_join = np.log(frame["t_join"].to_numpy() / frame["t_fact"].to_numpy())
    weight = np.where(frame["source"] >= len(csvs) + len(fits_only), selection_weight, 1.0)
    return frame, columns, _design(frame, columns), (y_op, y_join), _analytic_base(frame), weight


def train(
    csvs,
    out,
    device="cpu",
    folds=5,
    fits_only=(),
    margin=MARGIN,
    correction=CORRECTION,
    selection=(),
    selection_weight=1.0,
):
    """Train the hybrid cost model on sweep CSVs, cross-validate it, and write its files.

    The regressors learn the analytic rule's error (the measured log-ratios less the rule's),
    the probed properties of the host that timed each row among their features; every CSV must
    carry that probe (sweeps record it; ``refeaturize --probe-host`` adds it on that host).

    Parameters
    ----------
    csvs : list of path-like
        CSVs written by :func:`ilargi.calibration.sweep.sweep` (or ``.csv.xz``).
    out : path-like
        Folder for ``chooser_<device>.txt``, ``chooser_<device>_join.txt``, the fits' own
        ``chooser_<device>_model.txt`` and ``chooser_<device>_model_join.txt`` (when both families
        have :data:`FAMILY_ROWS` rows; else these are removed) and ``chooser_<device>.json``
        (created if needed).
    device : {"cpu", "gpu"}, default="cpu"
        Train on this device's rows.
    folds : int, default=5
        Cross-validation folds, grouped by scenario (fewer when there are fewer scenarios).
    fits_only : list of path-like, optional
        More sweep CSVs whose estimator fits train the fits' regressors, their operator calls
        left out: a sweep drawn for the fits (e.g. of the ``wide_keys`` style) then leaves the
        operators' model as the other sweeps make it.
    selection : list of path-like, optional
        Sweep CSVs of real workloads (``benchmarks/chooser_testset.py select --sweep-out``): the
        selection set's, never a test set's.
    selection_weight : float, default=1.0
        The weight of each of their rows (the synthetic rows weigh 1).
    margin : float, default=MARGIN
        Factorize iff the predicted log speed-up exceeds this (recorded in the JSON).
    correction : float, default=CORRECTION
        The share of the regressors' correction added to the analytic rule's prediction
        (recorded in the JSON; the cross-validated metrics use it and ``margin``).

    Returns
    -------
    dict
        The metadata written to ``chooser_<device>.json`` (rows, ranges, cross-validated
        metrics, ...).

    Raises
    ------
    ValueError
        As :func:`read_sweeps`, and for sweeps without the probe of the host that timed them.
    """
    import lightgbm as lgb

    started = time.perf_counter()
    frame, columns, X, (y_op, y_join), (base_op, base_join), weight = training_data(
        csvs, device, fits_only, selection, selection_weight
    )
    groups = frame["group"].nunique()
    folds = min(folds, groups)
    if folds >= 2:
        pred_op, pred_join = _cross_validate(
            frame, X, y_op - base_op, y_join - base_join, columns, folds, weight
        )
        pred_op, pred_join = correction * pred_op + base_op, correction * pred_join + base_join
        cv = _report(frame, pred_op, pred_join, y_op, margin)
        cv["analytic_rmse_log_speedup"] = float(np.sqrt(np.mean((base_op - y_op) ** 2)))
        cv["time_saved_by_margin"] = {
            str(margin): evaluate(
                frame["t_fact"], frame["t_mat"], _decisions(pred_op, pred_join, margin)
            )["time_saved"]
            for margin in MARGINS
        }
    else:  # too few scenarios to hold any out
        cv = None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    families = _families(frame)
    for family in ("operator", "model"):
        _, op_path, join_path = _paths(out, device, family)
        mask = families.get(family)
        if mask is None:  # a previous training's files would not match this one
            op_path.unlink(missing_ok=True)
            join_path.unlink(missing_ok=True)
            continue
        for y, base, path in ((y_op, base_op, op_path), (y_join, base_join, join_path)):
            _fit(X[mask], (y - base)[mask], columns, weight=weight[mask]).save_model(str(path))
    meta = {
        "device": device,
        "columns": columns,
        "families": list(families),
        "margin": margin,
        "correction": correction,
        "hybrid": True,
        "device_ranges": _device_ranges(frame),
        "analytic": {**rules.constants(), "resident_bytes": RESIDENT_BYTES},
        "kinds": sorted(set(frame["workload"])),
        "ranges": _ranges(frame),
        "rows": int(len(frame)),
        "scenarios": int(groups),
        "folds": folds,
        "cv": cv,
        # named as CSVs: an .xz sweep holds the same text (the shipped ones are found as .csv.xz)
        "sweeps": [Path(c).name.removesuffix(".xz") for c in csvs],
        "fits_only_sweeps": [Path(c).name.removesuffix(".xz") for c in fits_only],
        "selection_sweeps": [Path(c).name.removesuffix(".xz") for c in selection],
        "selection_weight": selection_weight,
        "lightgbm": lgb.__version__,
        "params": LGB_PARAMS,
        "rounds": ROUNDS,
        "train_seconds": round(time.perf_counter() - started, 1),
    }
    _paths(out, device)[0].write_text(json.dumps(meta, indent=1))
    clear_cache()
    return meta
