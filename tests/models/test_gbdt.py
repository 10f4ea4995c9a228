"""Gradient-boosted trees: factorized training equals LightGBM on the materialized table.

* with LightGBM given ilargi's bin edges (``forcedbins_filename``, one bin count per feature) and
  the same parameters, its trees are ilargi's: the same split features, bins and children, the
  same thresholds, leaf values, weights and counts to 1e-9 -- every tree of the run, on a star, a
  left join, a snowflake and a union, for regression (L1/L2 penalties, depth and gain limits,
  sample weights), binary and multiclass log-loss (with and without weights), with the NumPy and
  the compiled kernels;
* one tie is LightGBM's own: it does not store a feature's most frequent bin (often zero's) in
  a leaf's histogram but rebuilds it as the leaf's totals minus the other bins, so where that bin
  is empty in a leaf it holds rounding noise, and of two thresholds around it (the same partition,
  the same gain) LightGBM may take either; ilargi takes the higher. The trees then differ in that
  one threshold only (seen on about 1 tree in 100 of long binary runs on snowflakes); the seeds
  here have none;
* the factorized plan, the materialized plan (LightGBM on the table), a dense array and a CSR
  matrix give the same model (the plans themselves: test_gbdt_plans.py);
* the exported model text loads in LightGBM and predicts what ilargi predicts;
* the scikit-learn contract: clone, pickle, grid search on a NormalizedMatrix, early stopping,
  importances, parameter checks, inf refused (NaN: test_gbdt_missing.py).
"""

import json
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.utils._param_validation import InvalidParameterError

from ilargi import GradientBoostingClassifier, GradientBoostingRegressor, NormalizedMatrix
from ilargi.backend import cpu_kernels
from ilargi.datasets import make_star
from tests.models.test_parameters import PLAN, Untouchable, named

lightgbm = pytest.importorskip("lightgbm")


@pytest.fixture(params=["numpy", "compiled"])
def kernels(request):
    """The NumPy and the compiled CPU kernels (histograms, partitions, threshold scans)."""
    with cpu_kernels(request.param):
        yield request.param


SCENARIOS = {
    "star": dict(join="inner"),
    "left join": dict(join="left", dangling=0.1),
    "snowflake": dict(snowflake=True),
    "union": dict(join="union"),
}


def _data(kind, n=1500, seed=0):
    X, y = make_star(
        n,
        tuple_ratio=15,
        feature_ratio=1,
        n_dims=2,
        d_fact=2,
        noise=0.3,
        random_state=seed,
        **SCENARIOS[kind],
    )
    # a few repeated values in the dimensions: ties, zero bins and fewer than 255 bins
    return X, np.asarray(y, dtype=np.float64)


def _lightgbm(model, D, y, params, tmp_path, rounds, weight=None, **train):
    """LightGBM on the materialized table with ilargi's bins and the same parameters."""
    categorical = sorted(model._categorical)  # binned by LightGBM itself, as ilargi bins them
    bins = [
        {"feature": j, "bin_upper_bound": [float(v) for v in b if np.isfinite(v)]}
        for j, b in enumerate(model._bounds)
        if j not in categorical
    ]
    path = tmp_path / "bins.json"
    path.write_text(json.dumps(bins))
    full = dict(
        verbose=-1,
        forcedbins_filename=str(path),
        max_bin_by_feature=[
            model.max_bin if j in categorical else max(len(b), 2)
            for j, b in enumerate(model._bounds)
        ],
        min_data_in_bin=model.min_data_in_bin,
        max_cat_to_onehot=model.max_cat_to_onehot,
        max_cat_threshold=model.max_cat_threshold,
        cat_l2=model.cat_l2,
        cat_smooth=model.cat_smooth,
        min_data_per_group=model.min_data_per_group,
        feature_pre_filter=False,
        deterministic=True,
        force_row_wise=True,
        num_threads=1,
        bin_construct_sample_cnt=len(y) + 1,
        num_leaves=model.num_leaves,
        max_depth=model.max_depth,
        learning_rate=model.learning_rate,
        min_data_in_leaf=model.min_child_samples,
        min_sum_hessian_in_leaf=model.min_child_weight,
        lambda_l1=model.reg_alpha,
        lambda_l2=model.reg_lambda,
        min_gain_to_split=model.min_split_gain,
        **params,
    )
    data = lightgbm.Dataset(D, y, weight=weight, categorical_feature=categorical or "auto")
    return lightgbm.train(full, data, num_boost_round=rounds, **train)


def _trees(text):
    """The trees of a model text: {key: values} per tree."""
    trees = []
    for block in text.split("end of trees")[0].split("Tree=")[1:]:
        tree = {}
        for line in block.splitlines()[1:]:
            if "=" in line:
                key, _, value = line.partition("=")
                tree[key] = value.split()
        trees.append(tree)
    return trees


def assert_same_trees(ours, theirs, rtol=1e-9):
    a, b = _trees(ours), _trees(theirs)
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        for key in (
            "num_leaves",
            "split_feature",
            "decision_type",
            "left_child",
            "right_child",
            "leaf_count",
            "internal_count",
        ):
            assert x[key] == y[key], f"tree {i}: {key}"
        for key in ("threshold", "leaf_value", "leaf_weight"):
            np.testing.assert_allclose(
                np.asarray(x[key], float),
                np.asarray(y[key], float),
                rtol=rtol,
                atol=1e-12,
                err_msg=f"tree {i}: {key}",
            )
        for key in ("split_gain", "internal_value", "internal_weight"):  # written with 6 digits
            np.testing.assert_allclose(
                np.asarray(x[key], float),
                np.asarray(y[key], float),
                rtol=1e-5,
                atol=1e-9,
                err_msg=f"tree {i}: {key}",
            )


@pytest.mark.parametrize("kind", list(SCENARIOS))
def test_regression_trees_are_lightgbms(kind, tmp_path, kernels):
    X, y = _data(kind)
    model = GradientBoostingRegressor(
        n_estimators=8, num_leaves=12, min_child_samples=15, plan="factorized"
    ).fit(X, y)
    booster = _lightgbm(model, X.materialize(), y, dict(objective="regression"), tmp_path, 8)
    assert_same_trees(model.model_to_string(), booster.model_to_string())
    assert any(int(t["num_leaves"][0]) == 12 for t in _trees(model.model_to_string()))


def test_penalties_limits_and_weights_as_lightgbm(tmp_path, kernels):
    X, y = _data("left join", seed=1)
    w = np.random.default_rng(1).random(len(y)) + 0.5
    model = GradientBoostingRegressor(
        n_estimators=6,
        num_leaves=20,
        max_depth=3,
        reg_alpha=2.0,
        reg_lambda=5.0,
        min_split_gain=0.5,
        min_child_weight=3.0,
        min_child_samples=10,
        learning_rate=0.3,
        plan="factorized",
    ).fit(X, y, sample_weight=w)
    booster = _lightgbm(model, X.materialize(), y, dict(objective="regression"), tmp_path, 6, w)
    assert_same_trees(model.model_to_string(), booster.model_to_string())


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_classification_trees_are_lightgbms(n_classes, weighted, tmp_path, kernels):
    """Log-loss hessians vary: the scan's row counts are estimated from them as LightGBM's are."""
    X, z = _data("star", seed=2)
    y = np.digitize(z, np.quantile(z, np.linspace(0, 1, n_classes + 1)[1:-1]))
    w = np.random.default_rng(2).random(len(y)) + 0.5 if weighted else None
    model = GradientBoostingClassifier(n_estimators=5, num_leaves=10, plan="factorized")
    model.fit(X, y, sample_weight=w)
    params = dict(objective="binary" if n_classes == 2 else "multiclass")
    if n_classes > 2:
        params["num_class"] = n_classes
    booster = _lightgbm(model, X.materialize(), y, params, tmp_path, 5, w)
    assert_same_trees(model.model_to_string(), booster.model_to_string())


@pytest.mark.parametrize("kind", ["left join", "union"])
def test_every_input_and_plan_gives_the_same_model(kind):
    X, y = _data(kind, n=800)
    kw = dict(n_estimators=4, num_leaves=8, min_child_samples=5)

    def trees(model):  # the model text but its feature names (a matrix's columns, or Column_j)
        return [
            line for line in model.model_to_string().splitlines() if "feature_names=" not in line
        ]

    factorized = GradientBoostingRegressor(plan="factorized", **kw).fit(X, y)
    text = trees(factorized)
    D = X.materialize()
    # ilargi's learner on a table (plan="factorized" on an array), and LightGBM's (the others)
    ours = dict(plan="factorized", **kw)
    assert trees(GradientBoostingRegressor(**ours).fit(np.asarray(D), y)) == text
    assert trees(GradientBoostingRegressor(**ours).fit(sp.csr_matrix(D), y)) == text
    for fitted in (
        GradientBoostingRegressor(plan="materialized", **kw).fit(X, y),
        GradientBoostingRegressor(**kw).fit(np.asarray(D), y),
        GradientBoostingRegressor(**kw).fit(sp.csr_matrix(D), y),
    ):
        assert fitted.learner_ == "lightgbm" and fitted.plan_ == "materialized"
        assert_same_trees(factorized.model_to_string(), fitted.model_to_string())
    assert factorized.plan_ == "factorized"
    np.testing.assert_array_equal(
        factorized.predict(X), GradientBoostingRegressor(**ours).fit(D, y).predict(D)
    )


@pytest.mark.parametrize("snowflake", [False, True], ids=["star", "snowflake"])
def test_many_to_many_trains_on_the_pairs_as_lightgbm_on_the_join(snowflake, tmp_path, kernels):
    """A many-to-many join has one target row per matching pair, each source read through its
    index vector (the fact table's too): the learner trains on exactly the rows of the
    materialized join -- the same bins, trees and predictions with either plan, and LightGBM's
    trees on the joined table; prediction on a row selection of pairs stays exact."""
    X, z = make_star(
        1500,
        tuple_ratio=15,
        feature_ratio=1,
        n_dims=2,
        d_fact=2,
        noise=0.3,
        join="many_to_many",
        snowflake=snowflake,
        random_state=7,
    )
    fact = next(part for part in X.parts if part.name == "fact")
    assert X.shape[0] > fact.source.shape[0]  # pairs, not fact rows
    D = X.materialize()
    train, test = np.arange(X.shape[0]) % 4 != 0, np.arange(X.shape[0]) % 4 == 0
    for cls, y, params in (
        (GradientBoostingRegressor, z, dict(objective="regression")),
        (GradientBoostingClassifier, (z > np.median(z)).astype(int), dict(objective="binary")),
    ):
        kw = dict(n_estimators=6, num_leaves=12, min_child_samples=15)
        factorized = cls(plan="factorized", **kw).fit(X[train], y[train])
        materialized = cls(plan="materialized", **kw).fit(X[train], y[train])
        text = factorized.model_to_string()
        assert_same_trees(text, materialized.model_to_string())  # LightGBM's
        assert factorized.plan_ == "factorized" and materialized.plan_ == "materialized"
        booster = _lightgbm(factorized, D[train], y[train], params, tmp_path, 6)
        assert_same_trees(text, booster.model_to_string())
        reference = cls(plan="factorized", **kw).fit(D[train], y[train])
        raw = (
            (lambda m, A: m.predict(A))
            if cls is GradientBoostingRegressor
            else (lambda m, A: m.decision_function(A))
        )
        np.testing.assert_array_equal(raw(factorized, X[test]), raw(reference, D[test]))
        np.testing.assert_allclose(raw(factorized, X), raw(materialized, X), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "model, target",
    [
        (GradientBoostingRegressor(subsample=0.7, subsample_freq=1, colsample_bytree=0.6), "z"),
        (GradientBoostingClassifier(colsample_bytree=0.5), 2),
        (GradientBoostingClassifier(subsample=0.8, subsample_freq=2), 3),
    ],
    ids=["regression", "binary", "multiclass"],
)
def test_lightgbm_loads_the_model_and_predicts_the_same(model, target):
    X, z = _data("snowflake", n=1000, seed=3)
    y = z if target == "z" else np.digitize(z, np.quantile(z, np.linspace(0, 1, target + 1)[1:-1]))
    model.set_params(n_estimators=10, num_leaves=8, random_state=0).fit(X, y)
    raw = model.predict(X) if target == "z" else model.decision_function(X)
    D = X.materialize()
    np.testing.assert_allclose(model.booster_.predict(D, raw_score=True), raw, rtol=1e-9, atol=1e-9)
    if target != "z":
        np.testing.assert_allclose(
            model.booster_.predict(D).reshape(len(y), -1)[:, -1],
            model.predict_proba(X)[:, -1],
            rtol=1e-9,
        )
        assert model.score(X, y) > 0.6
    else:
        assert model.score(X, y) > 0.5


def test_predict_on_a_normalized_matrix_is_factorized_and_exact():
    X, y = _data("left join", n=600, seed=4)
    kw = dict(n_estimators=5, num_leaves=6, plan="factorized")
    model = GradientBoostingRegressor(**kw).fit(X[:400], y[:400])
    reference = GradientBoostingRegressor(**kw).fit(X[:400].materialize(), y[:400])
    np.testing.assert_array_equal(model.predict(X[400:]), reference.predict(X[400:].materialize()))


def test_early_stopping_as_lightgbm(tmp_path):
    X, y = _data("star", n=1200, seed=5)
    y = y + np.random.default_rng(5).standard_normal(len(y)) * 3  # noisy: it overfits early
    train, valid = np.arange(800), np.arange(800, 1200)
    model = GradientBoostingRegressor(
        n_estimators=200,
        num_leaves=31,
        learning_rate=0.3,
        min_child_samples=5,
        early_stopping_rounds=5,
        plan="factorized",
    ).fit(X[train], y[train], eval_set=[(X[valid], y[valid])])
    assert model.best_iteration_ < 200 and model.n_iter_ == model.best_iteration_
    history = model.evals_result_["valid_0"]["l2"]
    assert len(history) == model.best_iteration_ + 5
    assert model.best_score_["valid_0"]["l2"] == min(history)
    D = X.materialize()
    booster = _lightgbm(
        model,
        D[train],
        y[train],
        dict(objective="regression"),
        tmp_path,
        200,
        valid_sets=[lightgbm.Dataset(D[valid], y[valid])],
        callbacks=[lightgbm.early_stopping(5, verbose=False)],
    )
    assert booster.best_iteration == model.best_iteration_


def test_training_stops_when_nothing_splits():
    X, _ = _data("star", n=300)
    y = np.full(300, 2.5)
    model = GradientBoostingRegressor(n_estimators=10, plan="factorized").fit(X, y)
    assert model.n_iter_ == 1
    np.testing.assert_allclose(model.predict(X), 2.5)
    np.testing.assert_allclose(model.booster_.predict(X.materialize()), 2.5)


def test_importances_count_splits_and_sum_gains():
    X, y = _data("star", n=800)
    model = GradientBoostingRegressor(n_estimators=5, num_leaves=7, plan="factorized").fit(X, y)
    split = model.feature_importances_
    assert split.sum() == 5 * 6 and split.dtype.kind == "i"
    gain = model.set_params(importance_type="gain").feature_importances_
    np.testing.assert_allclose(gain, model.booster_.feature_importance("gain"), rtol=1e-6)
    np.testing.assert_array_equal(split, model.booster_.feature_importance("split"))


def test_clone_pickle_and_grid_search_on_a_normalized_matrix():
    X, y = _data("left join", n=600, seed=6)
    model = GradientBoostingRegressor(n_estimators=5, num_leaves=6, plan="factorized").fit(X, y)
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    assert clone(model).get_params() == model.get_params()
    assert not hasattr(clone(model), "_trees")
    search = GridSearchCV(
        GradientBoostingRegressor(n_estimators=5, plan="factorized"), {"num_leaves": [4, 8]}, cv=2
    ).fit(X, y)
    assert search.best_params_["num_leaves"] in (4, 8)
    assert search.best_estimator_.plan_ == "factorized"


def test_parameters_and_inputs_are_checked():
    X, y = _data("star", n=200)
    with pytest.raises(InvalidParameterError, match="num_leaves"):
        GradientBoostingRegressor(num_leaves=1).fit(X, y)
    with pytest.raises(InvalidParameterError, match="max_bin"):
        GradientBoostingRegressor(max_bin=256).fit(X, y)
    with pytest.raises(ValueError, match="2 classes"):
        GradientBoostingClassifier().fit(X, np.zeros(200))
    bad = NormalizedMatrix.from_parts(
        [np.array([[1.0], [np.inf]]), np.ones((1, 1))],
        [None, np.array([0, 0])],
        [[0], [1]],
        (2, 2),
        allow_nonfinite=True,
    )
    with pytest.raises(ValueError, match="infinity"):  # NaN is a missing value, inf is not
        GradientBoostingRegressor().fit(bad, np.zeros(2))
    with pytest.raises(ValueError, match="infinity"):
        GradientBoostingRegressor().fit(np.array([[1.0], [np.inf]]), np.zeros(2))


BAD = {
    "num_leaves": [2.5, 1, 0],
    "max_depth": ["deep", 2.5],
    "learning_rate": ["fast", 0, -0.1],
    "n_estimators": [1.5, 0],
    "min_split_gain": ["x", -1.0],
    "min_child_weight": ["x", -1.0],
    "min_child_samples": [1.5, -1],
    "subsample": ["x", 0, 1.5],
    "subsample_freq": [1.5, -1],
    "colsample_bytree": ["x", 0.0, 2.0],
    "reg_alpha": ["x", -1.0],
    "reg_lambda": ["x", -1.0],
    "max_bin": [2.5, 1, 256],
    "min_data_in_bin": [1.5, 0],
    "early_stopping_rounds": [1.5, 0],
    "categorical_feature": ["item", 3],
    "max_cat_to_onehot": [1.5, 0],
    "max_cat_threshold": [1.5, 0],
    "cat_l2": ["x", -1.0],
    "cat_smooth": ["x", -1.0],
    "min_data_per_group": [1.5, 0],
    "importance_type": [1, "weight"],
    "random_state": ["seed", -1],
    **PLAN,
}


@pytest.mark.parametrize("cls", [GradientBoostingRegressor, GradientBoostingClassifier])
def test_every_bad_parameter_is_named_before_the_data_are_touched(cls):
    assert set(BAD) == set(cls().get_params()) == set(cls._parameter_constraints)
    for name, values in BAD.items():
        for value in values:
            X, y, weights = Untouchable(), Untouchable(), Untouchable()
            with pytest.raises(InvalidParameterError, match=named(cls, name)):
                cls(**{name: value}).fit(X, y, weights)
            assert X.touched == y.touched == weights.touched == []


def _one_hot(seed, n=2500, target="z"):
    """A star of one-hot CSR dimensions (an identity block plus a few extra columns a row; some
    dimension rows never referenced, some fact rows absent) and a dense fact column."""
    rng = np.random.default_rng(seed)
    sources, rows, cols, at, z = [np.round(rng.standard_normal((n, 1)), 1)], [None], [[0]], 1, 0.0
    for m, d in ((30, 45), (200, 230)):
        extra = sp.random(m, d - m, density=2 / (d - m), random_state=seed, format="csr")
        extra.data[:] = 1.0
        source = sp.hstack([sp.identity(m), extra], format="csr")
        fk = rng.integers(0, m - 2, n)
        fk[rng.random(n) < 0.05] = -1
        effect = rng.standard_normal(d)
        z = z + np.where(fk >= 0, (source @ effect)[np.maximum(fk, 0)], 0.0)
        sources.append(source)
        rows.append(fk)
        cols.append(list(range(at, at + d)))
        at += d
    X = NormalizedMatrix.from_parts(sources, rows, cols, (n, at))
    z = z + sources[0][:, 0] + 0.3 * rng.standard_normal(n)
    return X, (z if target == "z" else (z > np.median(z)).astype(int))


def _leaf_of(labels, leaf_labels):
    """Each row's leaf from the labels a tree learner returns."""
    leaf_of = np.full(int(labels.max()) + 1, -1)
    leaf_of[leaf_labels] = np.arange(leaf_labels.size)
    return leaf_of[labels]


def test_a_learner_reusing_its_buffers_grows_the_trees_of_fresh_ones(kernels):
    """A tree learner keeps its leaves' histogram buffers from tree to tree and builds only the
    features a leaf's parent could split: each tree equals the one a fresh learner grows."""
    from ilargi.models.gbdt_trees import GrowthParams, TreeLearner
    from ilargi.rewriter.histograms import BinnedMatrix

    X, _ = _one_hot(3)
    binned = BinnedMatrix.from_matrix(X)
    params = GrowthParams(num_leaves=15, min_data_in_leaf=10)
    reused = TreeLearner(binned, params)
    rng = np.random.default_rng(0)
    rows, features = np.arange(binned.n), np.ones(binned.d, dtype=bool)
    for _ in range(4):
        g = rng.standard_normal(binned.n).astype(np.float32)
        h = rng.random(binned.n).astype(np.float32) + 0.5
        ours, labels, leaf_labels = reused.grow(g, h, rows, features)
        fresh, *fresh_labels = TreeLearner(binned, params).grow(g, h, rows, features)
        assert ours.num_leaves > 2 and ours == fresh
        np.testing.assert_array_equal(_leaf_of(labels, leaf_labels), _leaf_of(*fresh_labels))
        np.testing.assert_array_equal(_leaf_of(labels, leaf_labels), ours.leaves(binned))
    assert 0 < len(reused._free) <= params.num_leaves  # one buffer a leaf at most, kept


@pytest.mark.parametrize("target", ["z", "binary"])
def test_one_hot_sparse_dimensions_grow_lightgbms_trees(target, tmp_path, kernels):
    """Sparse one-hot dimensions (codes stored off the zero bin, its bin rebuilt from the leaf's
    totals, as LightGBM rebuilds its most frequent bin) grow LightGBM's trees on the joined CSR."""
    X, y = _one_hot(7, target=target)
    cls = GradientBoostingRegressor if target == "z" else GradientBoostingClassifier
    model = cls(n_estimators=8, num_leaves=15, min_child_samples=10, plan="factorized").fit(X, y)
    D = X.materialize()
    assert sp.issparse(D)
    objective = dict(objective="regression" if target == "z" else "binary")
    booster = _lightgbm(model, D, y, objective, tmp_path, 8)
    assert_same_trees(model.model_to_string(), booster.model_to_string())
    splits = [int(f) for t in _trees(model.model_to_string()) for f in t["split_feature"]]
    assert any(f > 0 for f in splits)  # the dimensions' one-hot columns split
    reference = cls(n_estimators=8, num_leaves=15, min_child_samples=10, plan="factorized")
    reference = reference.fit(D, y)
    test = X[np.arange(100, 400)]  # fewer rows than a dimension: routed through sparse codes
    np.testing.assert_allclose(
        model.predict(test) if target == "z" else model.predict_proba(test),
        reference.predict(test.materialize())
        if target == "z"
        else reference.predict_proba(test.materialize()),
        rtol=1e-9,
        atol=1e-12,
    )


def test_what_the_compiled_passes_prefetch_changes_no_tree(monkeypatch):
    """The cut-offs that choose which cache lines the leaf passes and the sparse histograms ask
    for ahead (none; the defaults; every line of every leaf, table and held row) grow the same
    trees, bit for bit."""
    compiled = pytest.importorskip("ilargi.backend.compiled")
    X, y = _one_hot(7)
    texts = []
    for cuts in [(0, 1 << 62, 0), (8, 8192, 8), (X.shape[0] + 1, 1, 1)]:
        for name, value in zip(("SPARSE_LEAF", "FAR_SUMS", "SPARSE_ROWS_AHEAD"), cuts):
            monkeypatch.setattr(compiled, name, value)
        with cpu_kernels("compiled"):
            model = GradientBoostingRegressor(
                n_estimators=6, num_leaves=15, min_child_samples=10, plan="factorized"
            )
            texts.append(model.fit(X, y).model_to_string())
    assert texts[0] == texts[1] == texts[2]


def test_the_pre_filter_drops_only_features_that_never_split(kernels, monkeypatch):
    """Under squared error without weights the scan counts a leaf's rows exactly, and a leaf holds
    at most all rows' count on either side of a threshold: a feature none of whose thresholds
    leaves min_child_samples of all rows on both sides is left out of every tree's histograms
    (LightGBM's feature_pre_filter, on exact counts). Each feature dropped has no such threshold
    in the materialized codes, never splits in the trees grown without the filter, and those
    trees are the ones grown with it; where the scan estimates rows (log-loss), none is dropped."""
    from ilargi.models.gbdt_trees import GrowthParams, TreeLearner
    from ilargi.rewriter.histograms import BinnedMatrix

    X, y = _one_hot(5)
    binned = BinnedMatrix.from_matrix(X)
    min_rows = 40
    may = binned.may_split(min_rows)
    codes = binned.toarray()
    for f in range(binned.d):
        left = np.array([np.sum(codes[:, f] <= t) for t in range(binned.n_bins[f] - 1)])
        assert may[f] == bool(np.any((left >= min_rows) & (binned.n - left >= min_rows)))
    assert 0 < may.sum() < binned.d - 20  # many rare one-hot columns dropped, some kept
    params = dict(n_estimators=10, num_leaves=31, min_child_samples=min_rows, plan="factorized")
    filtered = GradientBoostingRegressor(**params).fit(X, y)
    exact = []
    original = TreeLearner._counts_exact

    def unfiltered_counts(self, h):
        exact.append(original(self, h))
        return None

    monkeypatch.setattr(TreeLearner, "_counts_exact", unfiltered_counts)
    unfiltered = GradientBoostingRegressor(**params).fit(X, y)
    assert exact and all(c == 1.0 for c in exact)  # the filtered fit had it on in every tree
    assert filtered.model_to_string() == unfiltered.model_to_string()
    splits = {int(f) for t in _trees(unfiltered.model_to_string()) for f in t["split_feature"]}
    assert splits and not splits & set(np.flatnonzero(~may).tolist())
    learner = original.__get__(TreeLearner(binned, GrowthParams(min_data_in_leaf=min_rows)))
    assert learner(np.full(binned.n, 0.25, np.float32)) == 0.25
    assert learner(np.linspace(0.1, 0.25, binned.n).astype(np.float32)) is None  # log-loss


@pytest.mark.parametrize("indirect", [False, True])
def test_partitions_of_every_size_keep_the_rows_order(indirect):
    """The compiled partition (one block in place; several with flags; big ones from both ends
    of one scratch) puts the rows that go left first, both sides in their order, as NumPy's."""
    from ilargi import threads
    from ilargi.backend import compiled, cpu
    from ilargi.backend.compiled.kernels import BIG_PARTITION

    rng = np.random.default_rng(1)
    n = BIG_PARTITION + 5000
    codes = rng.integers(0, 8, (400, 2)).astype(np.uint8)
    rows = rng.integers(-1, 399, n) if indirect else None
    if not indirect:
        codes = rng.integers(0, 8, (n, 2)).astype(np.uint8)
    with threads(2):
        for lo, hi in ((0, n), (10, 3000), (7, 100_000)):
            order = np.sort(rng.choice(n, n, replace=False)).astype(np.intp)
            expected = order.copy()
            k = compiled.partition_rows(order, lo, hi, codes, rows, 1, 3)
            assert k == cpu.partition_rows(expected, lo, hi, codes, rows, 1, 3)
            np.testing.assert_array_equal(order, expected)


@pytest.mark.parametrize("indirect", [False, True])
def test_splits_moving_one_side_match_numpys(indirect):
    """A split's moved side (scanned from a leaf's list, in blocks, or found through a table's
    inverse index) and the list's kept rows, both in order, and the labels after, as NumPy's;
    rows of the list labelled otherwise are dropped."""
    from ilargi import threads
    from ilargi.backend import cpu_trees
    from ilargi.backend.compiled import trees as compiled

    rng = np.random.default_rng(2)
    n = 3 * compiled.PARALLEL_SPLIT + 77
    n_rows = 400 if indirect else n
    codes = rng.integers(0, 8, (n_rows, 2)).astype(np.uint8)
    rows = rng.integers(-1, n_rows - 1, n) if indirect else None
    with threads(2):
        for size, side in ((n, True), (1000, False), (2 * compiled.PARALLEL_SPLIT + 5, True)):
            lst = np.sort(rng.choice(n, size, replace=False)).astype(np.intp)
            labels = rng.integers(0, 3, n).astype(np.uint8)  # label 0: the leaf's rows
            got = [lst.copy(), labels.copy(), np.empty(size + 1, dtype=np.intp)]
            want = [lst.copy(), labels.copy(), np.empty(size + 1, dtype=np.intp)]
            moved, kept = compiled.split_rows(got[0], got[1], 0, 5, codes, rows, 1, 3, side, got[2])
            assert (moved, kept) == cpu_trees.split_rows(
                want[0], want[1], 0, 5, codes, rows, 1, 3, side, want[2]
            )
            np.testing.assert_array_equal(got[0][:kept], want[0][:kept])
            np.testing.assert_array_equal(got[1], want[1])
            np.testing.assert_array_equal(got[2][:moved], want[2][:moved])
            assert moved + kept == np.count_nonzero(labels[lst] == 0)
    if indirect:
        inverse = compiled.inverse_index(rows, n_rows)
        expected = cpu_trees.inverse_index(rows, n_rows)
        for a, b in zip(inverse, expected):
            np.testing.assert_array_equal(a, b)
        flags = np.zeros(-(-n // 8) * 8, dtype=np.uint8)
        for keys in (np.array([3]), np.arange(0, n_rows, 2)):  # sorted, or read off flags
            labels = rng.integers(0, 3, n).astype(np.uint8)
            got, want = labels.copy(), labels.copy()
            out, expected = np.empty(n + 1, np.intp), np.empty(n + 1, np.intp)
            moved = compiled.split_by_keys(inverse, keys, got, 1, 7, flags, out)
            assert moved == cpu_trees.split_by_keys(inverse, keys, want, 1, 7, None, expected)
            np.testing.assert_array_equal(out[:moved], expected[:moved])
            np.testing.assert_array_equal(got, want)
            assert not flags.any()


@pytest.mark.parametrize("n_classes", [2, 3])
def test_a_rounds_hessians_are_let_go_before_the_next_rounds_are_made(n_classes, monkeypatch):
    """The learner keeps the sum of hessians that repeat (squared error's) by a weak reference:
    a classifier's hessians, new each round, are freed before the next round's are made (never
    two rounds' held at once)."""
    import weakref

    from ilargi.models import gbdt_objectives

    objective = gbdt_objectives.Binary if n_classes == 2 else gbdt_objectives.Softmax
    original = objective.gradients
    previous, alive = [], []

    def gradients(self, score):
        alive.append(bool(previous) and previous[-1]() is not None)
        g, h = original(self, score)
        previous.append(weakref.ref(h if h.base is None else h.base))
        return g, h

    monkeypatch.setattr(objective, "gradients", gradients)
    X, y = make_star(2000, 10.0, 1.0, d_fact=3, random_state=1)
    labels = np.digitize(y, np.quantile(y, np.linspace(0, 1, n_classes + 1)[1:-1]))
    GradientBoostingClassifier(n_estimators=5, num_leaves=7, plan="factorized").fit(X, labels)
    assert len(alive) == 5 and not any(alive)


def test_the_numpy_scan_of_features_of_one_bin_finds_no_threshold():
    """A leaf whose candidate features all have one bin (the NumPy scan, as the compiled one)."""
    from ilargi.models.gbdt_trees import GrowthParams, best_splits

    hist = np.ones((3, 3))
    n_bins, offsets = np.ones(3, dtype=np.intp), np.arange(3)
    gain, *_, splittable, _ = best_splits(
        hist, 1.0, 3.0, 3, n_bins, np.ones(3, bool), GrowthParams(min_data_in_leaf=0), offsets
    )
    assert np.all(gain == -np.inf) and not splittable.any()


def _star_table(n=900, seed=0):
    import pandas as pd

    from ilargi import Table

    rng = np.random.default_rng(seed)
    fact = pd.DataFrame(
        {
            "k": rng.integers(0, 40, n),
            "x": rng.normal(size=n).round(2),
            "c": rng.choice(["a", "b", "c"], n),
        }
    )
    dim = pd.DataFrame(
        {"k": np.arange(36), "z": rng.normal(size=36), "t": rng.choice(["u", "v"], 36)}
    )
    fact["y"] = fact["x"] * 2 + (fact["k"] % 3) + rng.normal(size=n) * 0.1
    fact["label"] = np.where(fact["y"] > fact["y"].median(), "hi", "lo")
    fact.loc[fact["k"] % 7 == 0, "label"] = "mid"
    return Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="left")


@pytest.mark.parametrize("categorical", ["ordinal", "onehot"])
@pytest.mark.parametrize("target", ["y", "label"])
def test_a_table_binned_as_read_trains_and_predicts_as_its_matrix(categorical, target):
    """Table.to_binned with the training rows' bins, sliced: the model of the NormalizedMatrix's
    training rows, bit for bit, and its predictions on the held-out rows."""
    table, features, s = _star_table(), ["x", "c", "z", "t"], 600
    X, y = table.to_matrix(features, target, categorical=categorical)
    B, y_binned = table.to_binned(features, target, categorical=categorical, fit_rows=slice(0, s))
    np.testing.assert_array_equal(y_binned, y)
    cls = GradientBoostingRegressor if target == "y" else GradientBoostingClassifier
    kw = dict(n_estimators=8, num_leaves=7, min_child_samples=5, plan="factorized")
    evals = dict(eval_set=[(X[s:], y[s:])])
    reference = cls(**kw).fit(X[:s], y[:s], **evals)
    model = cls(**{**kw, "plan": "auto"}).fit(B[:s], y[:s], eval_set=[(B[s:], y[s:])])
    assert model.plan_ == "factorized" and model.learner_ == "ilargi"
    assert model.model_to_string() == reference.model_to_string()
    assert model.evals_result_ == reference.evals_result_
    np.testing.assert_array_equal(model.predict(B[s:]), reference.predict(X[s:]))
    np.testing.assert_array_equal(model.predict(X[s:]), reference.predict(X[s:]))
    np.testing.assert_array_equal(model.feature_importances_, reference.feature_importances_)
    assert list(model.feature_names_in_) == X.columns
    rows = np.arange(s, 900, 2)
    np.testing.assert_array_equal(model.predict(B[rows]), reference.predict(X[rows]))


def test_grid_search_clone_and_pickle_on_a_binned_table():
    table = _star_table(seed=3)
    B, y = table.to_binned(["x", "c", "z", "t"], "y", categorical="ordinal")
    search = GridSearchCV(
        GradientBoostingRegressor(n_estimators=5, plan="factorized"), {"num_leaves": [4, 8]}, cv=2
    ).fit(B, y)
    assert search.best_params_["num_leaves"] in (4, 8)
    model = search.best_estimator_
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(B), model.predict(B))
    # the binned table itself, after fits have kept their buffers in it (processes of n_jobs)
    B_again = pickle.loads(pickle.dumps(B))
    assert B_again.binning == B.binning and B_again.columns == B.columns
    np.testing.assert_array_equal(model.predict(B_again), model.predict(B))
    scores = cross_val_score(
        GradientBoostingRegressor(n_estimators=3, plan="factorized"), B, y, cv=2, n_jobs=2
    )
    np.testing.assert_array_equal(
        scores,
        cross_val_score(GradientBoostingRegressor(n_estimators=3, plan="factorized"), B, y, cv=2),
    )


def test_a_binned_table_that_does_not_fit_the_model_is_refused():
    table = _star_table(seed=4)
    features = ["x", "c", "z", "t"]
    B, y = table.to_binned(features, "y", categorical="ordinal", max_bin=63)
    with pytest.raises(ValueError, match="binned with max_bin=63, min_data_in_bin=3"):
        GradientBoostingRegressor(n_estimators=2).fit(B, y)
    with pytest.raises(ValueError, match="trains with ilargi's learner"):
        GradientBoostingRegressor(n_estimators=2, max_bin=63, plan="materialized").fit(B, y)
    given, _ = table.to_binned(features, "y", categorical="ordinal", bounds=B.bounds)
    with pytest.raises(ValueError, match="binned with given bounds"):
        GradientBoostingRegressor(n_estimators=2, max_bin=63).fit(given, y)
    model = GradientBoostingRegressor(n_estimators=2, max_bin=63).fit(B, y)
    np.testing.assert_array_equal(model.predict(given), model.predict(B))
    other, _ = table.to_binned(features, "y", categorical="ordinal")
    with pytest.raises(ValueError, match="other bins than the training data"):
        model.predict(other)
    with pytest.raises(ValueError, match="yet now missing:\n- t"):
        model.predict(
            table.to_binned(features[:3], "y", categorical="ordinal", bounds=B.bounds[:3])[0]
        )
    X, _ = table.to_matrix(features, "y", categorical="ordinal")
    lgbm = GradientBoostingRegressor(n_estimators=2, plan="materialized").fit(X, y)
    with pytest.raises(TypeError, match="predicts from values, not bins"):
        lgbm.predict(other)


def test_other_estimators_refuse_a_binned_table_with_the_reason():
    from ilargi import LogisticRegression

    B, y = _star_table(seed=5).to_binned(["x", "z"], "y")
    with pytest.raises(TypeError, match="LogisticRegression takes a NormalizedMatrix.*to_matrix"):
        LogisticRegression().fit(B, y > 0)
