"""The scikit-learn estimator contract, checked by scikit-learn itself, on plain arrays.

Every public estimator of ilargi runs ``check_estimator``'s checks at its default parameters (and a
few other settings), with no expected failure: GNMF's ``fit_transform`` returns the W that
``transform`` solves for the fitted H, so the two agree without tuning ``tol``/``max_iter``.
"""

import inspect

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator
from sklearn.utils.estimator_checks import parametrize_with_checks

import ilargi.models
from ilargi.datasets import make_star
from ilargi.models import (
    GNMF,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    KMeans,
    LinearRegression,
    LogisticRegression,
    Ridge,
    StandardScaler,
)

ESTIMATORS = [
    LinearRegression(),
    Ridge(),
    Ridge(solver="cg"),
    Ridge(solver="lsqr"),
    LogisticRegression(),
    # "gd" converges slowly by design (a fixed step); enough steps to fit the checks' small data.
    LogisticRegression(solver="gd", max_iter=2000),
    KMeans(),
    GNMF(),
    GNMF(n_components=3, max_iter=5),  # the contract holds however far the updates got
    StandardScaler(),
    StandardScaler(with_mean=False),
    GradientBoostingRegressor(),
    GradientBoostingClassifier(),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_contract(estimator, check, monkeypatch):
    # scikit-learn skips its "array API dispatch with NumPy inputs" check unless this variable is
    # set; the check only reads it, so setting it here runs the check instead of skipping it.
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    check(estimator)


def test_every_public_estimator_is_checked_at_its_defaults():
    """A new estimator in ilargi.models cannot skip the contract: each one appears above with its
    default parameters."""
    public = {
        obj
        for _, obj in inspect.getmembers(ilargi.models, inspect.isclass)
        if issubclass(obj, BaseEstimator)
    }
    defaults = {type(e) for e in ESTIMATORS if e.get_params() == type(e)().get_params()}
    assert public and public <= defaults, public - defaults


@pytest.mark.parametrize("plan", ["factorized", "materialized"])
def test_gnmf_fit_transform_is_fit_then_transform_on_a_normalized_matrix(plan):
    X, _ = make_star(600, tuple_ratio=6, d_fact=3, target=None, random_state=0)
    X = abs(X)
    for max_iter in (3, 200):
        model = GNMF(3, max_iter=max_iter, random_state=0, plan=plan)
        W = model.fit_transform(X)
        np.testing.assert_allclose(W, model.transform(X), rtol=1e-9, atol=1e-12)
        # the W returned is at least as good as the last update's (reconstruction_err_)
        error = np.linalg.norm(X.toarray() - W @ model.components_)
        assert error <= model.reconstruction_err_ * (1 + 1e-9)
        np.testing.assert_allclose(model.fit(X).components_, model.components_, rtol=1e-12)


def test_gnmf_transform_of_rows_does_not_depend_on_the_other_rows():
    rng = np.random.default_rng(1)
    X = rng.random((300, 3)) @ rng.random((3, 12)) + 0.05 * rng.random((300, 12))
    model = GNMF(3, random_state=0).fit(X)
    W = model.transform(X)
    order = rng.permutation(300)
    # the same computation per row; only BLAS's blocking of the batched solves may differ
    np.testing.assert_allclose(model.transform(X[order]), W[order], rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(model.transform(X[:7]), W[:7], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_kmeans_refuses_a_nonfinite_init(bad):
    X = np.random.default_rng(0).random((20, 2))
    init = np.array([[0.1, 0.2], [0.8, 0.9]])
    init[1, 0] = bad
    before = init.copy()
    with pytest.raises(ValueError, match="init must hold finite numbers"):
        KMeans(2, init=init).fit(X)
    np.testing.assert_array_equal(init, before)


def test_kmeans_refuses_an_init_of_another_shape_or_kind():
    X = np.random.default_rng(0).random((20, 2))
    with pytest.raises(ValueError, match=r"init has shape \(2,\), expected \(2, 2\)"):
        KMeans(2, init=np.zeros(2)).fit(X)
    with pytest.raises(ValueError, match="init must hold finite numbers"):
        KMeans(2, init=[[0, 0], [1, "a"]]).fit(X)
    with pytest.raises(ValueError, match="init must be an array of shape"):
        KMeans(2, init=[[0], [1, 2]]).fit(X)


def _transformers():
    return [GNMF(2, random_state=0), KMeans(2, random_state=0), StandardScaler()]


@pytest.mark.parametrize("estimator", _transformers(), ids=lambda e: type(e).__name__)
def test_set_output_pandas_on_frames_arrays_and_normalized_matrices(estimator):
    frame = pd.DataFrame(
        np.random.default_rng(0).random((30, 3)), columns=["a", "b", "c"], index=np.arange(100, 130)
    )
    nm, _ = make_star(40, tuple_ratio=4, d_fact=2, target=None, random_state=0)
    nm = abs(nm)
    for X, index in (
        (frame, frame.index),
        (frame.to_numpy(), pd.RangeIndex(30)),
        (nm, pd.RangeIndex(40)),
    ):
        expected = estimator.set_output(transform="default").fit(X).transform(X)
        expected = expected.toarray() if hasattr(expected, "toarray") else expected
        model = estimator.set_output(transform="pandas")
        for out in (model.fit_transform(X), model.fit(X).transform(X)):
            assert isinstance(out, pd.DataFrame)
            assert list(out.columns) == list(model.get_feature_names_out())
            assert out.index.equals(index)
            np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-9, atol=1e-12)
    estimator.set_output(transform="default")
