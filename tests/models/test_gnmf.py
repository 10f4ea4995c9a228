"""GNMF: multiplicative updates that lower the objective every iteration, and the fitted API."""
import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.datasets import make_star
from ilargi.models import GNMF


def low_rank(n=200, d=30, r=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, r)) @ rng.random((r, d)) + 0.01 * rng.random((n, d))


@pytest.mark.parametrize("sparse", [False, True])
def test_objective_decreases_monotonically_and_both_factors_move(sparse):
    X = low_rank()
    if sparse:
        X = sp.csr_matrix(X * (X > 1.0))
    model = GNMF(4, max_iter=300, tol=0.0, random_state=0)
    W = model.fit_transform(X)
    history = np.asarray(model.loss_history_)
    assert len(history) == model.n_iter_ >= 50
    assert np.all(np.diff(history) <= 1e-12 * history[0])
    assert history[-1] < 0.5 * history[0]
    dense = X.toarray() if sparse else X
    assert model.reconstruction_err_ == pytest.approx(np.linalg.norm(dense - W @ model.components_), rel=1e-6)
    assert W.min() >= 0 and model.components_.min() >= 0
    # Both factors were updated: the fit is far better than the random start of either factor.
    start = GNMF(4, max_iter=1, random_state=0).fit(X).components_
    assert not np.allclose(start, model.components_)


def test_objective_decreases_on_a_normalized_matrix():
    X, _ = make_star(2000, tuple_ratio=10, feature_ratio=2, n_dims=2, d_fact=5, target=None, random_state=0)
    X = abs(X)
    model = GNMF(3, max_iter=60, tol=0.0, random_state=1, plan="factorized").fit(X)
    assert np.all(np.diff(model.loss_history_) <= 1e-12 * model.loss_history_[0])


def test_transform_and_inverse_transform():
    X = low_rank(seed=2)
    model = GNMF(4, max_iter=500, tol=1e-9, random_state=0)
    W = model.fit_transform(X)
    # transform solves for W with H fixed: it fits X at least as well as the jointly fitted W.
    W_new = model.transform(X)
    assert W_new.min() >= 0
    assert np.linalg.norm(X - model.inverse_transform(W_new)) <= model.reconstruction_err_ * (1 + 1e-9)
    assert np.allclose(model.inverse_transform(W), W @ model.components_)


def test_negative_data_are_refused():
    X = low_rank(n=20, d=5)
    X[3, 2] = -1.0
    with pytest.raises(ValueError, match="[Nn]egative"):
        GNMF(2).fit(X)
    nm, _ = make_star(100, tuple_ratio=5, target=None, random_state=0)
    with pytest.raises(ValueError, match="non-negative data"):
        GNMF(2).fit(nm)
    with pytest.raises(ValueError, match="n_components"):
        GNMF(0).fit(abs(X))
