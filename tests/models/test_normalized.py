"""Estimators on NormalizedMatrix inputs: the factorized plan gives the materialized plan's model.

Random data-integration scenarios (tests/strategies.py: every join kind, dense and sparse sources,
absent rows, affine state, row selections) are fitted with plan="factorized" and plan="materialized";
the fitted models must agree to 1e-8 relative (issue 4). Larger make_star scenarios check the same
for the regression and the scikit-learn parity on the materialized table.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model as sk
from hypothesis import assume, example, given
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

import ilargi.chooser
from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler
from tests.strategies import Case, Scenario, as_dense, cases, property_settings, relative_error

SAME_MODEL = 1e-8


def both_plans(estimator, X, *fit_args, attributes):
    """Fit with both plans; return {attribute: (factorized value, materialized value)}."""
    fitted = {}
    for plan in ("factorized", "materialized"):
        model = estimator.set_params(plan=plan).fit(X, *fit_args)
        assert model.plan_ == plan
        fitted[plan] = {
            name: np.asarray(getattr(model, name), dtype=np.float64) for name in attributes
        }
    return {name: (fitted["factorized"][name], fitted["materialized"][name]) for name in attributes}


def assert_same_model(pairs):
    for name, (factorized, materialized) in pairs.items():
        error = relative_error(factorized, materialized)
        assert error <= SAME_MODEL, f"{name}: factorized and materialized differ by {error:.3g}"


def random_target(case, seed, n_classes=None):
    rng = np.random.default_rng(seed)
    n = case.expected.shape[0]
    if n_classes is None:
        return rng.normal(size=n)
    return rng.permutation(np.arange(n) % n_classes)  # every class present


@property_settings(max_examples=25)
@given(
    case=cases(transpose=False, min_n=4),
    solver=st.sampled_from(["cholesky", "cg", "lsqr"]),
    seed=st.integers(0, 2**16),
)
def test_ridge(case, solver, seed):
    X = case.build()
    y = random_target(case, seed)
    pairs = both_plans(
        Ridge(alpha=0.5, solver=solver, tol=1e-14), X, y, attributes=["coef_", "intercept_"]
    )
    assert_same_model(pairs)
    case.scenario.assert_inputs_untouched()


@property_settings(max_examples=25)
@given(
    case=cases(transpose=False, min_n=4),
    n_classes=st.sampled_from([2, 3]),
    solver=st.sampled_from(["lbfgs", "gd"]),
    seed=st.integers(0, 2**16),
)
def test_logistic_regression(case, n_classes, solver, seed):
    X = case.build()
    assume(X.shape[0] >= n_classes)
    y = random_target(case, seed, n_classes)
    estimator = LogisticRegression(
        solver=solver, tol=1e-12, max_iter=200 if solver == "lbfgs" else 20
    )
    with warnings.catch_warnings():
        # At tol=1e-12 L-BFGS stops on the precision limit of the objective (ftol, line search).
        warnings.simplefilter("ignore", ConvergenceWarning)
        pairs = both_plans(estimator, X, y, attributes=["coef_", "intercept_", "loss_history_"])
    if solver == "gd":  # a fixed number of fixed steps: the same iterates up to rounding
        assert_same_model(pairs)
        return
    # L-BFGS takes the same steps too, but stops where the objective f no longer decreases
    # measurably (relative change ~ 64 eps). If rounding puts that decision one iteration apart in
    # the two plans, the coefficients differ by one step at that floor, ~ sqrt(eps f / curvature),
    # which is large in flat directions (saturated probabilities, the unpenalized intercept). Both
    # are optima to the objective's precision, so the objective is what is compared here; the
    # coefficients are compared to 1e-8 on the realistic star schemas below.
    final = [history[-1] for history in pairs["loss_history_"]]
    assert abs(final[0] - final[1]) <= 1e-10 * final[1]


@property_settings(max_examples=25)
@given(case=cases(transpose=False, min_n=3), seed=st.integers(0, 2**16))
def test_kmeans(case, seed):
    X = case.build()
    estimator = KMeans(n_clusters=min(3, X.shape[0]), n_init=2, random_state=seed)
    pairs = both_plans(estimator, X, attributes=["cluster_centers_", "labels_", "inertia_"])
    assert_same_model(pairs)
    model = estimator.fit(X)
    assert np.array_equal(model.predict(X), model.predict(case.expected))
    # Squared distances: a square root would magnify the rounding of distances near 0.
    assert relative_error(model.transform(X) ** 2, model.transform(case.expected) ** 2) <= 1e-9


@property_settings(max_examples=25)
@given(case=cases(transpose=False, nonneg=True), seed=st.integers(0, 2**16))
def test_gnmf(case, seed):
    X = case.build()
    estimator = GNMF(n_components=2, tol=0.0, max_iter=15, random_state=seed)
    pairs = both_plans(estimator, X, attributes=["components_", "loss_history_"])
    assert_same_model(pairs)
    factorized_W = estimator.set_params(plan="factorized").fit_transform(X)
    H = estimator.components_
    materialized_W = estimator.set_params(plan="materialized").fit_transform(X)
    # W is the NNLS solution for H (as transform solves it): W H is determined as well as the data,
    # W itself to about cond(H H^T) * eps (not at all where H's rows are collinear, see GNMF).
    assert relative_error(factorized_W @ H, materialized_W @ estimator.components_) <= SAME_MODEL
    ill_posed = 1e-15 * np.linalg.cond(H @ H.T)
    if ill_posed < 1e-6:
        assert relative_error(factorized_W, materialized_W) <= max(SAME_MODEL, ill_posed)
    H = estimator.components_
    assert (
        relative_error(estimator.transform(X) @ H, estimator.transform(case.expected) @ H)
        <= SAME_MODEL
    )


@property_settings(max_examples=25)
@given(case=cases(transpose=False, min_n=2))
@example(  # a constant sparse column: its variance must come out 0, not mean² rounding
    case=Case(
        Scenario.of(
            parts=[(sp.csr_array(np.ones((10, 1))), None, np.array([0]))],
            shape=(10, 1),
            kinds=["identity/onehot"],
        ),
        affine=None,
        selection=None,
        transpose=False,
    )
)
def test_standard_scaler_stays_factorized_and_exact(case):
    X = case.build()
    scaler = StandardScaler().fit(X)
    reference = StandardScaler().fit(case.expected)
    assert relative_error(scaler.mean_, reference.mean_) <= 1e-9
    assert relative_error(scaler.scale_, reference.scale_) <= 1e-9
    scaled = scaler.transform(X)
    assert type(scaled) is type(X)
    assert relative_error(as_dense(scaled), reference.transform(case.expected)) <= 1e-9
    restored = scaler.inverse_transform(scaled)
    assert relative_error(as_dense(restored), case.expected) <= 1e-9


@pytest.fixture(scope="module")
def star():
    """A dense star schema with dangling keys (left join: absent dimension rows)."""
    return make_star(
        4000,
        tuple_ratio=8,
        feature_ratio=2,
        n_dims=2,
        d_fact=6,
        join="left",
        dangling=0.1,
        random_state=0,
    )


@pytest.fixture(scope="module")
def sparse_star():
    return make_star(
        3000,
        tuple_ratio=10,
        feature_ratio=1,
        n_dims=2,
        d_fact=8,
        density=0.3,
        target="logistic",
        random_state=1,
    )


def test_linear_regression_on_a_star_matches_sklearn(star):
    X, y = star
    pairs = both_plans(LinearRegression(), X, y, attributes=["coef_", "intercept_"])
    assert_same_model(pairs)
    reference = sk.LinearRegression().fit(X.materialize(), y)
    coef, _ = pairs["coef_"]
    assert np.max(np.abs(coef - reference.coef_)) <= 1e-6 * np.max(np.abs(reference.coef_))
    model = LinearRegression(plan="factorized").fit(X, y)
    assert np.allclose(model.predict(X), reference.predict(X.materialize()), rtol=1e-9)
    assert model.score(X, y) == pytest.approx(reference.score(X.materialize(), y), rel=1e-9)


def test_logistic_regression_on_a_sparse_star_matches_sklearn(sparse_star):
    X, y = sparse_star
    assert_same_model(
        both_plans(
            LogisticRegression(tol=1e-10, max_iter=1000), X, y, attributes=["coef_", "intercept_"]
        )
    )
    model = LogisticRegression(plan="factorized", tol=1e-10, max_iter=1000).fit(X, y)
    table = X.materialize()
    reference = sk.LogisticRegression(tol=1e-10, max_iter=1000).fit(table, y)
    assert np.mean(model.predict(X) == reference.predict(table)) >= 0.999
    assert np.allclose(model.predict_proba(X), reference.predict_proba(table), atol=1e-6)


def test_predict_on_new_fact_rows(star):
    """A model fitted on some fact rows predicts others given as a NormalizedMatrix or as an array."""
    X, y = star
    train, test = np.arange(0, 3000), np.arange(3000, X.shape[0])
    model = Ridge(alpha=1.0, plan="factorized").fit(X[train], y[train])
    assert np.allclose(model.predict(X[test]), model.predict(X[test].materialize()), rtol=1e-10)


def test_kmeans_inertia_close_to_sklearn_with_the_same_init(star):
    from sklearn.cluster import KMeans as SkKMeans

    X, _ = star
    table = X.materialize()
    init = table[np.random.default_rng(0).choice(X.shape[0], 6, replace=False)]
    ours = KMeans(6, init=init, plan="factorized").fit(X)
    reference = SkKMeans(6, init=init, n_init=1, algorithm="lloyd").fit(table)
    assert abs(ours.inertia_ - reference.inertia_) <= 0.01 * reference.inertia_


def test_auto_plan_asks_the_chooser_with_the_join_charged(star, monkeypatch):
    X, y = star
    expected = ilargi.choose(X, Ridge(), repeats=1)
    assert Ridge().fit(X, y).plan_ == ("factorized" if expected.factorize else "materialized")

    class Plan:
        factorize = not expected.factorize
        reason = "a stand-in chooser"

    import ilargi.models._base as base

    monkeypatch.setattr(base, "choose", lambda nm, model, **options: Plan())
    assert Ridge().fit(X, y).plan_ == ("materialized" if expected.factorize else "factorized")


def test_wrong_width_is_refused(star):
    X, y = star
    model = Ridge().fit(X, y)
    # the matrix's columns are named: their names are checked first, as for a DataFrame
    with pytest.raises(ValueError, match="feature names should match"):
        model.predict(X[:, np.arange(X.shape[1] - 1)])
    unnamed = Ridge().fit(X.materialize(), y)
    with pytest.raises(ValueError, match="features"):
        unnamed.predict(X[:, np.arange(X.shape[1] - 1)].materialize())
    with pytest.raises(ValueError, match="rows"):
        Ridge().fit(X, y[:-1])
