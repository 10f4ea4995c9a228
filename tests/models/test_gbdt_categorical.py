"""Categorical splits (``categorical_feature``): ilargi's learner grows LightGBM's trees.

* LightGBM's categorical bins (``BinMapper::FindBin`` of a categorical feature, every row),
  checked against the bins LightGBM writes (``feature_infos``) over random category counts;
* with the same parameters, ilargi's factorized fit and LightGBM on the materialized table with
  ``categorical_feature`` write the same trees -- the same split features, sets of categories
  (``cat_threshold``), decision types, children, leaf values, weights and counts to 1e-9 -- on a
  star, a left join, a snowflake and a union, categories in the fact table and in dimensions,
  one-vs-rest and many-vs-many splits, for regression, binary and multiclass log-loss, with
  the NumPy and the compiled kernels;
* the exported model loads in LightGBM and predicts what ilargi predicts, unseen categories
  included (they go right); plan="materialized" trains LightGBM to the same model;
* bad input is refused with the feature named: values that are not categories, a categorical
  feature of a sparse source, unknown names or positions, bins that do not match the model.
"""

import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

import ilargi
from ilargi import GradientBoostingClassifier, GradientBoostingRegressor
from ilargi.rewriter.bin_edges import category_bins, distinct_counts
from ilargi.rewriter.histograms import BinnedMatrix
from tests.models.test_gbdt import _lightgbm, _trees, assert_same_trees, kernels  # noqa: F401

lightgbm = pytest.importorskip("lightgbm")

LETTERS = list("abcdefghijklmnop")
COLUMNS = ["kind", "item", "price", "region", "size"]
CATEGORICAL = [0, 1, 3]  # kind (3 levels: one-vs-rest), item (40), region (16): many-vs-many


def _joined(kind, n=2500, seed=0):
    """A fact table of sales with a store dimension (and a city one for the snowflake): string
    categories in both, encoded as ordinal codes."""
    rng = np.random.default_rng(seed)
    m = 50
    stores = pd.DataFrame(
        {"store": np.arange(m), "size": rng.normal(size=m), "city": rng.integers(0, 12, m)}
    )
    cities = pd.DataFrame({"city": np.arange(12), "region": rng.choice(LETTERS, 12)})
    if kind != "snowflake":
        stores["region"] = rng.choice(LETTERS, m)
    keys = rng.integers(0, m + (5 if kind == "left join" else 0), n)  # some keys dangle
    fact = pd.DataFrame(
        {
            "store": keys,
            "kind": rng.choice(["x", "y", "z"], n),
            "item": rng.choice(40, n, p=rng.dirichlet(np.ones(40))),
            "price": rng.normal(size=n),
        }
    )
    dimension = ilargi.Table(stores, name="stores")
    if kind == "snowflake":
        dimension = dimension.merge(ilargi.Table(cities, name="cities"), on="city")
    if kind == "union":
        half = n // 2
        facts = ilargi.concat(
            [ilargi.Table(fact[:half], name="a"), ilargi.Table(fact[half:], name="b")]
        )
    else:
        facts = ilargi.Table(fact, name="sales")
    how = "left" if kind == "left join" else "inner"
    return facts.merge(dimension, on="store", how=how), rng


def _table(kind, n=2500, seed=0):
    joined, rng = _joined(kind, n, seed)
    X, _ = joined.to_matrix(columns=COLUMNS, categorical="ordinal")
    return X, rng


def _target(X, rng, task="regression"):
    D = X.materialize()
    effect = rng.normal(size=64)
    raw = D[:, 2] + effect[D[:, 3].astype(int)] + np.sin(D[:, 1]) + (D[:, 0] == 1)
    raw = raw + 0.3 * rng.normal(size=raw.size)
    if task == "regression":
        return raw
    cuts = np.quantile(raw, [0.5] if task == "binary" else [0.33, 0.66])
    return np.searchsorted(cuts, raw).astype(np.float64)


KINDS = ["star", "left join", "snowflake", "union"]
PARAMS = dict(n_estimators=6, num_leaves=10, min_child_samples=15, min_data_per_group=20)


@pytest.mark.parametrize("kind", KINDS)
def test_regression_trees_are_lightgbms(kind, tmp_path, kernels):  # noqa: F811
    X, rng = _table(kind)
    y = _target(X, rng)
    model = GradientBoostingRegressor(
        plan="factorized", categorical_feature=CATEGORICAL, **PARAMS
    ).fit(X, y)
    D = X.materialize()
    booster = _lightgbm(model, D, y, dict(objective="regression"), tmp_path, 6)
    ours, theirs = model.model_to_string(), booster.model_to_string()
    assert_same_trees(ours, theirs)
    for key in ("num_cat", "cat_boundaries", "cat_threshold"):
        assert [t.get(key) for t in _trees(ours)] == [t.get(key) for t in _trees(theirs)], key
    assert any(t["num_cat"] != ["0"] for t in _trees(ours))  # categorical splits were made
    types = {v for t in _trees(ours) for v in t["decision_type"]}
    assert {"2"} < types  # numerical and categorical nodes
    np.testing.assert_allclose(model.predict(X), booster.predict(D), rtol=1e-9, atol=1e-12)
    feature_infos = [line for line in ours.splitlines() if line.startswith("feature_infos=")]
    assert feature_infos == [
        line for line in theirs.splitlines() if line.startswith("feature_infos=")
    ]


@pytest.mark.parametrize("n_classes", [2, 3])
def test_classification_trees_are_lightgbms(n_classes, tmp_path, kernels):  # noqa: F811
    X, rng = _table("star", seed=3)
    y = _target(X, rng, "binary" if n_classes == 2 else "multiclass")
    weight = rng.uniform(0.5, 2.0, y.size)
    model = GradientBoostingClassifier(
        plan="factorized", categorical_feature=CATEGORICAL, **PARAMS
    ).fit(X, y, sample_weight=weight)
    objective = (
        dict(objective="binary") if n_classes == 2 else dict(objective="multiclass", num_class=3)
    )
    booster = _lightgbm(model, X.materialize(), y, objective, tmp_path, 6, weight=weight)
    assert_same_trees(model.model_to_string(), booster.model_to_string())


def test_penalties_one_vs_rest_and_limits_as_lightgbm(tmp_path, kernels):  # noqa: F811
    X, rng = _table("left join", seed=5)
    y = _target(X, rng)
    model = GradientBoostingRegressor(
        plan="factorized",
        categorical_feature=["item", "region"],
        n_estimators=5,
        num_leaves=8,
        reg_alpha=0.5,
        reg_lambda=2.0,
        max_cat_to_onehot=20,  # region (16 levels) one against the rest
        max_cat_threshold=5,
        cat_l2=3.0,
        cat_smooth=4.0,
        min_data_per_group=10,
        min_child_samples=10,
    ).fit(X, y)
    assert sorted(model._categorical) == [1, 3]
    booster = _lightgbm(model, X.materialize(), y, dict(objective="regression"), tmp_path, 5)
    assert_same_trees(model.model_to_string(), booster.model_to_string())


@pytest.mark.filterwarnings("ignore:X does not have valid feature names")
def test_the_model_loads_in_lightgbm_and_unseen_categories_go_right():
    X, rng = _table("star", seed=7)
    y = _target(X, rng)
    model = GradientBoostingRegressor(
        plan="factorized", categorical_feature=CATEGORICAL, **PARAMS
    ).fit(X, y)
    booster = lightgbm.Booster(model_str=model.model_to_string())
    D = X.materialize()
    np.testing.assert_allclose(booster.predict(D), model.predict(X), rtol=1e-12, atol=1e-12)
    unseen = D.copy()
    unseen[:, 1] = 1000.0  # an item never seen: every categorical split sends it right
    unseen[:, 3] = 99.0
    np.testing.assert_allclose(model.predict(unseen), booster.predict(unseen), rtol=1e-12)


def test_the_materialized_plan_trains_lightgbm_to_the_same_model():
    X, rng = _table("snowflake", seed=2)
    y = _target(X, rng)
    kw = dict(categorical_feature=CATEGORICAL, **PARAMS)
    ours = GradientBoostingRegressor(plan="factorized", **kw).fit(X, y)
    theirs = GradientBoostingRegressor(plan="materialized", **kw).fit(X, y)
    assert theirs.learner_ == "lightgbm"
    assert_same_trees(ours.model_to_string(), theirs.model_to_string())
    np.testing.assert_allclose(ours.predict(X), theirs.predict(X), rtol=1e-9, atol=1e-12)


def test_early_stopping_on_a_validation_set_as_lightgbm():
    X, rng = _table("union", seed=9)
    y = _target(X, rng)
    kw = dict(
        categorical_feature=CATEGORICAL,
        n_estimators=60,
        learning_rate=0.3,
        early_stopping_rounds=3,
        num_leaves=10,
        min_child_samples=15,
        min_data_per_group=20,
    )
    fit = dict(eval_set=[(X[2000:], y[2000:])])
    ours = GradientBoostingRegressor(plan="factorized", **kw).fit(X[:2000], y[:2000], **fit)
    theirs = GradientBoostingRegressor(plan="materialized", **kw).fit(X[:2000], y[:2000], **fit)
    assert ours.best_iteration_ == theirs.best_iteration_ < 60
    np.testing.assert_allclose(
        ours.evals_result_["valid_0"]["l2"], theirs.evals_result_["valid_0"]["l2"], rtol=1e-9
    )
    assert_same_trees(ours.model_to_string(), theirs.model_to_string())


def test_clone_pickle_and_grid_search_keep_the_categories():
    X, rng = _table("star", seed=4)
    y = _target(X, rng)
    model = GradientBoostingRegressor(
        plan="factorized", categorical_feature=["kind", "item", "region"], **PARAMS
    )
    search = GridSearchCV(model, {"cat_l2": [1.0, 10.0]}, cv=2).fit(X, y)
    fitted = search.best_estimator_
    assert sorted(fitted._categorical) == CATEGORICAL
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.predict(X), fitted.predict(X))
    assert clone(model).get_params()["categorical_feature"] == ["kind", "item", "region"]
    B = pickle.loads(pickle.dumps(BinnedMatrix.from_matrix(X, categorical=CATEGORICAL)))
    assert sorted(B.categorical) == CATEGORICAL and sorted(B[10:20].categorical) == CATEGORICAL


def test_a_binned_matrix_with_the_same_categories_trains_the_same_model():
    X, rng = _table("star", seed=6)
    y = _target(X, rng)
    kw = dict(plan="factorized", categorical_feature=CATEGORICAL, **PARAMS)
    model = GradientBoostingRegressor(**kw).fit(X, y)
    B = BinnedMatrix.from_matrix(X, categorical=CATEGORICAL)
    binned = GradientBoostingRegressor(**kw).fit(B, y)
    assert binned.model_to_string() == model.model_to_string()
    with pytest.raises(ValueError, match="categorical features \\[0, 1, 3\\]"):
        GradientBoostingRegressor(plan="factorized").fit(B, y)
    plain = GradientBoostingRegressor(plan="factorized").fit(BinnedMatrix.from_matrix(X), y)
    with pytest.raises(ValueError, match="other bins"):
        plain.predict(B)


def test_what_is_not_a_category_is_refused_with_the_feature_named():
    X, rng = _table("star")
    y = _target(X, rng)
    with pytest.raises(ValueError, match="categorical feature 'price' holds"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=["price"]).fit(X, y)
    with pytest.raises(ValueError, match="not a feature name"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=["nope"]).fit(X, y)
    with pytest.raises(ValueError, match="not a feature of X"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=[7]).fit(X, y)
    with pytest.raises(ValueError, match="twice"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=[1, "item"]).fit(X, y)
    with pytest.raises(TypeError, match="positions or names"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=[1.5]).fit(X, y)
    negative = X.materialize()
    negative[0, 1] = -2.0
    with pytest.raises(ValueError, match="categorical feature 1 holds -2.0"):
        GradientBoostingRegressor(plan="factorized", categorical_feature=[1]).fit(negative, y)
    model = GradientBoostingRegressor(plan="factorized", categorical_feature=[1], **PARAMS)
    model.fit(X.materialize(), y)
    with pytest.raises(ValueError, match="holds 2.5"):
        model.predict(np.where(np.arange(5) == 1, 2.5, X.materialize()[:3]))
    onehot, _ = _table_onehot()
    with pytest.raises(ValueError, match="sparse sources"):
        BinnedMatrix.from_matrix(onehot, categorical=[0])


def _table_onehot():
    rng = np.random.default_rng(0)
    fact = pd.DataFrame({"kind": rng.choice(["x", "y"], 200), "v": rng.normal(size=200)})
    return ilargi.Table(fact, name="f").to_matrix(categorical="onehot")


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 60), min_size=1, max_size=300),
    max_bin=st.sampled_from([2, 4, 15, 63, 255]),
    min_data_in_bin=st.sampled_from([1, 3, 10]),
    seed=st.integers(0, 2**16),
)
def test_category_bins_are_lightgbms(counts, max_bin, min_data_in_bin, seed):
    rng = np.random.default_rng(seed)
    categories = rng.choice(5000, len(counts), replace=False)
    values = np.repeat(categories, counts).astype(np.float64)
    found, _ = category_bins(*distinct_counts(values), max_bin, min_data_in_bin)
    data = lightgbm.Dataset(
        values.reshape(-1, 1),
        np.zeros(values.size),
        categorical_feature=[0],
        params=dict(
            verbose=-1,
            max_bin=max_bin,
            min_data_in_bin=min_data_in_bin,
            feature_pre_filter=False,
            bin_construct_sample_cnt=values.size + 1,
        ),
    ).construct()
    booster = lightgbm.Booster(dict(verbose=-1), data)
    infos = booster.model_to_string().split("feature_infos=")[1].split("\n")[0]
    expected = "none" if found.size <= 1 else ":".join(str(int(c)) for c in found)
    assert infos == expected


def test_a_table_binned_as_read_trains_the_same_categorical_model():
    joined, rng = _joined("left join", seed=8)
    X, _ = joined.to_matrix(columns=COLUMNS, categorical="ordinal")
    y = _target(X, rng)
    s = 2000
    names = ["kind", "item", "region"]
    B, _ = joined.to_binned(
        COLUMNS, categorical="ordinal", fit_rows=slice(0, s), categorical_features=names
    )
    assert sorted(B.categorical) == CATEGORICAL
    kw = dict(plan="factorized", categorical_feature=names, **PARAMS)
    ours = GradientBoostingRegressor(**kw).fit(B[:s], y[:s])
    theirs = GradientBoostingRegressor(**kw).fit(X[:s], y[:s])
    assert ours.model_to_string() == theirs.model_to_string()
    np.testing.assert_array_equal(ours.predict(B[s:]), theirs.predict(X[s:]))
    again, _ = joined.to_binned(
        COLUMNS, categorical="ordinal", bounds=B.bounds, categorical_features=B.categorical
    )
    np.testing.assert_array_equal(ours.predict(again[s:]), theirs.predict(X[s:]))
    with pytest.raises(ValueError, match="not features of X"):
        joined.to_binned(COLUMNS, categorical="ordinal", categorical_features=["nope"])


@settings(max_examples=80, deadline=None)
@given(
    n_bins=st.integers(2, 60),
    seed=st.integers(0, 2**16),
    onehot=st.sampled_from([4, 64]),
    l1=st.sampled_from([0.0, 0.3]),
    per_group=st.sampled_from([1, 5, 100]),
)
def test_the_compiled_categorical_scan_is_the_python_one(n_bins, seed, onehot, l1, per_group):
    from ilargi.backend import compiled
    from ilargi.models.gbdt_categorical import CategoricalParams, best_categorical_split
    from ilargi.models.gbdt_gains import K_EPSILON, _leaf_gain_float
    from ilargi.models.gbdt_trees import GrowthParams

    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 80, n_bins).astype(np.float64)
    hist = np.column_stack([rng.normal(size=n_bins) * rows, rows, rows])
    count = int(rows.sum())
    G, H = float(hist[:, 0].sum()), float(rows.sum()) + 2 * K_EPSILON
    growth = GrowthParams(min_data_in_leaf=5, lambda_l1=l1, lambda_l2=1.0)
    cat = CategoricalParams(max_cat_to_onehot=onehot, cat_smooth=3.0, min_data_per_group=per_group)
    want = best_categorical_split(hist, G, H, count, growth, cat)
    shift = _leaf_gain_float(G, H, l1, 1.0)
    params = [l1, 1.0, 5, 1e-3, shift, K_EPSILON, onehot, 32, 10.0, 3.0, per_group]
    out, splittable, left = compiled.categorical_splits(
        np.vstack([np.zeros((3, 3)), hist]), np.array([3]), np.array([n_bins]), G, H, count, params
    )
    assert bool(splittable[0]) == want.splittable
    assert out[0, 0] == want.gain
    if want.splittable:
        np.testing.assert_array_equal(left[0, : int(out[0, 1])], want.bins)
        assert (out[0, 2], out[0, 3], int(out[0, 4])) == (
            want.left_gradient,
            want.left_hessian,
            want.left_count,
        )
        assert out[0, 5] == want.reg_lambda


def test_a_model_pickled_before_categorical_splits_still_loads_and_writes_its_text():
    X, rng = _table("star", seed=11)
    y = _target(X, rng)
    model = GradientBoostingRegressor(plan="factorized", n_estimators=3, num_leaves=6).fit(X, y)
    text = model.model_to_string()
    del model.__dict__["_categorical"]  # as an older version's fitted estimator holds it
    for tree in model._trees:
        for name in ("decision_type", "cat_boundaries", "cat_threshold"):
            del tree.__dict__[name]
    again = pickle.loads(pickle.dumps(model))
    assert again.model_to_string() == text
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
