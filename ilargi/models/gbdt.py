"""Gradient-boosted decision trees on normalized data, with LightGBM's semantics and names.

:class:`GradientBoostingRegressor` and :class:`GradientBoostingClassifier` train on the bins of a
NormalizedMatrix without building the join: bin edges from each joined column's distribution
(each table row weighed by the fact rows that take it), uint8 codes per source row, leaf
histograms from per-dimension sums by foreign key, splits routed through the foreign keys
(:mod:`ilargi.rewriter.histograms`). The tree learner follows LightGBM's
(:mod:`ilargi.models.gbdt_trees`): the same bins, gains, leaf values and growth order, so that a
model equals LightGBM's on the materialized table and exports to LightGBM's model text.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn import get_config
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ilargi.backend import backend_of, threads
from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser import memory
from ilargi.rewriter.bin_edges import MAX_BIN
from ilargi.rewriter.binning import NARROW
from ilargi.rewriter.histograms import BinnedMatrix

from ._base import IlargiEstimator
from ._ops import class_codes, is_distributed, is_normalized, one_part
from ._sklearn_compat import Interval, StrOptions, _fit_context
from .gbdt_categorical import CategoricalParams
from .gbdt_gains import K_EPSILON
from .gbdt_objectives import L2, Binary, Objective, Softmax
from .gbdt_text import model_text, repr_17g
from .gbdt_trees import GrowthParams, Tree, TreeLearner

_NAME = re.compile(r"^[^\s,:\[\]{}\"]+$")
# Rows of a NormalizedMatrix materialized at once for LightGBM's prediction: a few MiB of table.
_PREDICT_VALUES = 1 << 22
# Where plan="auto" trains a regressor factorized, where it fits in memory as well: from this many
# rows of dense sources, with at least FACTORIZED_FEATURES features read per target row (the fact
# table's and those of dimensions of at most NARROW features) and no dimension read by key. On the
# dense stars measured (benchmarks/RESULTS.md, "Gradient-boosted trees") ilargi's learner was the
# faster plan there, but slower on narrower stars and where wide dimensions were read by key, and
# on the small sparse one-hot sets mostly (LightGBM is kept there). Set from those runs, which
# therefore do not test it.
FACTORIZED_ROWS = 1_000_000
FACTORIZED_FEATURES = 16


def lightgbm_params(model, objective, forced_bins, n):
    """LightGBM's parameters for the trees ``model`` grows: its bins and its parameters.

    The bins are ilargi's (``forcedbins_filename``, one bin count per feature, bins found from
    every row), so that LightGBM's bins equal them; growth is deterministic, row-wise, on
    ilargi's thread count. ``subsample``/``colsample_bytree`` do not map (LightGBM draws other
    random numbers): the estimator does not train LightGBM with them.

    Parameters
    ----------
    model : GradientBoostingRegressor or GradientBoostingClassifier
        Its parameters; its bins (``model._bounds``), once binned.
    objective : Objective
        The objective (:mod:`ilargi.models.gbdt_objectives`): its name, metric and classes.
    forced_bins : str
        Path of the JSON file of the bins' upper bounds.
    n : int
        Rows of the training table.

    Returns
    -------
    dict
    """
    params = dict(
        objective=objective.name,
        metric=objective.metric,
        num_leaves=model.num_leaves,
        max_depth=model.max_depth,
        learning_rate=model.learning_rate,
        min_data_in_leaf=model.min_child_samples,
        min_sum_hessian_in_leaf=model.min_child_weight,
        lambda_l1=model.reg_alpha,
        lambda_l2=model.reg_lambda,
        min_gain_to_split=model.min_split_gain,
        forcedbins_filename=forced_bins,
        # a categorical feature's categories are LightGBM's own, found with max_bin as ilargi's
        max_bin_by_feature=[
            model.max_bin if j in model._categorical else max(len(b), 2)
            for j, b in enumerate(model._bounds)
        ],
        min_data_in_bin=model.min_data_in_bin,
        **asdict(CategoricalParams.of(model)),  # LightGBM's names
        # every row, as ilargi's bins are found: a sample may miss a sign (LightGBM's zero bins)
        bin_construct_sample_cnt=n + 1,
        # LightGBM's filter of the features it deems unsplittable changed trees on Hamlet Yelp
        # (squared error): every feature kept, as ilargi's learner keeps them
        feature_pre_filter=False,
        deterministic=True,
        force_row_wise=True,
        num_threads=threads.get_num_threads(),
        verbose=-1,
    )
    if objective.n_trees > 1:
        params["num_class"] = objective.n_trees
    return params


def _holds_nan(X):
    """Whether a checked array or sparse matrix (no inf) holds NaN: a sum of its values is NaN
    then (or inf, where it overflows: a pass more to be sure)."""
    values = X.data if sp.issparse(X) else X
    total = np.sum(values)
    return bool(np.isnan(total)) or (np.isinf(total) and bool(np.isnan(values).any()))


def _csr_matrix(X):
    """X, a SciPy sparse array as a ``csr_matrix``: LightGBM takes that type as it is and
    converts (with a warning) any other."""
    return sp.csr_matrix(X) if sp.issparse(X) and not isinstance(X, sp.csr_matrix) else X


class _Evals:
    """The evaluation sets' metric after each round and the early-stopping rule of LightGBM's
    ``early_stopping`` callback, shared by both learners."""

    def __init__(self, n_sets, metric, rounds):
        self.metric, self.rounds = metric, rounds
        self.result: dict = {f"valid_{i}": {metric: []} for i in range(n_sets)}
        self.best = [(np.inf, 0)] * n_sets
        self.stop_at = None

    def record(self, it, losses):
        """Record round ``it``'s losses; True when training stops."""
        for i, loss in enumerate(losses):
            self.result[f"valid_{i}"][self.metric].append(loss)
            if loss < self.best[i][0]:
                self.best[i] = (loss, it)
            elif self.rounds and self.stop_at is None and it - self.best[i][1] >= self.rounds:
                self.stop_at = self.best[i][1]
        return self.stop_at is not None

    def kept(self):
        """(best_iteration_, best_score_): the rounds kept with early stopping, else (None, {})."""
        if not (self.rounds and self.best and self.result["valid_0"][self.metric]):
            return None, {}
        # LightGBM's callback keeps the first set's best round when the rounds run out
        at = self.best[0][1] if self.stop_at is None else self.stop_at
        return at + 1, {
            name: {self.metric: values[self.metric][at]} for name, values in self.result.items()
        }


class _GradientBoosting(IlargiEstimator):
    """What the regressor and the classifier share: parameters, boosting, prediction, export."""

    _takes_bins = True
    _allow_nan = True  # NaN is a missing value, its direction learned per split (LightGBM's)
    # the categorical features once fitted; a model pickled before they existed has none
    _categorical: dict = {}

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "num_leaves": [Interval(Integral, 2, 131072, closed="both")],
        "max_depth": [Interval(Integral, None, None, closed="neither")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "min_split_gain": [Interval(Real, 0, None, closed="left")],
        "min_child_weight": [Interval(Real, 0, None, closed="left")],
        "min_child_samples": [Interval(Integral, 0, None, closed="left")],
        "subsample": [Interval(Real, 0, 1, closed="right")],
        "subsample_freq": [Interval(Integral, 0, None, closed="left")],
        "colsample_bytree": [Interval(Real, 0, 1, closed="right")],
        "reg_alpha": [Interval(Real, 0, None, closed="left")],
        "reg_lambda": [Interval(Real, 0, None, closed="left")],
        "max_bin": [Interval(Integral, 2, MAX_BIN, closed="both")],
        "min_data_in_bin": [Interval(Integral, 1, None, closed="left")],
        "early_stopping_rounds": [None, Interval(Integral, 1, None, closed="left")],
        "categorical_feature": [None, "array-like"],
        "max_cat_to_onehot": [Interval(Integral, 1, None, closed="left")],
        "max_cat_threshold": [Interval(Integral, 1, None, closed="left")],
        "cat_l2": [Interval(Real, 0, None, closed="left")],
        "cat_smooth": [Interval(Real, 0, None, closed="left")],
        "min_data_per_group": [Interval(Integral, 1, None, closed="left")],
        "importance_type": [StrOptions({"split", "gain"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        *,
        num_leaves: int = 31,
        max_depth: int = -1,
        learning_rate: float = 0.1,
        n_estimators: int = 100,
        min_split_gain: float = 0.0,
        min_child_weight: float = 1e-3,
        min_child_samples: int = 20,
        subsample: float = 1.0,
        subsample_freq: int = 0,
        colsample_bytree: float = 1.0,
        reg_alpha: float = 0.0,
        reg_lambda: float = 0.0,
        max_bin: int = 255,
        min_data_in_bin: int = 3,
        early_stopping_rounds: int | None = None,
        categorical_feature: Sequence[int | str] | None = None,
        max_cat_to_onehot: int = 4,
        max_cat_threshold: int = 32,
        cat_l2: float = 10.0,
        cat_smooth: float = 10.0,
        min_data_per_group: int = 100,
        importance_type: str = "split",
        random_state: int | np.random.RandomState | None = None,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.num_leaves = num_leaves
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.n_estimators = n_estimators
        self.min_split_gain = min_split_gain
        self.min_child_weight = min_child_weight
        self.min_child_samples = min_child_samples
        self.subsample = subsample
        self.subsample_freq = subsample_freq
        self.colsample_bytree = colsample_bytree
        self.reg_alpha = reg_alpha
        self.reg_lambda = reg_lambda
        self.max_bin = max_bin
        self.min_data_in_bin = min_data_in_bin
        self.early_stopping_rounds = early_stopping_rounds
        self.categorical_feature = categorical_feature
        self.max_cat_to_onehot = max_cat_to_onehot
        self.max_cat_threshold = max_cat_threshold
        self.cat_l2 = cat_l2
        self.cat_smooth = cat_smooth
        self.min_data_per_group = min_data_per_group
        self.importance_type = importance_type
        self.random_state = random_state

    # -- the plan -------------------------------------------------------------------------------

    def _drawn(self):
        """The parameters that draw random numbers (bagging, feature sampling): LightGBM draws
        others, so its trees would differ; empty where every parameter maps to LightGBM's."""
        drawn = []
        if self.subsample < 1.0 and self.subsample_freq > 0:
            drawn.append("subsample")
        if self.colsample_bytree < 1.0:
            drawn.append("colsample_bytree")
        return drawn

    def _lightgbm_fits(self, X, trees_per_round):
        """(whether the materialized plan fits in memory, in words): the joined table at its
        peak, then the table and LightGBM's dataset at once (an array is held already)."""
        n, d = (int(v) for v in X.shape)
        if is_normalized(X):
            planned = memory.layout(X)
            held, peak, entries, sparse = (
                planned.nbytes,
                planned.peak,
                planned.entries,
                planned.sparse,
            )
            what = f"the joined {planned.describe()} and LightGBM's dataset"
        else:
            held = peak = 0
            entries, sparse = (X.nnz, True) if sp.issparse(X) else (n * d, False)
            what = "LightGBM's dataset"
        need = max(peak, held + memory.lightgbm_bytes(n, d, entries, sparse, trees_per_round))
        available = memory.available_bytes()
        if available is None:
            return True, f"{what} need {memory.format_bytes(need)}; free memory unknown"
        fits = need <= memory.BUDGET * available
        return fits, (
            f"{what} need {memory.format_bytes(need)}, which {'fits' if fits else 'does not fit'}"
            f" in {memory.BUDGET:.0%} of the {memory.format_bytes(available)} available"
        )

    def _decide(self, X, trees_per_round, plan=None):
        """(plan, learner, reason) of a fit on X: where the data live ("factorized": the
        sources; "materialized": the joined table or an array), which learner trains ("ilargi":
        the histogram learner of :mod:`~ilargi.models.gbdt_trees`; "lightgbm"), and why; ``plan``
        instead of the estimator's own where given."""
        plan = plan or self.plan
        self._refuse_distributed(X)
        if isinstance(X, BinnedMatrix):
            if plan == "materialized":
                raise ValueError(
                    "a BinnedMatrix trains with ilargi's learner (plan='factorized' or 'auto'); "
                    "for LightGBM on the joined table, fit on the NormalizedMatrix"
                )
            return "factorized", "ilargi", "a BinnedMatrix: ilargi's learner on its codes"
        normalized = is_normalized(X)
        drawn = self._drawn()
        if plan == "factorized":
            return (
                "factorized" if normalized else "materialized",
                "ilargi",
                "plan='factorized': ilargi's histogram learner",
            )
        if drawn:
            words = (
                f"{' and '.join(drawn)} draw{'s' if len(drawn) == 1 else ''} with ilargi's "
                "random numbers, which LightGBM does not reproduce"
            )
            if plan == "materialized" or not normalized:
                return "materialized", "ilargi", f"ilargi's learner on the table: {words}"
            return "factorized", "ilargi", f"factorized: {words}"
        if plan == "materialized":
            return "materialized", "lightgbm", "plan='materialized': LightGBM on the table"
        per_row = self._wide_dense_regression(X) if normalized else None
        if per_row is not None:
            return (
                "factorized",
                "ilargi",
                f"factorized: squared error on {X.shape[0]:,} rows of dense sources, "
                f"{per_row} features read per row and no dimension read by key (from "
                f"{FACTORIZED_ROWS:,} rows and {FACTORIZED_FEATURES} such features, ilargi's "
                f"learner trained such stars faster than the join and LightGBM)",
            )
        fits, why = self._lightgbm_fits(X, trees_per_round)
        if fits:
            return (
                "materialized",
                "lightgbm",
                f"LightGBM on the table (the faster learner on most datasets measured; no "
                f"per-tree cost model yet): {why}",
            )
        if normalized:
            return "factorized", "ilargi", f"factorized: {why}"
        return "materialized", "ilargi", f"ilargi's learner on the table: {why}"

    def _wide_dense_regression(self, X):
        """The features ilargi's learner reads per target row of X where plan="auto" trains it
        for its speed, else None: squared error (a regressor), at least FACTORIZED_ROWS rows,
        every source dense, every dimension read per target row (at most NARROW features, no
        more rows than X: the learner gathers their codes per row, :class:`BinnedMatrix`), and
        at least FACTORIZED_FEATURES features."""
        n = X.shape[0]
        if not isinstance(self, RegressorMixin) or n < FACTORIZED_ROWS:
            return None
        per_row = 0
        for part in X.parts:
            rows, width = part.source.shape
            if sp.issparse(part.source):
                return None
            if part.indicator.rows is not None and (width > NARROW or rows > n):
                return None  # read by key: its histograms cost its rows at every leaf
            per_row += width
        return per_row if per_row >= FACTORIZED_FEATURES else None

    def _plan_decision(self, X):
        """(factorize, reason): what ``plan="auto"`` decides for a fit on the NormalizedMatrix
        X, as :func:`ilargi.choose` asks (a classifier not fitted yet counts two classes)."""
        if not get_config()["skip_parameter_validation"]:
            self._validate_params()
        classes = getattr(self, "classes_", ())
        plan, _, reason = self._decide(X, len(classes) if len(classes) > 2 else 1, plan="auto")
        return plan == "factorized", reason

    def _refuse_distributed(self, X):
        if is_distributed(X):
            raise TypeError(
                f"{type(self).__name__} does not train on a Dask-backed matrix; use X.compute() "
                "for the in-memory matrix"
            )

    def _binned(self, X):
        """X binned with the training bins (for prediction); a BinnedMatrix checked to be."""
        if not isinstance(X, BinnedMatrix):
            source = X if is_normalized(X) else one_part(X, not _holds_nan(X))
            return BinnedMatrix.from_matrix(
                source, bounds=self._bounds, categorical=self._categorical
            )
        if X.categorical.keys() != self._categorical.keys() or not all(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(X.bounds, self._bounds)
        ):
            raise ValueError(
                "X is binned with other bins than the training data: bin it with the training "
                "BinnedMatrix's bounds (to_binned(..., bounds=B.bounds)), or bin both at once "
                "(to_binned(..., fit_rows=...)) and slice"
            )
        return X

    def _trainable(self, X):
        """A BinnedMatrix to train on, checked: bins found from its data with this estimator's
        max_bin and min_data_in_bin."""
        if X.binning is None:
            raise ValueError(
                "X is binned with given bounds (for prediction); train on a BinnedMatrix whose "
                "bins were found from its data"
            )
        if X.binning != (self.max_bin, self.min_data_in_bin):
            raise ValueError(
                f"X is binned with max_bin={X.binning[0]}, min_data_in_bin={X.binning[1]}; "
                f"this estimator has max_bin={self.max_bin}, "
                f"min_data_in_bin={self.min_data_in_bin}: bin with the estimator's"
            )
        declared = self._categorical_features(X.d)
        if sorted(X.categorical) != declared:
            raise ValueError(
                f"X is binned with the categorical features {sorted(X.categorical)}; this "
                f"estimator's categorical_feature gives {declared}: bin with the same ones "
                "(to_binned/from_matrix(..., categorical=...))"
            )
        return X

    def _categorical_features(self, d):
        """The positions of ``categorical_feature`` among the d features, checked."""
        if self.categorical_feature is None:
            return []
        names = getattr(self, "feature_names_in_", None)
        found = []
        for feature in self.categorical_feature:
            if isinstance(feature, str):
                known = [] if names is None else [str(c) for c in names]
                if feature not in known:
                    raise ValueError(
                        f"categorical_feature {feature!r} is not a feature name of X"
                        + ("" if names is None else f" (features: {known[:10]}...)")
                    )
                found.append(known.index(feature))
            elif isinstance(feature, Integral) and not isinstance(feature, bool):
                if not 0 <= int(feature) < d:
                    raise ValueError(
                        f"categorical_feature {feature} is not a feature of X ({d} features)"
                    )
                found.append(int(feature))
            else:
                raise TypeError(
                    f"categorical_feature holds {feature!r}; give feature positions or names"
                )
        if len(set(found)) != len(found):
            raise ValueError(
                f"categorical_feature names a feature twice: {self.categorical_feature}"
            )
        return sorted(found)

    # -- boosting -------------------------------------------------------------------------------

    def _boost(self, X, objective, eval_set):
        for fitted in ("_trees", "_booster"):  # a refit replaces the other learner's model
            self.__dict__.pop(fitted, None)
        self.plan_, self.learner_, self.plan_reason_ = self._decide(X, objective.n_trees)
        normalized = is_normalized(X)
        if isinstance(X, BinnedMatrix):
            binned = source = self._trainable(X)
        else:
            if self.learner_ == "ilargi" and self.plan_ == "materialized" and normalized:
                X = X.materialize()
            source = X if is_normalized(X) else one_part(X, not _holds_nan(X))
            binned = BinnedMatrix.from_matrix(
                source,
                self.max_bin,
                self.min_data_in_bin,
                categorical=self._categorical_features(X.shape[1]),
            )
        self._bounds, self._categorical = binned.bounds, binned.categorical
        self._feature_infos = [
            "none"
            if b.size <= 1
            else ":".join(str(int(c)) for c in b)
            if j in binned.categorical
            else f"[{repr_17g(lo)}:{repr_17g(hi)}]"
            for j, (b, (lo, hi)) in enumerate(zip(binned.bounds, binned.ranges))
        ]
        self._objective_line = objective.string()
        self._n_per_round = objective.n_trees
        evals = _Evals(len(eval_set), objective.metric, self.early_stopping_rounds)
        if self.learner_ == "lightgbm":
            del binned, source  # its codes: only the bounds are needed
            # no reference kept here: the table is freed once LightGBM's dataset holds its bins
            self._booster = self._train_lightgbm(
                X.materialize() if normalized else X, objective, eval_set, evals
            )
            self.n_iter_ = self._booster.current_iteration()
        else:
            self._trees = self._grow(binned, objective, eval_set, evals)
            self.n_iter_ = len(self._trees) // objective.n_trees
        self.evals_result_ = evals.result
        self.best_iteration_, self.best_score_ = evals.kept()
        return self

    def _train_lightgbm(self, D, objective, eval_set, evals):
        """LightGBM on the table D with ilargi's bins and parameters (:func:`lightgbm_params`),
        rounds and early stopping run as :meth:`_grow` runs them; the Booster of the rounds
        kept, without its datasets."""
        import lightgbm

        n = D.shape[0]
        names = self._feature_names()
        with tempfile.TemporaryDirectory(prefix="ilargi-bins-") as folder:
            forced = os.path.join(folder, "bins.json")
            with open(forced, "w") as f:
                json.dump(
                    [
                        # the bounds but the last (+inf) and NaN's, which LightGBM adds
                        {"feature": j, "bin_upper_bound": [float(v) for v in b if np.isfinite(v)]}
                        for j, b in enumerate(self._bounds)
                        if j not in self._categorical
                    ],
                    f,
                )
            params = lightgbm_params(self, objective, forced, n)
            train = lightgbm.Dataset(
                _csr_matrix(D),
                objective.y,
                weight=objective.sw,
                feature_name=names,
                categorical_feature=sorted(self._categorical) or "auto",
                params=params,
            ).construct()
            del D  # the Dataset holds the bins: the table can go (if the caller lets it)
            booster = lightgbm.Booster(params, train)
            for i, (Xv, yv, sw) in enumerate(eval_set):
                Dv = _csr_matrix(Xv.materialize() if is_normalized(Xv) else Xv)
                booster.add_valid(
                    lightgbm.Dataset(Dv, yv, weight=sw, params=params, reference=train).construct(),
                    f"valid_{i}",
                )
        with self._iterations(self.n_estimators, "fit") as bar:
            for it in range(self.n_estimators):
                finished = booster.update()
                bar.update()
                if finished:  # no tree grew: LightGBM dropped the round, as ilargi does
                    break
                if evals.record(it, [loss for _, _, loss, _ in booster.eval_valid()]):
                    break
        kept = evals.kept()[0]
        text = booster.model_to_string(num_iteration=-1 if kept is None else kept)
        booster.free_dataset()
        return lightgbm.Booster(model_str=text)

    def _grow(self, binned, objective, eval_set, evals):
        """ilargi's learner: the trees of the rounds kept."""
        valid = [(self._binned(Xv), yv, sw) for Xv, yv, sw in eval_set]
        params = GrowthParams(
            num_leaves=self.num_leaves,
            max_depth=self.max_depth,
            min_data_in_leaf=self.min_child_samples,
            min_sum_hessian_in_leaf=self.min_child_weight,
            lambda_l1=self.reg_alpha,
            lambda_l2=self.reg_lambda,
            min_gain_to_split=self.min_split_gain,
            categorical=CategoricalParams.of(self),
        )
        learner = TreeLearner(binned, params)
        rng = check_random_state(self.random_state)
        n, K = binned.n, objective.n_trees
        init = [v if abs(v) > K_EPSILON else 0.0 for v in objective.init_scores()]
        score = np.tile(np.asarray(init, dtype=np.float64)[:, None], (1, n))  # K × n
        valid_scores = [np.tile(np.asarray(init, dtype=np.float64), (b.n, 1)) for b, _, _ in valid]
        candidates = np.flatnonzero(binned.n_bins > 1)
        bagging = self.subsample < 1.0 and self.subsample_freq > 0
        bag = None  # every row, until a bag is drawn
        trees: list[Tree] = []
        with self._iterations(self.n_estimators, "fit") as bar:
            for it in range(self.n_estimators):
                g = h = None  # freed before the next gradients are made: never both held
                g, h = objective.gradients(score[0] if K == 1 else score.T)
                if bagging and it % self.subsample_freq == 0:
                    bag = np.flatnonzero(rng.random_sample(n) < self.subsample)
                    if bag.size == 0:
                        bag = np.array([int(rng.randint(n))])
                out_of_bag = None
                if bag is not None and bag.size < n:
                    out_of_bag = np.setdiff1d(np.arange(n), bag)
                this_round, grew = [], False
                for k in range(K):
                    features = self._features(binned.d, candidates, rng)
                    known = objective.gradient_sums
                    tree, labels, leaf_labels = learner.grow(
                        g[k], h[k], bag, features, None if known is None else known[k]
                    )
                    if tree.num_leaves > 1:
                        grew = True
                        tree.shrink(self.learning_rate)
                        self._add_leaf_values(
                            score[k], tree, labels, leaf_labels, bag, objective if K == 1 else None
                        )
                        if out_of_bag is not None:
                            score[k, out_of_bag] += tree.predict(binned, out_of_bag)
                        for (vb, _, _), vs in zip(valid, valid_scores):
                            vs[:, k] += tree.predict(vb)
                        if it == 0 and init[k] != 0.0:
                            tree.add_bias(init[k])
                    else:
                        tree = Tree()
                        tree.leaf_value[0] = init[k] if it == 0 else 0.0
                        tree.leaf_count[0] = n
                    this_round.append(tree)
                trees.extend(this_round)
                bar.update()
                if not grew:
                    if len(trees) > K:
                        del trees[-K:]
                    break
                losses = [
                    objective.loss(vs[:, 0] if K == 1 else vs, yv, sw)
                    for (_, yv, sw), vs in zip(valid, valid_scores)
                ]
                if evals.record(it, losses):
                    break
        kept = evals.kept()[0]
        if kept is not None:
            del trees[kept * K :]
        return trees

    @staticmethod
    def _add_leaf_values(score, tree, labels, leaf_labels, rows, objective=None):
        """score[i] += the value of row i's leaf, for the target rows ``rows`` (a bag; None: all
        of them), each row's leaf known by its label: a gather of the values by label. Every
        row's: by ``objective`` where given (the next round's gradients made in the same pass
        where it can)."""
        by_label = np.zeros(int(leaf_labels.max()) + 1)
        by_label[leaf_labels] = tree.leaf_value
        if rows is None or rows.size == score.size:
            if objective is None or not objective.add_by_label(score, by_label, labels):
                backend_of(score).add_by_label(score, by_label, labels)
        else:
            score[rows] += by_label[labels[rows]]

    def _features(self, d, candidates, rng):
        """The features a tree may split on: all, or colsample_bytree of the non-constant ones
        (LightGBM's count: round(fraction · k), at least min(2, k))."""
        used = np.zeros(d, dtype=bool)
        if self.colsample_bytree >= 1.0:
            used[candidates] = True
            return used
        k = candidates.size
        count = max(int(np.floor(k * self.colsample_bytree + 0.5)), min(2, k))
        used[rng.choice(candidates, size=count, replace=False)] = True
        return used

    def _eval_sets(self, eval_set, eval_sample_weight, classes=None):
        if eval_set is None:
            return []
        if isinstance(eval_set, tuple):
            eval_set = [eval_set]
        weights = eval_sample_weight or [None] * len(eval_set)
        out = []
        for (Xv, yv), sw in zip(eval_set, weights):
            Xv, yv = self._validate(Xv, yv, reset=False)
            if classes is not None:
                unseen = np.setdiff1d(np.unique(yv), classes)
                if unseen.size:
                    raise ValueError(f"eval_set holds labels not seen in y: {unseen[:5].tolist()}")
                yv = np.searchsorted(classes, yv)
            out.append((Xv, yv, None if sw is None else np.asarray(sw, dtype=np.float64)))
        return out

    def _raw(self, X):
        """Raw scores (n × trees per round) of X: each tree's leaves routed through X's bins, or
        LightGBM's prediction (a NormalizedMatrix materialized a block of rows at a time)."""
        check_is_fitted(self, "n_iter_")
        X = self._validate(X, reset=False)
        self._refuse_distributed(X)
        booster = getattr(self, "_booster", None)
        if booster is not None:
            if isinstance(X, BinnedMatrix):
                raise TypeError(
                    "this model is LightGBM's (learner_='lightgbm'), which predicts from values, "
                    "not bins: predict on the NormalizedMatrix or the table"
                )
            k = threads.get_num_threads()
            if not is_normalized(X):
                raw = booster.predict(_csr_matrix(X), raw_score=True, num_threads=k)
            else:
                step = max(1, _PREDICT_VALUES // max(1, X.shape[1]))
                raw = np.concatenate(
                    [
                        booster.predict(
                            X[i : i + step].materialize(), raw_score=True, num_threads=k
                        )
                        for i in range(0, X.shape[0], step)
                    ]
                )
            return raw.reshape(X.shape[0], self._n_per_round)
        binned = self._binned(X)
        raw = np.zeros((binned.n, self._n_per_round))
        for i, tree in enumerate(self._trees):
            raw[:, i % self._n_per_round] += tree.predict(binned)
        return raw

    # -- export and importances -----------------------------------------------------------------

    def _feature_names(self):
        names = getattr(self, "feature_names_in_", None)
        if names is not None and all(_NAME.match(str(c)) for c in names):
            return [str(c) for c in names]
        return [f"Column_{j}" for j in range(self.n_features_in_)]

    def model_to_string(self) -> str:
        """The model in LightGBM's model text format.

        ``lightgbm.Booster(model_str=model.model_to_string())`` loads it and predicts what this
        model predicts (raw scores to rounding).

        Returns
        -------
        str
            LightGBM's model text: its header, the trees (split features, thresholds, children,
            leaf values, weights and counts), no parameters section.
        """
        check_is_fitted(self, "n_iter_")
        if getattr(self, "_booster", None) is not None:
            return self._booster.model_to_string()
        classes = getattr(self, "classes_", None)
        n_class = 1 if classes is None or classes.size == 2 else int(classes.size)
        return model_text(
            self._trees,
            self._objective_line,
            n_class,
            self._n_per_round,
            self._feature_names(),
            self._feature_infos,
        )

    @property
    def booster_(self):
        """The model as a ``lightgbm.Booster``: LightGBM's own where it trained (the materialized
        plan), else loaded from :meth:`model_to_string`.

        Returns
        -------
        lightgbm.Booster
        """
        import lightgbm

        check_is_fitted(self, "n_iter_")
        if getattr(self, "_booster", None) is not None:
            return self._booster
        return lightgbm.Booster(model_str=self.model_to_string())

    @property
    def feature_importances_(self) -> Array:
        """Per feature, the number of splits on it (``importance_type="split"``) or the sum of
        their gains (``"gain"``), over the trees kept.

        Returns
        -------
        ndarray of shape (n_features_in_,)
        """
        check_is_fitted(self, "n_iter_")
        if getattr(self, "_booster", None) is not None:
            counted = self._booster.feature_importance(self.importance_type)
            return counted.astype(np.float64 if self.importance_type == "gain" else np.int64)
        out = np.zeros(self.n_features_in_)
        for tree in self._trees:
            for f, gain in zip(tree.split_feature, tree.split_gain):
                out[f] += 1.0 if self.importance_type == "split" else gain
        return out if self.importance_type == "gain" else out.astype(np.int64)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.allow_nan = True  # a missing value (inf is still refused)
        return tags


_PARAMETERS = """
    Parameters
    ----------
    num_leaves : int, default=31
        Leaves of a tree at most (grown best-first).
    max_depth : int, default=-1
        Depth of a tree at most; <= 0: no limit.
    learning_rate : float, default=0.1
        Shrinkage of each tree's values.
    n_estimators : int, default=100
        Boosting rounds (one tree per round, one per class for more than two classes).
    min_split_gain : float, default=0.0
        Gain a split must exceed (LightGBM's ``min_gain_to_split``).
    min_child_weight : float, default=1e-3
        Hessian sum of a leaf at least (``min_sum_hessian_in_leaf``).
    min_child_samples : int, default=20
        Rows of a leaf at least (``min_data_in_leaf``).
    subsample : float, default=1.0
        Fraction of rows each tree trains on (bagging), with ``subsample_freq`` > 0.
    subsample_freq : int, default=0
        Draw a new bag every this many rounds; 0: no bagging.
    colsample_bytree : float, default=1.0
        Fraction of the features each tree may split on.
    reg_alpha : float, default=0.0
        L1 penalty of the leaf values (``lambda_l1``).
    reg_lambda : float, default=0.0
        L2 penalty of the leaf values (``lambda_l2``).
    max_bin : int, default=255
        Bins per feature at most (at most 255: codes are uint8).
    min_data_in_bin : int, default=3
        Rows a bin holds at least, where the values allow it.
    early_stopping_rounds : int, optional
        With ``eval_set`` in fit, stop when the first metric of an evaluation set has not
        improved for this many rounds, and keep the rounds up to its best.
    categorical_feature : list of int or str, optional
        Features whose values are categories (whole numbers from 0 below 2**31, e.g. the
        codes of ``Table.to_matrix(..., categorical="ordinal")``), by position or name: split
        on sets of categories as LightGBM splits its ``categorical_feature`` (the same bins,
        splits and model text; a feature of a dense source; at most 255 categories of a bin
        of their own). A category without a bin, or never seen in training, goes right.
    max_cat_to_onehot : int, default=4
        A categorical feature of at most this many bins (its categories plus one) is split
        one category against the rest.
    max_cat_threshold : int, default=32
        Categories a split sends left at most.
    cat_l2 : float, default=10.0
        L2 penalty added to ``reg_lambda`` in the gains and values of sets of categories.
    cat_smooth : float, default=10.0
        Categories are ordered by Σg / (Σh + cat_smooth); those of fewer rows are not tried.
    min_data_per_group : int, default=100
        Rows each group of categories added to a side, and the other side, hold at least.
    importance_type : {"split", "gain"}, default="split"
        What ``feature_importances_`` counts.
    random_state : int, RandomState or None, default=None
        Seed of the bagging and feature sampling.
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs: "factorized" bins the sources and builds the
        histograms by foreign key (ilargi's learner); "materialized" builds the joined table
        once and trains LightGBM on it with ilargi's bins and these parameters
        (:func:`lightgbm_params`: the same trees), or ilargi's learner on it where ``subsample``
        or ``colsample_bytree`` sample (LightGBM draws other random numbers); "auto" is
        "materialized" with LightGBM where the parameters map and the joined table and
        LightGBM's dataset fit in 80 % of the available memory, else "factorized" (see the
        guide's gradient-boosted trees page). A dense or CSR array is a table: "factorized"
        trains ilargi's learner on it, the others LightGBM.
    verbose : bool or int, default=False
        Show a tqdm progress bar over the rounds.
"""

_ATTRIBUTES = """
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of a pandas DataFrame X; set only for one.
    plan_ : str
        The plan that ran, "factorized" or "materialized" (an array is materialized).
    learner_ : str
        The learner that ran: "ilargi" or "lightgbm" (whose Booster the estimator then holds,
        as ``booster_``).
    plan_reason_ : str
        Why, in one line (for "auto": the sizes weighed against the available memory).
    n_iter_ : int
        Boosting rounds kept.
    best_iteration_ : int or None
        The best round (1-based) with early stopping, else None.
    best_score_ : dict
        The evaluation sets' metric at the best round, with early stopping.
    evals_result_ : dict
        Per evaluation set ("valid_0", ...) and metric, its value after each round.
"""


class GradientBoostingRegressor(RegressorMixin, _GradientBoosting):
    __doc__ = (
        """Gradient-boosted trees for regression (squared error), LightGBM's ``LGBMRegressor`` on
    a NormalizedMatrix, a dense array or a CSR matrix.

    With ``plan="factorized"`` a NormalizedMatrix trains factorized: bins per source row,
    histograms by foreign key, no joined table; with "materialized" LightGBM trains on the
    joined table with ilargi's bins. The trees are those LightGBM grows on the materialized
    table with the same parameters and bins (single-precision gradients, leaf-wise growth, its gain and leaf values;
    see :mod:`ilargi.models.gbdt_trees`), and :meth:`model_to_string` writes LightGBM's model
    text. NaN is a missing value: a feature holding it gets a bin of its own, and each split
    learns where it goes, as LightGBM's missing type NaN (a feature without NaN in training
    reads it as 0); inf is refused.
"""
        + _PARAMETERS
        + """
    Attributes
    ----------"""
        + _ATTRIBUTES
        + """
    See Also
    --------
    lightgbm.LGBMRegressor : The estimator whose trees it grows.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi import GradientBoostingRegressor
    >>> X, y = make_star(2000, tuple_ratio=10, d_fact=3, noise=0.1, random_state=0)
    >>> model = GradientBoostingRegressor(n_estimators=20, num_leaves=8, plan="factorized")
    >>> model = model.fit(X, y)
    >>> model.plan_, model.n_iter_
    ('factorized', 20)
    >>> auto = GradientBoostingRegressor(n_estimators=20, num_leaves=8).fit(X, y)
    >>> auto.plan_, auto.learner_
    ('materialized', 'lightgbm')
    >>> bool(np.allclose(auto.predict(X), model.predict(X), rtol=1e-9))
    True
    >>> bool(model.score(X, y) > 0.8)
    True
    """
    )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        X: MatrixLike,
        y: MatrixLike,
        sample_weight: MatrixLike | None = None,
        eval_set: list | None = None,
        eval_sample_weight: list | None = None,
    ) -> GradientBoostingRegressor:
        """Boost trees on X and the targets y.

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Training data; a NormalizedMatrix trains as ``plan`` decides, a BinnedMatrix
            (:meth:`ilargi.Table.to_binned`) with ilargi's learner.
        y : array-like of shape (n_samples,)
            Targets (held in single precision, as LightGBM holds them).
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample.
        eval_set : list of (X, y) pairs, optional
            Evaluation sets: the l2 metric after each round (``evals_result_``), and early
            stopping with ``early_stopping_rounds``.
        eval_sample_weight : list of array-like, optional
            Sample weights of the evaluation sets.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y = self._validate(X, y, y_numeric=True)
        sw = self._sample_weight(sample_weight, X)
        eval_sets = self._eval_sets(eval_set, eval_sample_weight)
        return self._boost(X, L2(y, sw), eval_sets)

    def predict(self, X: MatrixLike) -> Array:
        """Predicted targets: the sum of the trees' values.

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples; a NormalizedMatrix is routed factorized (splits as masks over source rows),
            or materialized a block of rows at a time for LightGBM's Booster.

        Returns
        -------
        ndarray of shape (n_samples,)
        """
        return self._raw(X)[:, 0]


class GradientBoostingClassifier(ClassifierMixin, _GradientBoosting):
    __doc__ = (
        """Gradient-boosted trees for classification, LightGBM's ``LGBMClassifier`` on a
    NormalizedMatrix, a dense array or a CSR matrix.

    Two classes: the log-loss of the sigmoid, one tree per round; more: the softmax, one tree per
    class per round. The plans are those of :class:`GradientBoostingRegressor`, and so is NaN:
    a missing value whose direction each split learns; :meth:`model_to_string` writes LightGBM's
    model text.
"""
        + _PARAMETERS
        + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted."""
        + _ATTRIBUTES
        + """
    See Also
    --------
    lightgbm.LGBMClassifier : The estimator whose trees it grows.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi import GradientBoostingClassifier
    >>> X, y = make_star(2000, tuple_ratio=10, d_fact=3, target="logistic", noise=0.1,
    ...                  random_state=0)
    >>> model = GradientBoostingClassifier(n_estimators=20, num_leaves=8).fit(X, y)
    >>> model.classes_, model.predict_proba(X[:2]).shape
    (array([0., 1.]), (2, 2))
    >>> bool(model.score(X, y) > 0.85)
    True
    """
    )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        X: MatrixLike,
        y: MatrixLike,
        sample_weight: MatrixLike | None = None,
        eval_set: list | None = None,
        eval_sample_weight: list | None = None,
    ) -> GradientBoostingClassifier:
        """Boost trees on X and the class labels y.

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Training data; a NormalizedMatrix trains as ``plan`` decides, a BinnedMatrix
            (:meth:`ilargi.Table.to_binned`) with ilargi's learner.
        y : array-like of shape (n_samples,)
            Class labels, at least two distinct ones.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample.
        eval_set : list of (X, y) pairs, optional
            Evaluation sets: the log-loss after each round (``evals_result_``), and early
            stopping with ``early_stopping_rounds``.
        eval_sample_weight : list of array-like, optional
            Sample weights of the evaluation sets.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If y holds a single class or is not a classification target.
        """
        X, y = self._validate(X, y)
        self.classes_, encoded = class_codes(y)
        if self.classes_.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs samples of at least 2 classes, but the data "
                f"contain only one class: {self.classes_[0]!r}"
            )
        sw = self._sample_weight(sample_weight, X)
        eval_sets = self._eval_sets(eval_set, eval_sample_weight, self.classes_)
        objective: Objective
        if self.classes_.size == 2:
            objective = Binary(encoded, sw)
        else:
            objective = Softmax(encoded, sw, self.classes_.size)
        return self._boost(X, objective, eval_sets)

    def predict_proba(self, X: MatrixLike) -> Array:
        """Probabilities of the classes.

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Probabilities, columns in the order of ``classes_``.
        """
        raw = self._raw(X)
        if self.classes_.size == 2:
            p = Binary.transform(raw[:, 0])
            return np.stack([1.0 - p, p], axis=1)
        return Softmax.transform(raw)

    def predict(self, X: MatrixLike) -> Array:
        """The most probable class of each sample.

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            Predicted labels, values of ``classes_``.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def decision_function(self, X: MatrixLike) -> Array:
        """Raw scores: the sum of the trees' values (log-odds of the second class for two
        classes, one column per class otherwise).

        Parameters
        ----------
        X : NormalizedMatrix, BinnedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
        """
        raw = self._raw(X)
        return raw[:, 0] if raw.shape[1] == 1 else raw
