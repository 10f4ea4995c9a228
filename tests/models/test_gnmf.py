"""GNMF: multiplicative updates that lower the objective every iteration, W solved exactly for H,
and the fitted API."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert model.reconstruction_err_ == pytest.approx(np.sqrt(2 * history[-1]), rel=1e-12)
    # the W returned is solved for the final H: at least as good as the last update's
    assert np.linalg.norm(dense - W @ model.components_) <= model.reconstruction_err_ * (1 + 1e-9)
    assert W.min() >= 0 and model.components_.min() >= 0
    # Both factors were updated: the fit is far better than the random start of either factor.
    start = GNMF(4, max_iter=1, random_state=0).fit(X).components_
    assert not np.allclose(start, model.components_)


def test_objective_decreases_on_a_normalized_matrix():
    X, _ = make_star(
        2000, tuple_ratio=10, feature_ratio=2, n_dims=2, d_fact=5, target=None, random_state=0
    )
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
    assert np.linalg.norm(X - model.inverse_transform(W_new)) <= model.reconstruction_err_ * (
        1 + 1e-9
    )
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


def _objective(X, W, H):
    return 0.5 * np.linalg.norm(X - W @ H) ** 2


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    r=st.integers(1, 8),
    extra=st.integers(0, 6),
    seed=st.integers(0, 2**16),
    collinear=st.booleans(),
    batched=st.booleans(),
)
def test_the_rows_solve_is_scipys_nnls(n, r, extra, seed, collinear, batched):
    """W for a fixed H (what transform and fit_transform return) is each row's NNLS solution: the
    same W where H's rows are independent, the same fit W H where they are collinear."""
    from scipy.optimize import nnls

    from ilargi.models import gnmf

    rng = np.random.default_rng(seed)
    H = rng.random((r, r + extra)) * (rng.random((r, r + extra)) < 0.7)
    if collinear and r > 1:
        H[-1] = 2.0 * H[0]
    X = np.maximum(rng.random((n, r)) @ H + rng.normal(0, 0.3, (n, r + extra)), 0.0)
    with pytest.MonkeyPatch.context() as patch:
        if batched:  # every row its own masked system
            patch.setattr(gnmf, "GROUP_ROWS", 10**9)
        W = gnmf.solve_rows(X @ H.T, H @ H.T, 200)
    reference = np.array([nnls(H.T, row)[0] for row in X])
    assert W.min() >= 0
    # collinear components: a ridge of 1e-10 of H H^T's scale makes W unique
    assert _objective(X, W, H) <= _objective(X, reference, H) + 1e-9 * (X * X).sum() + 1e-12
    if np.linalg.cond(H @ H.T) < 1e6:
        np.testing.assert_allclose(W, reference, rtol=1e-8, atol=1e-10)


def test_rows_pivoting_leaves_unfinished_rows_to_nnls():
    """A round limit too small for pivoting: the rows it did not finish are solved by NNLS."""
    from scipy.optimize import nnls

    from ilargi.models import gnmf

    rng = np.random.default_rng(4)
    H = rng.random((6, 9))
    X = np.maximum(rng.random((50, 6)) @ H + rng.normal(0, 0.5, (50, 9)), 0.0)
    _, done = gnmf._pivoting(X @ H.T, H @ H.T, 0)
    assert not done.all()
    W = gnmf.solve_rows(X @ H.T, H @ H.T, 0)
    np.testing.assert_allclose(W, [nnls(H.T, row)[0] for row in X], rtol=1e-8, atol=1e-10)
