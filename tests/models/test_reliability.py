"""Issue 12, the estimator half.

* class 1 -- NaN/inf never reach an estimator silently: every estimator, every entry point (fit,
  predict, transform, score), raises scikit-learn's own ValueError for a NormalizedMatrix holding
  NaN or inf, found from its parts and affine state without materializing it;
* class 8 -- scikit-learn's model selection runs on a NormalizedMatrix (``X[idx, ...]`` rows,
  pickling for worker processes) and scores as on the materialized array (must-show 2);
* class 9 -- parameters are named in errors.
"""

import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate
from sklearn.pipeline import Pipeline
from sklearn.utils._param_validation import InvalidParameterError

from ilargi import NormalizedMatrix
from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler


def left_star(seed=0, n=60, sparse=False):
    """A left join: some fact rows miss their dimension row, so T has NULL cells (value 0)."""
    rng = np.random.default_rng(seed)
    fact = rng.uniform(0.5, 2.0, (n, 2))
    dim = rng.uniform(0.5, 2.0, (6, 3))
    fk = rng.integers(-1, 6, n)
    fk[:2] = [-1, 0]
    source = sp.csr_array(dim) if sparse else dim
    nm = NormalizedMatrix.from_parts([fact, source], [None, fk], [[0, 1], [2, 3, 4]], (n, 5))
    y = (nm @ np.arange(1.0, 6.0) > 9).astype(int)
    return nm, y


def positive(nm):
    return nm + 0.1


TRANSFORMS = {  # each leaves NaN or inf in some cells; NULL cells are 0 before it
    "log": lambda nm: np.log(nm),  # log(0) = -inf in NULL cells
    "sqrt of negatives": lambda nm: np.sqrt(nm - 1.0),  # NaN where T < 1
    "division by a zero column": lambda nm: nm / np.array([1.0, 0.0, 1.0, 1.0, 1.0]),
    "reciprocal": lambda nm: 1.0 / nm,  # inf in NULL cells
    "overflowing scale": lambda nm: nm * 1e308 * 10.0,
    "power": lambda nm: np.power(nm - 1.5, 0.5),
}

ESTIMATORS = {
    "LinearRegression": lambda: LinearRegression(plan="factorized"),
    "Ridge": lambda: Ridge(plan="factorized"),
    "LogisticRegression": lambda: LogisticRegression(plan="factorized"),
    "KMeans": lambda: KMeans(2, random_state=0, plan="factorized"),
    "GNMF": lambda: GNMF(2, random_state=0, max_iter=20, plan="factorized"),
    "StandardScaler": lambda: StandardScaler(),
}


def expected_message(table):
    return "Input X contains NaN" if np.isnan(table).any() else "Input X contains infinity"


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_fit_refuses_nonfinite_matrices_with_sklearns_error(name, transform, sparse):
    nm, y = left_star(sparse=sparse)
    with np.errstate(all="ignore"):
        try:
            X = TRANSFORMS[transform](nm)
        except ValueError as error:  # f(0) not finite on a sparse part's implicit zeros
            assert "materialize first" in str(error)
            return
        table = X.toarray()
    assert not np.isfinite(table).all()
    estimator = ESTIMATORS[name]()
    with pytest.raises(ValueError, match=expected_message(table)):
        estimator.fit(X, y)
    # The same text scikit-learn (through ilargi's own estimator) gives for the array.
    with pytest.raises(ValueError, match=expected_message(table)):
        ESTIMATORS[name]().fit(table, y)


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_entry_point_refuses_nonfinite_matrices(name):
    nm, y = left_star()
    fitted = ESTIMATORS[name]().fit(positive(nm), y)
    with np.errstate(all="ignore"):
        bad = np.log(nm)[:20]
    methods = [
        m
        for m in (
            "predict",
            "transform",
            "score",
            "decision_function",
            "predict_proba",
            "inverse_transform",
            "fit_transform",
        )
        if hasattr(fitted, m) and not (name == "GNMF" and m == "inverse_transform")
    ]  # GNMF's takes W, not X
    assert methods
    for method in methods:
        args = (
            (bad, y[:20])
            if method == "score" and name in ("LinearRegression", "Ridge", "LogisticRegression")
            else (bad,)
        )
        with pytest.raises(ValueError, match="Input X contains infinity"):
            getattr(fitted, method)(*args)


def test_nonfinite_values_in_rows_no_target_row_takes_are_harmless():
    """NaN/inf kept (allow_nonfinite) in a source row no target row takes never reach T."""
    fact = np.ones((4, 1))
    dim = np.array([[1.0], [np.nan], [2.0], [np.inf]])
    nm = NormalizedMatrix.from_parts(
        [fact, dim], [None, np.array([0, 2, 2, 0])], [[0], [1]], (4, 2), allow_nonfinite=True
    )
    assert nm.nonfinite() == (False, False)
    model = LinearRegression(plan="factorized").fit(nm, np.array([1.0, 2.0, 2.1, 1.1]))
    assert np.isfinite(model.coef_).all()
    used = NormalizedMatrix.from_parts(
        [fact, dim], [None, np.array([0, 1, 2, 0])], [[0], [1]], (4, 2), allow_nonfinite=True
    )
    assert used.nonfinite() == (True, False)
    with pytest.raises(ValueError, match="Input X contains NaN"):
        KMeans(2).fit(used)
    with pytest.raises(ValueError, match="encode the table with missing='zero'"):  # the way out
        LinearRegression().fit(used, np.zeros(4))


def test_the_check_reads_no_data_for_finite_parts(monkeypatch):
    """Finite parts answer from their flags: nothing is materialized or scanned."""
    nm, y = make_star(3000, tuple_ratio=10, d_fact=3, target="logistic", random_state=0)
    scanned = []
    monkeypatch.setattr(NormalizedMatrix, "materialize", lambda self: scanned.append("table"))
    monkeypatch.setattr(
        NormalizedMatrix, "_cells_nonfinite", lambda self, part: scanned.append(part.name)
    )
    assert nm.nonfinite() == (False, False) and (nm - 1.0).nonfinite() == (False, False)
    LogisticRegression(plan="factorized", max_iter=5).fit(nm, y)
    assert scanned == []


# --- class 8: scikit-learn model selection -------------------------------------------------------


@pytest.fixture(scope="module")
def classification():
    return make_star(600, tuple_ratio=10, d_fact=3, target="logistic", noise=0.1, random_state=0)


def tight_logistic(**kwargs):
    return LogisticRegression(plan="factorized", tol=1e-10, max_iter=1000, **kwargs)


def pipeline():
    return Pipeline([("scale", StandardScaler()), ("model", tight_logistic())])


def test_cross_val_score_matches_the_materialized_array(classification):
    X, y = classification
    cv = KFold(4, shuffle=True, random_state=0)
    ours = cross_val_score(tight_logistic(), X, y, cv=cv, error_score="raise")
    reference = cross_val_score(tight_logistic(), X.toarray(), y, cv=cv, error_score="raise")
    assert np.allclose(ours, reference, rtol=0, atol=1e-12)
    regression = cross_val_score(
        Ridge(plan="factorized"), X, y.astype(float), cv=3, error_score="raise"
    )
    assert np.allclose(
        regression,
        cross_val_score(Ridge(plan="factorized"), X.toarray(), y.astype(float), cv=3),
        atol=1e-9,
    )


def test_grid_search_over_a_scaled_logistic_pipeline(classification):
    X, y = classification
    grid = {"model__C": [0.01, 0.1, 1.0], "scale__with_mean": [True, False]}
    ours = GridSearchCV(pipeline(), grid, cv=3, error_score="raise").fit(X, y)
    reference = GridSearchCV(pipeline(), grid, cv=3, error_score="raise").fit(X.toarray(), y)
    assert np.allclose(
        ours.cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"], atol=1e-12
    )
    assert ours.best_params_ == reference.best_params_
    assert np.allclose(
        ours.best_estimator_["model"].coef_,
        reference.best_estimator_["model"].coef_,
        rtol=1e-6,
        atol=1e-9,
    )
    assert np.allclose(ours.predict_proba(X), reference.predict_proba(X.toarray()), atol=1e-9)


def test_cross_validate_in_two_worker_processes(classification):
    X, y = classification
    ours = cross_validate(
        pipeline(), X, y, cv=3, n_jobs=2, error_score="raise", return_train_score=True
    )
    reference = cross_validate(
        pipeline(), X.toarray(), y, cv=3, n_jobs=2, error_score="raise", return_train_score=True
    )
    for key in ("test_score", "train_score"):
        assert np.allclose(ours[key], reference[key], atol=1e-12)


def test_clustering_and_scaling_cross_validate(classification):
    X, _ = classification
    init = X[:3].toarray()
    ours = cross_val_score(KMeans(3, init=init, plan="factorized"), X, cv=3, error_score="raise")
    reference = cross_val_score(KMeans(3, init=init), X.toarray(), cv=3, error_score="raise")
    assert np.allclose(ours, reference, rtol=1e-9)


def test_a_pickled_estimator_and_matrix_predict_the_same(classification):
    X, y = classification
    model = pipeline().fit(X, y)
    back_model, back_X = pickle.loads(pickle.dumps((model, X[::3])))
    assert np.array_equal(back_model.predict(back_X), model.predict(X[::3]))
    assert clone(model).get_params()["model__C"] == 1.0


# --- class 9: parameters named in errors ---------------------------------------------------------


@pytest.mark.parametrize(
    "estimator, parameter",
    [
        (KMeans(n_clusters=2.5), "n_clusters"),
        (KMeans(n_clusters=0), "n_clusters"),
        (KMeans(init="random"), "init"),
        (KMeans(max_iter=-3), "max_iter"),
        (KMeans(tol=-1), "tol"),
        (GNMF(n_components=1.5), "n_components"),
        (Ridge(alpha=-1.0), "alpha"),
        (LogisticRegression(C=0), "C"),
        (LogisticRegression(solver="newton"), "solver"),
        (LinearRegression(plan="fast"), "plan"),
        (StandardScaler(with_mean="yes"), "with_mean"),
    ],
)
def test_bad_parameters_are_named(estimator, parameter):
    nm, y = left_star()
    with pytest.raises(InvalidParameterError, match=f"'{parameter}' parameter"):
        estimator.fit(positive(nm), y)


def test_bad_inputs_are_named():
    nm, y = left_star()
    with pytest.raises(ValueError, match="X has 60 rows but y has 59"):
        LinearRegression().fit(nm, y[:-1])
    fitted = LinearRegression(plan="factorized").fit(nm, y)
    with pytest.raises(ValueError, match="X has 4 features, but LinearRegression is expecting 5"):
        fitted.predict(nm[:, :4])
    with pytest.raises(ValueError, match="init has shape"):
        KMeans(2, init=np.zeros((3, 5))).fit(nm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="non-negative"):
            GNMF(2).fit(nm - 5.0)
