"""LogisticRegression: parity with scikit-learn (loss at the optimum, predictions), both solvers."""

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model as sk
from sklearn.datasets import make_classification

from ilargi.models import LogisticRegression, StandardScaler

TIGHT = dict(tol=1e-10, max_iter=10_000)


def penalized_loss(model, X, y, C, sample_weight=None):
    """C * sum_i s_i log-loss_i + ||coef||^2 / 2, the objective both libraries minimize."""
    log_p = model.predict_log_proba(X)
    rows = -log_p[np.arange(len(y)), np.searchsorted(model.classes_, y)]
    weights = np.ones(len(y)) if sample_weight is None else sample_weight
    return C * float(weights @ rows) + 0.5 * float((model.coef_**2).sum())


def classification_data(n_classes, n=600, d=10, seed=0, sparse=False):
    X, y = make_classification(n, d, n_informative=6, n_classes=n_classes, random_state=seed)
    X = X + np.random.default_rng(seed).uniform(-2, 2, size=d)
    if sparse:
        X = sp.csr_matrix(X * (np.random.default_rng(seed).random(X.shape) < 0.5))
    return X, y


@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("C", [0.05, 1.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_sklearn_at_the_optimum(n_classes, sparse, C, weighted):
    X, y = classification_data(n_classes, sparse=sparse, seed=n_classes)
    w = np.random.default_rng(1).uniform(0.2, 2.0, size=len(y)) if weighted else None
    ours = LogisticRegression(C=C, **TIGHT).fit(X, y, sample_weight=w)
    ref = sk.LogisticRegression(C=C, solver="lbfgs", **TIGHT).fit(X, y, sample_weight=w)
    assert ours.coef_.shape == ref.coef_.shape and ours.intercept_.shape == ref.intercept_.shape
    ours_loss, ref_loss = penalized_loss(ours, X, y, C, w), penalized_loss(ref, X, y, C, w)
    assert abs(ours_loss - ref_loss) <= 1e-6 * ref_loss
    assert np.mean(ours.predict(X) == ref.predict(X)) >= 0.999
    assert np.allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-5)
    assert len(ours.loss_history_) == ours.n_iter_ + 1


def test_string_labels_and_no_intercept():
    X, y = classification_data(3, seed=7)
    labels = np.array(["low", "mid", "high"])[y]
    ours = LogisticRegression(fit_intercept=False, **TIGHT).fit(X, labels)
    ref = sk.LogisticRegression(fit_intercept=False, **TIGHT).fit(X, labels)
    assert list(ours.classes_) == list(ref.classes_)
    assert np.all(ours.intercept_ == 0)
    assert (
        abs(penalized_loss(ours, X, labels, 1.0) / penalized_loss(ref, X, labels, 1.0) - 1) < 1e-6
    )


@pytest.mark.parametrize("n_classes", [2, 3])
def test_gradient_descent_decreases_the_loss_towards_lbfgs(n_classes):
    X, y = classification_data(n_classes, seed=11)
    gd = LogisticRegression(solver="gd", max_iter=20).fit(X, y)
    assert gd.n_iter_ == 20 and len(gd.loss_history_) == 21
    assert np.all(np.diff(gd.loss_history_) < 0)  # the "auto" step never overshoots
    # Run long enough on standardized (well-conditioned) data, it reaches the L-BFGS optimum.
    X = StandardScaler().fit_transform(X)
    long_gd = LogisticRegression(solver="gd", max_iter=5000, tol=1e-9).fit(X, y)
    lbfgs = LogisticRegression(**TIGHT).fit(X, y)
    assert abs(penalized_loss(long_gd, X, y, 1.0) / penalized_loss(lbfgs, X, y, 1.0) - 1) < 1e-6


def test_fixed_learning_rate_is_used():
    X, y = classification_data(2, seed=3)
    one_step = LogisticRegression(
        solver="gd", learning_rate=0.5, max_iter=1, fit_intercept=False
    ).fit(X, y)
    # From zero the gradient of the mean log-loss is X^T (1/2 - y) / n.
    expected = -0.5 * X.T @ (0.5 - y) / len(y)
    assert np.allclose(one_step.coef_[0], expected, rtol=1e-12)


def test_one_class_and_bad_parameters_are_refused():
    X, y = classification_data(2)
    with pytest.raises(ValueError, match="one class"):
        LogisticRegression().fit(X, np.zeros(len(y)))
    with pytest.raises(ValueError, match="solver"):
        LogisticRegression(solver="newton").fit(X, y)
    with pytest.raises(ValueError, match="'C' parameter"):
        LogisticRegression(C=0).fit(X, y)
    with pytest.raises(ValueError, match="Unknown label type"):
        LogisticRegression().fit(X, np.linspace(0, 1, len(y)))


@pytest.mark.parametrize(
    "y",
    [
        np.array([1.0, 0.0, 1.0, 1.0]),
        np.array([2, -1, 7, 2, 7]),
        np.array([True, False, True]),
        np.array(["b", "a", "c", "a"]),
        np.array(["b", "a", "c"], dtype=object),
        np.arange(40) % 13 - 3,  # more classes than FEW_CLASSES: the binary-search route
    ],
)
def test_class_codes_are_uniques_inverse(y):
    from ilargi.models._ops import FEW_CLASSES, class_codes

    classes, codes = class_codes(y)
    expected_classes, expected_codes = np.unique(y, return_inverse=True)
    assert np.array_equal(classes, expected_classes) and np.array_equal(codes, expected_codes)
    assert codes.dtype == np.intp and (classes.size <= FEW_CLASSES or y.size == 40)
