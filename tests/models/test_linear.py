"""LinearRegression and Ridge: parity with scikit-learn, every solver, and the fallbacks."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model as sk

from ilargi.models import LinearRegression, Ridge
from ilargi.models.linear import MAX_GRAM_FEATURES

RTOL = 1e-6  # issue 4: coefficients within 1e-6 relative of scikit-learn's


def relative(actual, expected):
    return float(
        np.max(np.abs(np.asarray(actual) - expected)) / max(np.max(np.abs(expected)), 1e-300)
    )


def regression_data(n=300, d=8, targets=None, seed=0, sparse=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + rng.uniform(
        -3, 3, size=d
    )  # non-zero means exercise the centering
    if sparse:
        X = sp.csr_matrix(X * (rng.random((n, d)) < 0.4))
    coef = rng.normal(size=(d,) if targets is None else (d, targets))
    signal = X @ coef
    y = signal + 2.5 + 0.1 * rng.normal(size=signal.shape)
    return X, y, rng.uniform(0.1, 3.0, size=n)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("targets", [None, 3])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_linear_regression_matches_sklearn(sparse, targets, weighted, fit_intercept):
    X, y, w = regression_data(targets=targets, sparse=sparse)
    w = w if weighted else None
    ours = LinearRegression(fit_intercept=fit_intercept).fit(X, y, sample_weight=w)
    ref = sk.LinearRegression(fit_intercept=fit_intercept).fit(X, y, sample_weight=w)
    assert ours.solver_ == "cholesky"
    assert ours.coef_.shape == ref.coef_.shape
    assert relative(ours.coef_, ref.coef_) < RTOL
    assert np.allclose(ours.intercept_, ref.intercept_, rtol=RTOL, atol=1e-9)
    assert np.allclose(ours.predict(X), ref.predict(X), rtol=1e-8)


@pytest.mark.parametrize("solver", ["cholesky", "cg", "lsqr"])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_ridge_solvers_match_sklearn(solver, sparse, weighted):
    X, y, w = regression_data(targets=2, sparse=sparse, seed=1)
    w = w if weighted else None
    ours = Ridge(alpha=3.0, solver=solver).fit(X, y, sample_weight=w)
    ref = sk.Ridge(alpha=3.0, solver="cholesky").fit(
        X.toarray() if sparse else X, y, sample_weight=w
    )
    assert ours.solver_ == solver
    assert relative(ours.coef_, ref.coef_) < RTOL
    assert relative(ours.intercept_, ref.intercept_) < RTOL
    if solver != "cholesky":
        assert ours.n_iter_ >= 1


def test_wide_problem_goes_to_lsqr_and_gives_the_minimum_norm_solution():
    X, y, _ = regression_data(n=20, d=40, seed=2)
    ours = LinearRegression().fit(X, y)
    ref = sk.LinearRegression().fit(X, y)  # lstsq: the minimum-norm solution
    assert ours.solver_ == "lsqr"
    assert relative(ours.coef_, ref.coef_) < RTOL


def test_singular_gram_falls_back_to_lsqr():
    # One-hot blocks sum to the intercept column: the centered Gram matrix is singular, as in the
    # one-hot star schemas.
    rng = np.random.default_rng(3)
    X = np.eye(4)[rng.integers(0, 4, size=200)]
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.01 * rng.normal(size=200)
    ours = LinearRegression(solver="cholesky").fit(X, y)
    ref = sk.LinearRegression().fit(X, y)
    assert ours.solver_ == "lsqr"
    assert np.allclose(ours.predict(X), ref.predict(X), rtol=1e-8)
    assert relative(ours.coef_, ref.coef_) < RTOL


def test_many_sparse_features_never_build_a_dense_gram(monkeypatch):
    import ilargi.models._ops as ops  # the fit's statistics (normal_equations) take it from there

    def refuse(*args, **kwargs):
        raise AssertionError("built a d x d Gram matrix")

    monkeypatch.setattr(ops, "crossprod", refuse)
    n, d = 3000, MAX_GRAM_FEATURES + 1
    rng = np.random.default_rng(4)
    X = sp.csr_matrix(
        (np.ones(2 * n), (np.repeat(np.arange(n), 2), rng.integers(0, d, 2 * n))), shape=(n, d)
    )
    y = rng.normal(size=n)
    model = Ridge(alpha=1.0).fit(X, y)
    ref = sk.Ridge(alpha=1.0, solver="sparse_cg", tol=1e-12).fit(X, y)
    assert model.solver_ == "lsqr"
    assert relative(model.coef_, ref.coef_) < 1e-5


def test_iterative_solver_warns_when_it_runs_out_of_iterations():
    X, y, _ = regression_data(seed=5)
    with pytest.warns(Warning, match="did not converge"):
        Ridge(solver="cg", max_iter=1).fit(X, y)


def test_bad_parameters_are_named():
    X, y, _ = regression_data(n=30, d=3)
    with pytest.raises(ValueError, match="solver"):
        Ridge(solver="svd").fit(X, y)
    with pytest.raises(ValueError, match="alpha"):
        Ridge(alpha=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="plan"):
        Ridge(plan="lazy").fit(X, y)


def test_progress_bar(capsys):
    X, y, _ = regression_data(n=50, d=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Ridge(solver="cg", verbose=True).fit(X, y)
    assert "Ridge fit (cg)" in capsys.readouterr().err


def test_badly_scaled_features_stay_on_the_closed_form():
    # Columns on scales 1e-3 .. 1e4 (prices next to fractions): the raw Gram matrix has a tiny
    # reciprocal condition number, the equilibrated one does not.
    rng = np.random.default_rng(6)
    X = rng.normal(size=(500, 4)) * np.array([1e-3, 1.0, 1e2, 1e4]) + np.array([0.0, 5.0, 1e3, 2e5])
    y = X @ np.array([300.0, 2.0, 0.01, 1e-4]) + rng.normal(size=500)
    ours = Ridge(alpha=1e-3).fit(X, y)
    ref = sk.Ridge(alpha=1e-3, solver="cholesky").fit(X, y)
    assert ours.solver_ == "cholesky"
    assert relative(ours.coef_, ref.coef_) < RTOL
