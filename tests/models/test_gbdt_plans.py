"""The plans of gradient-boosted trees: factorized (ilargi's histogram learner on the sources)
and materialized (LightGBM on the joined table, given ilargi's bins), and plan="auto".

* both plans grow the same trees (to the last bits of LightGBM's threaded sums) on a star, a
  left join, a snowflake and a union, for regression with penalties, limits and weights, binary
  and multiclass log-loss with and without weights, and stop early at the same round;
* the model LightGBM trained predicts, exports, counts importances, pickles and clones as the
  factorized one does;
* bagging and feature sampling, whose random numbers LightGBM does not reproduce, run ilargi's
  learner on the table (plan="materialized") or factorized (plan="auto"), and say so;
* plan="auto" trains LightGBM where the table and its dataset fit in the available memory,
  factorized where they do not, and records why.
"""

import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.utils._param_validation import InvalidParameterError

import ilargi
from ilargi import GradientBoostingClassifier, GradientBoostingRegressor
from ilargi.chooser import memory
from tests.models.test_gbdt import SCENARIOS, _data, _one_hot, assert_same_trees

lightgbm = pytest.importorskip("lightgbm")


def _both(cls, X, y, sample_weight=None, **kw):
    factorized = cls(plan="factorized", **kw).fit(X, y, sample_weight=sample_weight)
    materialized = cls(plan="materialized", **kw).fit(X, y, sample_weight=sample_weight)
    assert (factorized.plan_, factorized.learner_) == ("factorized", "ilargi")
    assert (materialized.plan_, materialized.learner_) == ("materialized", "lightgbm")
    return factorized, materialized


@pytest.mark.parametrize("kind", list(SCENARIOS))
def test_regression_plans_grow_the_same_trees(kind):
    X, y = _data(kind)
    factorized, materialized = _both(
        GradientBoostingRegressor, X, y, n_estimators=8, num_leaves=12, min_child_samples=15
    )
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())
    assert materialized.n_iter_ == factorized.n_iter_ == 8
    np.testing.assert_allclose(materialized.predict(X), factorized.predict(X), rtol=1e-9)
    np.testing.assert_allclose(materialized.score(X, y), factorized.score(X, y), rtol=1e-12)


@pytest.mark.parametrize("kind", ["star", "left join"])
def test_large_leaves_and_children_too_small_to_split_grow_the_same_trees(kind):
    """min_child_samples large against the leaves: many a split's smaller side has fewer than
    twice its rows (it cannot split again: its histograms are only subtracted from its
    parent's), some exactly twice (it can)."""
    X, y = _data(kind, n=3000, seed=5)
    factorized, materialized = _both(
        GradientBoostingRegressor, X, y, n_estimators=10, num_leaves=31, min_child_samples=100
    )
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())


@pytest.mark.parametrize("target", ["z", "binary"])
def test_one_hot_dimensions_grow_the_same_trees(target):
    """Sparse one-hot columns, many too rare to split (LightGBM drops them for squared error,
    where row counts are exact, and keeps them for log-loss, where the scan estimates them)."""
    X, y = _one_hot(7, target=target)
    cls = GradientBoostingRegressor if target == "z" else GradientBoostingClassifier
    factorized, materialized = _both(cls, X, y, n_estimators=8, num_leaves=15, min_child_samples=25)
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())
    np.testing.assert_array_equal(
        materialized.feature_importances_, factorized.feature_importances_
    )


def test_penalties_limits_and_weights_in_both_plans():
    X, y = _data("left join", seed=1)
    w = np.random.default_rng(1).random(len(y)) + 0.5
    factorized, materialized = _both(
        GradientBoostingRegressor,
        X,
        y,
        sample_weight=w,
        n_estimators=6,
        num_leaves=20,
        max_depth=3,
        reg_alpha=2.0,
        reg_lambda=5.0,
        min_split_gain=0.5,
        min_child_weight=3.0,
        min_child_samples=10,
        learning_rate=0.3,
        max_bin=63,
        min_data_in_bin=5,
    )
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_classifier_plans_grow_the_same_trees(n_classes, weighted):
    """On a star: snowflakes meet LightGBM's own tie (test_gbdt.py's docstring) -- a threshold
    on either side of an empty most frequent bin, the same partition -- in these seeds' trees."""
    X, z = _data("star", seed=2)
    y = np.digitize(z, np.quantile(z, np.linspace(0, 1, n_classes + 1)[1:-1]))
    labels = np.array(["low", "mid", "high"])[y]  # not codes: the classes map back
    w = np.random.default_rng(2).random(len(y)) + 0.5 if weighted else None
    factorized, materialized = _both(
        GradientBoostingClassifier, X, labels, sample_weight=w, n_estimators=5, num_leaves=10
    )
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())
    np.testing.assert_array_equal(materialized.classes_, factorized.classes_)
    np.testing.assert_allclose(
        materialized.predict_proba(X), factorized.predict_proba(X), rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(
        materialized.decision_function(X), factorized.decision_function(X), rtol=1e-9, atol=1e-12
    )
    np.testing.assert_array_equal(materialized.predict(X), factorized.predict(X))


def test_early_stopping_stops_both_plans_at_the_same_round():
    X, y = _data("star", n=1200, seed=5)
    y = y + np.random.default_rng(5).standard_normal(len(y)) * 3  # noisy: it overfits early
    train, valid = np.arange(800), np.arange(800, 1100)
    other = np.arange(1100, 1200)
    fits = _both(
        GradientBoostingRegressor,
        X[train],
        y[train],
        n_estimators=200,
        learning_rate=0.3,
        min_child_samples=5,
        early_stopping_rounds=5,
    )
    # fit again with the evaluation sets (the helper fits without them)
    eval_set = [(X[valid], y[valid]), (X[other].materialize(), y[other])]
    factorized, materialized = (m.fit(X[train], y[train], eval_set=eval_set) for m in fits)
    assert factorized.best_iteration_ < 200
    assert materialized.best_iteration_ == factorized.best_iteration_ == materialized.n_iter_
    for name in ("valid_0", "valid_1"):
        np.testing.assert_allclose(
            materialized.evals_result_[name]["l2"], factorized.evals_result_[name]["l2"], rtol=1e-6
        )
        assert materialized.best_score_[name]["l2"] == pytest.approx(
            factorized.best_score_[name]["l2"], rel=1e-6
        )
    assert_same_trees(factorized.model_to_string(), materialized.model_to_string())


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
def test_the_lightgbm_model_predicts_exports_pickles_and_clones():
    X, y = _data("left join", n=900, seed=6)
    factorized, materialized = _both(GradientBoostingRegressor, X, y, n_estimators=6, num_leaves=8)
    D = X.materialize()
    assert isinstance(materialized.booster_, lightgbm.Booster)
    np.testing.assert_allclose(materialized.booster_.predict(D), materialized.predict(X))
    np.testing.assert_allclose(materialized.predict(D), materialized.predict(X), rtol=1e-12)
    np.testing.assert_array_equal(
        materialized.feature_importances_, factorized.feature_importances_
    )
    assert materialized.feature_importances_.dtype == np.int64
    gain = clone(materialized).set_params(importance_type="gain").fit(X, y)
    np.testing.assert_allclose(
        gain.feature_importances_,
        factorized.set_params(importance_type="gain").feature_importances_,
        rtol=1e-5,  # LightGBM's gains and ilargi's, summed differently
    )
    loaded = lightgbm.Booster(model_str=materialized.model_to_string())
    np.testing.assert_allclose(loaded.predict(D), materialized.predict(X), rtol=1e-12)
    again = pickle.loads(pickle.dumps(materialized))
    np.testing.assert_array_equal(again.predict(X), materialized.predict(X))
    assert again.plan_reason_ == materialized.plan_reason_
    fresh = clone(materialized)
    assert fresh.get_params() == materialized.get_params() and not hasattr(fresh, "n_iter_")
    # a refit with the other plan replaces the model
    refit = materialized.set_params(plan="factorized").fit(X, y)
    assert refit.learner_ == "ilargi"
    assert_same_trees(refit.model_to_string(), factorized.model_to_string())


def test_a_large_normalized_matrix_is_predicted_in_blocks(monkeypatch):
    from ilargi.models import gbdt

    X, y = _data("snowflake", n=700, seed=8)
    model = GradientBoostingRegressor(n_estimators=4, plan="materialized").fit(X, y)
    whole = model.predict(X)
    monkeypatch.setattr(gbdt, "_PREDICT_VALUES", 3 * X.shape[1])  # blocks of 3 rows
    np.testing.assert_array_equal(model.predict(X), whole)


@pytest.mark.parametrize("drawn", ["subsample", "colsample_bytree"])
def test_sampling_parameters_run_ilargis_learner(drawn):
    """LightGBM draws other random numbers: the materialized plan trains ilargi's learner on the
    table (the trees of the factorized plan), plan="auto" trains factorized; both say why."""
    X, y = _data("union", n=800, seed=9)
    kw = dict(n_estimators=5, num_leaves=8, random_state=3)
    kw.update(dict(subsample=0.6, subsample_freq=1) if drawn == "subsample" else {drawn: 0.5})
    factorized = GradientBoostingRegressor(plan="factorized", **kw).fit(X, y)
    materialized = GradientBoostingRegressor(plan="materialized", **kw).fit(X, y)
    auto = GradientBoostingRegressor(**kw).fit(X, y)
    assert (materialized.plan_, materialized.learner_) == ("materialized", "ilargi")
    assert (auto.plan_, auto.learner_) == ("factorized", "ilargi")
    for model in (materialized, auto):
        assert drawn in model.plan_reason_ and "LightGBM does not reproduce" in model.plan_reason_
        assert model.model_to_string() == factorized.model_to_string()
    table = GradientBoostingRegressor(**kw).fit(X.materialize(), y)  # an array: a table already
    assert (table.plan_, table.learner_) == ("materialized", "ilargi")


def test_auto_trains_lightgbm_where_the_table_fits():
    X, y = _data("star", n=600)
    model = GradientBoostingRegressor(n_estimators=3).fit(X, y)
    assert (model.plan_, model.learner_) == ("materialized", "lightgbm")
    assert "fits in 80%" in model.plan_reason_ and "LightGBM" in model.plan_reason_
    model = GradientBoostingClassifier(n_estimators=3).fit(sp.csr_matrix(X.materialize()), y > 0)
    assert (model.plan_, model.learner_) == ("materialized", "lightgbm")


def test_auto_trains_factorized_where_memory_is_short(monkeypatch):
    X, y = _data("left join", n=600)
    n, d = X.shape
    table = memory.layout(X)
    need = table.nbytes + memory.lightgbm_bytes(n, d, table.entries, table.sparse)
    # just too little for the table and LightGBM's dataset, through the memory helper ...
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int(need / 0.8) - 1)
    model = GradientBoostingRegressor(n_estimators=3, num_leaves=6).fit(X, y)
    assert (model.plan_, model.learner_) == ("factorized", "ilargi")
    assert "does not fit" in model.plan_reason_
    factorized = GradientBoostingRegressor(n_estimators=3, num_leaves=6, plan="factorized")
    assert model.model_to_string() == factorized.fit(X, y).model_to_string()
    # ... just enough, and an array (held already) needs only LightGBM's dataset
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": int(need / 0.8) + 1)
    assert GradientBoostingRegressor(n_estimators=3).fit(X, y).learner_ == "lightgbm"
    monkeypatch.undo()
    D = X.materialize()
    with ilargi.config_context(available_memory=int(need / 0.8) - 1):  # the user's setting
        assert GradientBoostingRegressor(n_estimators=3).fit(X, y).plan_ == "factorized"
        array = GradientBoostingRegressor(n_estimators=3).fit(D, y)
        assert array.learner_ == "lightgbm"
    with ilargi.config_context(available_memory=1):  # not even LightGBM's dataset fits
        array = GradientBoostingRegressor(n_estimators=3).fit(D, y)
        assert (array.plan_, array.learner_) == ("materialized", "ilargi")
        assert "does not fit" in array.plan_reason_


def test_grid_search_with_auto_on_a_normalized_matrix():
    X, y = _data("left join", n=600, seed=6)
    search = GridSearchCV(
        GradientBoostingRegressor(n_estimators=5), {"num_leaves": [4, 8]}, cv=2
    ).fit(X, y)
    assert search.best_estimator_.learner_ == "lightgbm"


@pytest.mark.parametrize("plan", ["lightgbm", "Materialized", None, 1])
def test_a_bad_plan_is_refused(plan):
    X, y = _data("star", n=200)
    with pytest.raises(InvalidParameterError, match="plan"):
        GradientBoostingRegressor(plan=plan).fit(X, y)


def test_choose_reports_the_rule(monkeypatch):
    X, y = _data("star", n=600)
    plan = ilargi.choose(X, GradientBoostingClassifier())
    assert not plan.factorize and "LightGBM" in plan.reason
    monkeypatch.setattr(memory, "available_bytes", lambda device="cpu": 1000)
    plan = ilargi.choose(X, GradientBoostingRegressor())
    assert plan.factorize and "does not fit" in plan.reason
    # the rule of plan="auto", whatever the estimator's own plan
    assert ilargi.choose(X, GradientBoostingRegressor(plan="materialized")).factorize is True
    with pytest.raises(InvalidParameterError, match="num_leaves"):
        ilargi.choose(X, GradientBoostingRegressor(num_leaves=1))


def test_auto_trains_a_large_wide_dense_regression_factorized():
    """From FACTORIZED_ROWS rows of dense sources and FACTORIZED_FEATURES features read per
    target row, plan="auto" trains a regressor with ilargi's learner (measured faster there) and
    says why; fewer features, a dimension read by key (wider than NARROW), sparse sources,
    classifiers and fewer rows keep LightGBM where it fits."""
    from ilargi import NormalizedMatrix, choose
    from ilargi.models import gbdt

    rng = np.random.default_rng(0)
    n, m = gbdt.FACTORIZED_ROWS, 1000
    fk = rng.integers(0, m, n)
    fact = rng.standard_normal((n, 2))

    def star(*dims):
        widths = [2, *(d.shape[1] for d in dims)]
        ends = np.cumsum(widths)
        cols = [list(range(e - w, e)) for w, e in zip(widths, ends)]
        return NormalizedMatrix.from_parts(
            [fact, *dims], [None, *[fk] * len(dims)], cols, (n, ends[-1])
        )

    wide = star(rng.standard_normal((m, 7)), rng.standard_normal((m, 7)))  # 16 read per row
    plan = choose(wide, GradientBoostingRegressor())
    assert plan.factorize and "1,000,000 rows of dense sources, 16 features" in plan.reason
    assert not choose(wide[: n - 1], GradientBoostingRegressor()).factorize
    assert not choose(wide, GradientBoostingClassifier()).factorize
    narrow = star(rng.standard_normal((m, 3)))
    assert not choose(narrow, GradientBoostingRegressor()).factorize
    keyed = star(rng.standard_normal((m, 14)))  # as many features, read by key
    assert not choose(keyed, GradientBoostingRegressor()).factorize
    sparse = star(sp.random(m, 14, density=0.3, format="csr", random_state=0))
    assert not choose(sparse, GradientBoostingRegressor()).factorize
