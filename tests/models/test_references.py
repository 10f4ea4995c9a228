"""Estimators against independent references at tight tolerances, on arrays and on both plans.

KMeans: scikit-learn's Lloyd from the same initial centers, run to convergence with the same tol
and max_iter: centers and inertia to 1e-9 relative, the same labels and iteration count (a run
stopped a few Lloyd steps early fails). GNMF: a plain dense NumPy loop of the same multiplicative
updates, written here. Logistic (binary, multinomial) and least squares: scikit-learn's
coefficients at tol=1e-10, to 1e-6 relative.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model as sk
from scipy.optimize import nnls
from sklearn.cluster import KMeans as SkKMeans
from sklearn.datasets import make_blobs, make_classification

from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge

PLANS = ["factorized", "materialized"]


def relative(actual, expected):
    actual, expected = np.asarray(actual, float), np.asarray(expected, float)
    return float(np.abs(actual - expected).max() / max(np.abs(expected).max(), 1e-300))


def star(n=800, target=None, seed=0):
    return make_star(n, tuple_ratio=10, d_fact=3, target=target, noise=0.1, random_state=seed)


# --- KMeans ------------------------------------------------------------------------------------


def assert_same_kmeans(ours, ref):
    assert ours.n_iter_ == ref.n_iter_, "a different number of Lloyd iterations"
    assert np.array_equal(ours.labels_, ref.labels_)
    assert relative(ours.cluster_centers_, ref.cluster_centers_) <= 1e-9
    assert ours.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("tol", [1e-4, 0.0])
def test_kmeans_matches_sklearn_lloyd_on_arrays(sparse, seed, tol):
    X, _ = make_blobs(600, 5, centers=4, cluster_std=2.5, random_state=seed)
    init = X[np.random.default_rng(seed).choice(len(X), 5, replace=False)]
    data = sp.csr_matrix(X) if sparse else X
    ours = KMeans(5, init=init, tol=tol, max_iter=300).fit(data)
    ref = SkKMeans(5, init=init, n_init=1, algorithm="lloyd", tol=tol, max_iter=300).fit(data)
    assert ref.n_iter_ >= 8  # long enough that stopping 2-3 steps early changes the centers
    assert_same_kmeans(ours, ref)


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("seed", [0, 1])
def test_kmeans_matches_sklearn_lloyd_on_a_normalized_matrix(plan, seed):
    nm, _ = star(seed=seed)
    table = nm.toarray()
    init = table[np.random.default_rng(seed).choice(len(table), 4, replace=False)]
    ours = KMeans(4, init=init, plan=plan).fit(nm)
    ref = SkKMeans(4, init=init, n_init=1, algorithm="lloyd").fit(table)
    assert_same_kmeans(ours, ref)
    assert -ours.score(nm) == pytest.approx(ref.inertia_, rel=1e-9)


def test_kmeans_max_iter_is_honoured_like_sklearn():
    X, _ = make_blobs(600, 5, centers=4, cluster_std=2.5, random_state=2)
    init = X[:5]
    ours = KMeans(5, init=init, max_iter=3).fit(X)
    ref = SkKMeans(5, init=init, n_init=1, algorithm="lloyd", max_iter=3).fit(X)
    assert_same_kmeans(ours, ref)


# --- GNMF --------------------------------------------------------------------------------------

EPSILON = float(np.finfo(np.float32).eps)


def gnmf_reference(X, r, max_iter, tol, seed):
    """Lee & Seung's updates on a dense array, the objective 0.5 ||X - W H||_F^2 computed directly;
    the initialization of ilargi's GNMF (scaled |N(0, 1)|, W first, from RandomState(seed))."""
    rng = np.random.RandomState(seed)
    scale = np.sqrt(X.mean() / r)
    W = scale * np.abs(rng.standard_normal((X.shape[0], r)))
    H = scale * np.abs(rng.standard_normal((r, X.shape[1])))
    losses = []
    for _ in range(max_iter):
        W = W * (X @ H.T) / np.maximum(W @ (H @ H.T), EPSILON)
        H = H * (W.T @ X) / np.maximum((W.T @ W) @ H, EPSILON)
        losses.append(0.5 * np.linalg.norm(X - W @ H) ** 2)
        if len(losses) > 1 and losses[-2] - losses[-1] <= tol * losses[0]:
            break
    return W, H, losses


def nnls_rows(X, H):
    """W >= 0 minimizing ||X - W H||_F row by row: SciPy's NNLS (Lawson and Hanson) on H^T."""
    return np.array([nnls(H.T, row)[0] for row in X])


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("tol, max_iter", [(1e-4, 300), (0.0, 60)])
def test_gnmf_matches_a_dense_numpy_reference(plan, tol, max_iter):
    """H and the objectives follow the updates; the W returned is the best W for that H (as
    transform solves it), the NNLS solution of each row."""
    nm, _ = star(600)
    nm = abs(nm)
    model = GNMF(3, max_iter=max_iter, tol=tol, random_state=0, plan=plan)
    W = model.fit_transform(nm)
    _, H_ref, losses = gnmf_reference(nm.toarray(), 3, max_iter, tol, 0)
    assert model.n_iter_ == len(losses)
    assert relative(model.components_, H_ref) <= 1e-9
    assert relative(model.loss_history_, losses) <= 1e-9
    assert relative(W, nnls_rows(nm.toarray(), H_ref)) <= 1e-8


def test_gnmf_matches_the_reference_on_a_sparse_array():
    X = sp.random(300, 20, density=0.3, random_state=0, format="csr")
    model = GNMF(2, max_iter=80, tol=0.0, random_state=3)
    W = model.fit_transform(X)
    _, H_ref, _ = gnmf_reference(X.toarray(), 2, 80, 0.0, 3)
    assert relative(model.components_, H_ref) <= 1e-9
    assert relative(W, nnls_rows(X.toarray(), H_ref)) <= 1e-8


# --- Logistic regression and least squares ----------------------------------------------------

TIGHT = dict(tol=1e-10, max_iter=10_000)


@pytest.mark.parametrize("solver, accuracy", [("lbfgs", 1e-6), ("newton-cg", 1e-7)])
@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("C", [0.1, 1.0])
def test_logistic_coefficients_match_sklearn_on_arrays(n_classes, C, solver, accuracy):
    """Against the optimum as scikit-learn's Newton-CG finds it at tol=1e-12. L-BFGS stops at a
    relative decrease of 64 eps as scikit-learn's does, a few 1e-7 from the optimum on the
    multinomial problems (so is scikit-learn's L-BFGS), Newton-CG much closer."""
    X, y = make_classification(400, 8, n_informative=5, n_classes=n_classes, random_state=n_classes)
    ours = LogisticRegression(C=C, solver=solver, **TIGHT).fit(X, y)
    ref = sk.LogisticRegression(C=C, solver="newton-cg", tol=1e-12, max_iter=10_000).fit(X, y)
    assert relative(ours.coef_, ref.coef_) <= accuracy
    assert relative(ours.intercept_, ref.intercept_) <= accuracy


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("multinomial", [False, True])
def test_logistic_coefficients_match_sklearn_on_a_normalized_matrix(plan, multinomial):
    nm, y = star(target="logistic")
    if multinomial:
        y = (np.arange(len(y)) + (nm @ np.ones(nm.shape[1]) > 0)) % 3
    ours = LogisticRegression(plan=plan, **TIGHT).fit(nm, y)
    ref = sk.LogisticRegression(**TIGHT).fit(nm.toarray(), y)
    assert ours.coef_.shape == ref.coef_.shape
    assert relative(ours.coef_, ref.coef_) <= 1e-6
    assert relative(ours.intercept_, ref.intercept_) <= 1e-6


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("solver", ["auto", "cholesky", "cg", "lsqr"])
def test_ridge_and_ols_coefficients_match_sklearn(plan, solver):
    nm, y = star(target="linear")
    table = nm.toarray()
    ours = Ridge(alpha=0.5, solver=solver, plan=plan).fit(nm, y)
    ref = sk.Ridge(alpha=0.5, solver="cholesky").fit(table, y)
    assert relative(ours.coef_, ref.coef_) <= 1e-6
    assert ours.intercept_ == pytest.approx(ref.intercept_, rel=1e-6, abs=1e-9)
    ours = LinearRegression(solver=solver, plan=plan).fit(nm, y)
    ref = sk.LinearRegression().fit(table, y)
    assert relative(ours.coef_, ref.coef_) <= 1e-6
