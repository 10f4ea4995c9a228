"""Every estimator trains on a Dask-backed matrix and a Dask (or NumPy) target to the model the
in-memory matrix gives (1e-8 relative), on a LocalCluster; predictions are Dask arrays."""

import warnings

import dask.array as da
import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import ilargi
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler
from tests.scaleout.conftest import assert_close, scenario


@pytest.fixture(scope="module", params=["dense", "snowflake"])
def data(request, client):
    X, y = scenario(request.param)
    return X, X.to_dask(chunks=(50, 7, 200)), y, X.to_dask(chunks=64, persist=False)


def _fit(estimator, X, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return estimator.fit(X, *args, **kwargs)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LinearRegression(),
        lambda: Ridge(alpha=2.0),
        lambda: Ridge(alpha=2.0, solver="cg", tol=1e-12),
        lambda: Ridge(alpha=1.0, fit_intercept=False),
    ],
    ids=["linear", "ridge", "ridge-cg", "ridge-no-intercept"],
)
def test_least_squares(data, make):
    X, D, y, lazy = data
    sw = np.random.default_rng(0).uniform(0.5, 2.0, X.shape[0])
    for matrix, target, weights in ((D, y, None), (lazy, D.align(y), sw)):
        expected = _fit(make().set_params(plan="factorized"), X, y, sample_weight=weights)
        model = _fit(make(), matrix, target, sample_weight=weights)
        assert model.plan_ == "factorized"
        assert_close(model.coef_, expected.coef_, what="coef")
        assert_close(model.intercept_, expected.intercept_, what="intercept")
        prediction = model.predict(matrix)
        assert isinstance(prediction, da.Array)
        assert_close(prediction.compute(), expected.predict(X), what="predict")
        assert abs(model.score(matrix, target, weights) - expected.score(X, y, weights)) < 1e-10


# Newton-CG stopped early amplifies rounding (its truncated inner solves decide on thresholds):
# the in-memory fit alone moves by 1e-5 between 1 and 2 kernel threads after 15 iterations at
# tol=1e-4. At its optimum the model is well defined, so it is compared there; at tol=1e-10 the
# last steps move the loss by less than its rounding, so when they stop is rounding too (± 2).
SETTINGS = {
    "lbfgs": dict(max_iter=15),
    "gd": dict(max_iter=15),
    "newton-cg": dict(max_iter=100, tol=1e-10),
}


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg", "gd"])
def test_logistic(data, solver):
    X, D, y, lazy = data
    labels = (y > np.median(y)).astype(float)
    settings = dict(solver=solver, C=2.0, **SETTINGS[solver])
    expected = _fit(LogisticRegression(plan="factorized", **settings), X, labels)
    model = _fit(LogisticRegression(**settings), lazy, D.align(labels))
    assert abs(model.n_iter_ - expected.n_iter_) <= 2 * (solver == "newton-cg")
    assert_close(model.coef_, expected.coef_, what="coef")
    assert_close(model.intercept_, expected.intercept_, what="intercept")
    history = slice(None) if solver != "newton-cg" else slice(-1, None)
    np.testing.assert_allclose(
        model.loss_history_[history], expected.loss_history_[history], rtol=1e-8
    )
    proba = model.predict_proba(D)
    assert isinstance(proba, da.Array)
    assert_close(proba.compute(), expected.predict_proba(X), what="predict_proba")
    np.testing.assert_array_equal(model.predict(D).compute(), expected.predict(X))
    assert model.score(D, labels) == expected.score(X, labels)


def test_multinomial_and_weights(client):
    X, y = scenario("snowflake")
    codes = np.digitize(y, np.quantile(y, [0.3, 0.7])).astype(float)
    sw = np.random.default_rng(1).uniform(0.5, 2.0, X.shape[0])
    settings = dict(solver="lbfgs", max_iter=15)
    expected = _fit(LogisticRegression(plan="factorized", **settings), X, codes, sample_weight=sw)
    model = _fit(
        LogisticRegression(**settings), X.to_dask(chunks=(50, 7, 200)), codes, sample_weight=sw
    )
    assert_close(model.coef_, expected.coef_, what="lbfgs coef")
    assert_close(model.intercept_, expected.intercept_, what="lbfgs intercept")
    # Newton-CG's softmax Hessian products, a few steps: one partition and one kernel thread on
    # both sides sum in the same order (see SETTINGS for why several partitions would not)
    settings = dict(solver="newton-cg", max_iter=3)
    with ilargi.threads(1):
        expected = _fit(
            LogisticRegression(plan="factorized", **settings), X, codes, sample_weight=sw
        )
    D = X.to_dask(chunks=X.shape[0])
    model = _fit(LogisticRegression(**settings), D, codes, sample_weight=sw)
    assert_close(model.coef_, expected.coef_, what="newton-cg coef")
    np.testing.assert_array_equal(model.predict(D).compute(), expected.predict(X))
    np.testing.assert_array_equal(model.classes_, expected.classes_)


def test_kmeans(data):
    X, D, _, lazy = data
    expected = _fit(KMeans(n_clusters=4, random_state=0, plan="factorized"), X)
    for matrix in (D, lazy):
        model = _fit(KMeans(n_clusters=4, random_state=0), matrix)
        assert model.n_iter_ == expected.n_iter_
        assert_close(model.cluster_centers_, expected.cluster_centers_, what="centers")
        assert_close(model.inertia_, expected.inertia_, what="inertia")
        assert isinstance(model.labels_, da.Array)
        np.testing.assert_array_equal(model.labels_.compute(), expected.labels_)
        np.testing.assert_array_equal(model.predict(matrix).compute(), expected.predict(X))
        assert_close(model.transform(matrix).compute(), expected.transform(X), what="transform")
        assert_close(model.score(matrix), expected.score(X), what="score")
    init = X[[1, 2, 3]].toarray()
    model = _fit(KMeans(n_clusters=3, init=init, max_iter=5), D)
    expected = _fit(KMeans(n_clusters=3, init=init, max_iter=5, plan="factorized"), X)
    assert_close(model.cluster_centers_, expected.cluster_centers_, what="given init")


def test_kmeans_relocates_empty_clusters(client):
    X, _ = scenario("dense")
    init = np.vstack([X[[0]].toarray(), X[[0]].toarray() + 1e6])  # the far center stays empty
    expected = _fit(KMeans(n_clusters=2, init=init, max_iter=3, plan="factorized"), X)
    model = _fit(KMeans(n_clusters=2, init=init, max_iter=3), X.to_dask(chunks=100))
    assert_close(model.cluster_centers_, expected.cluster_centers_, what="relocated centers")


def test_standard_scaler(data):
    X, D, y, _ = data
    expected = StandardScaler().fit(X)
    scaler = StandardScaler().fit(D)
    assert_close(scaler.mean_, expected.mean_, what="mean")
    assert_close(scaler.var_, expected.var_, what="var")
    assert_close(scaler.scale_, expected.scale_, what="scale")
    Z = scaler.transform(D)
    assert type(Z).__name__ == "DaskNormalizedMatrix"
    assert_close(Z.T @ y, expected.transform(X).T @ y, what="transformed Tᵀ·y")
    assert_close(scaler.inverse_transform(Z).sum(axis=0), X.sum(axis=0), what="inverse")
    model = _fit(Ridge(alpha=1.0), Z, y)
    reference = _fit(Ridge(alpha=1.0, plan="factorized"), expected.transform(X), y)
    assert_close(model.coef_, reference.coef_, what="ridge on the standardized matrix")


def test_refusals(data):
    X, D, y, _ = data
    with pytest.raises(ValueError, match="gather"):
        Ridge(plan="materialized").fit(D, y)
    with pytest.raises(ValueError, match="lsqr"):
        Ridge(solver="lsqr").fit(D, y)
    with pytest.raises(TypeError, match="Dask-backed"):
        GNMF(n_components=2).fit(abs(D))
    with pytest.raises(ValueError, match="rows"):
        Ridge().fit(D, y[:-1])
    with pytest.raises(ValueError, match="NaN"):
        Ridge().fit(D, np.where(np.arange(y.size) == 3, np.nan, y))
    with pytest.raises(ValueError, match="Negative"):
        Ridge().fit(D, y, sample_weight=-np.ones(y.size))
