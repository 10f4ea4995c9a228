"""Gaussian non-negative matrix factorization X ~= W H by multiplicative updates (Lee & Seung).

Each iteration updates both factors,

    W <- W * (X H^T) / (W (H H^T)),        H <- H * (W^T X) / ((W^T W) H),

so the data are touched by one LMM (X @ H^T) and one transposed product (X^T @ W); everything else
is r x r or n x r. The objective 0.5 ||X - W H||_F^2 never increases; it is tracked without forming
W H: 0.5 (||X||^2 - 2 <W^T X, H> + <W^T W, H H^T>), with ||X||^2 computed once.
"""
from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, check_non_negative

from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import dot_into, is_normalized, namespace, to_host, total_sq

# Floor of the update denominators, so that a factor entry that reached 0 cannot divide by 0
# (scikit-learn's NMF uses the same float32 epsilon).
EPSILON = float(np.finfo(np.float32).eps)


def _multiplicative_step(factor, numerator, denominator, xp):
    return factor * numerator / xp.maximum(denominator, EPSILON)


def _update_rows(W, numerator, gram, out, scratch, xp):
    """W * numerator / max(W @ gram, EPSILON) written into ``out`` (``scratch``: one more n x r
    buffer). Fresh n x r temporaries cost a page fault per 4 KiB at every iteration, which took
    most of an iteration here (Santoku Walmart, 80k x 5: 3.3-4.6 ms against 0.42 ms into buffers)."""
    xp.matmul(W, gram, out=scratch)
    xp.maximum(scratch, EPSILON, out=scratch)
    xp.multiply(W, numerator, out=out)
    return xp.divide(out, scratch, out=out)


# The objective is computed from ||X||^2 by cancellation, so it is known only to about this much
# times ||X||^2; a smaller decrease cannot be told from rounding (and its sign would be noise).
ROUNDING = 1e3 * float(np.finfo(np.float64).eps)


def _converged(history, loss, tol, x_sq):
    """Record loss; True once an iteration gains less than tol times the first objective (or
    less than the objective's rounding error)."""
    history.append(loss)
    return len(history) > 1 and history[-2] - loss <= tol * history[0] + ROUNDING * x_sq


class GNMF(ClassNamePrefixFeaturesOutMixin, TransformerMixin, IlargiEstimator):
    """Gaussian NMF of a non-negative NormalizedMatrix or array: X ~= W H with W, H >= 0.

    Lee and Seung's multiplicative updates of both factors; each iteration touches the data by one
    product ``X @ H.T`` and one ``X.T @ W``, factorized or not (see the module docstring).

    Parameters
    ----------
    n_components : int, default=2
        Rank r of the factorization, >= 1.
    max_iter : int, default=200
        Iterations at most, >= 1.
    tol : float, default=1e-4
        Stop when one iteration lowers the objective by less than tol times its initial value; >= 0.
    random_state : int, RandomState instance or None, default=None
        Seeds the random non-negative initialization (scaled like scikit-learn's "random" init).
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs: on the factorized form, on the joined table built
        once, or as the plan chooser decides (:func:`ilargi.choose`).
    verbose : bool or int, default=False
        Show a tqdm progress bar over the iterations.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features)
        The factor H.
    n_iter_ : int
        Iterations run.
    loss_history_ : list of float
        The objective 0.5 ||X - W H||_F^2 after each iteration.
    reconstruction_err_ : float
        ||X - W H||_F at the end of the fit.
    plan_ : str
        The plan that ran, "factorized" or "materialized".
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of a pandas DataFrame X; set only for one.

    See Also
    --------
    sklearn.decomposition.NMF : The scikit-learn NMF; its Frobenius loss with solver "mu" is this update.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import GNMF
    >>> X, _ = make_star(1000, tuple_ratio=10, d_fact=3, target=None, random_state=0)
    >>> X = abs(X)  # non-negative, still factorized
    >>> model = GNMF(n_components=2, max_iter=50, random_state=0, plan="factorized")
    >>> W = model.fit_transform(X)
    >>> model.plan_, W.shape, model.components_.shape
    ('factorized', (1000, 2), (2, 6))
    >>> bool(model.loss_history_[-1] <= model.loss_history_[0])
    True
    """

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(self, n_components: int = 2, *, max_iter: int = 200, tol: float = 1e-4,
                 random_state: int | np.random.RandomState | None = None, plan: str = "auto",
                 verbose: bool = False) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def _checked(self, X, reset):
        X = self._validate(X, reset=reset)
        if is_normalized(X):
            if float(X.min()) < 0:
                raise ValueError(f"{type(self).__name__} needs non-negative data; "
                                 f"the NormalizedMatrix has minimum {float(X.min())}")
        else:
            check_non_negative(X, type(self).__name__)
        return X

    def _random_factor(self, X, shape, rng):
        scale = np.sqrt(float(X.mean()) / self.n_components)
        return namespace(X).asarray(scale * np.abs(rng.standard_normal(shape)))

    def _workload(self, shape):
        """Per multiplicative update, products with W (n × r) and H (r × d) of rank r."""
        return Workload("gnmf", int(self.n_components), int(self.max_iter))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_transform(self, X: MatrixLike, y: object = None) -> Array:
        """Fit W and H on X and return W.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Non-negative training data; a NormalizedMatrix runs the plan of ``plan``.
        y : None
            Ignored.

        Returns
        -------
        W : ndarray of shape (n_samples, n_components)
            The factor W of the training data.

        Raises
        ------
        ValueError
            If X has a negative entry.
        """
        X = self._checked(X, reset=True)
        r = self.n_components
        X, self.plan_ = self._plan(X)
        xp = namespace(X)
        rng = check_random_state(self.random_state)
        # BLAS on every thread here would leave OpenBLAS's workers spinning into the first
        # iterations' compiled passes (Santoku Walmart at 2 threads: a fit 125 → 73-83 ms)
        with self._blas_quiet():
            W = self._random_factor(X, (X.shape[0], r), rng)
            H = self._random_factor(X, (r, X.shape[1]), rng)
            x_sq = total_sq(X)
        self.loss_history_: list[float] = []
        XHt, spare, scratch = (xp.empty_like(W) for _ in range(3))  # reused: see _update_rows
        with self._iterations(self.max_iter, "fit") as bar:
            for _ in range(self.max_iter):
                W, spare = _update_rows(W, dot_into(X, H.T, XHt), H @ H.T, spare, scratch, xp), W
                WtX = (X.T @ W).T
                WtW = W.T @ W
                H = _multiplicative_step(H, WtX, WtW @ H, xp)
                loss = 0.5 * (x_sq - 2.0 * float((WtX * H).sum()) + float((WtW * (H @ H.T)).sum()))
                bar.update()
                if _converged(self.loss_history_, loss, self.tol, x_sq):
                    break
        self.components_ = to_host(H)
        self._n_features_out = r
        self.n_iter_ = len(self.loss_history_)
        self.reconstruction_err_ = float(np.sqrt(max(2.0 * self.loss_history_[-1], 0.0)))
        return to_host(W)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: MatrixLike, y: object = None) -> "GNMF":
        """Fit W and H on X; H is kept in ``components_``.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Non-negative training data.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        self.fit_transform(X)
        return self

    def _solve_rows(self, X):
        """W >= 0 minimizing ||X - W H||_F for the fitted H, and that objective."""
        check_is_fitted(self)
        X = self._checked(X, reset=False)
        xp = namespace(X)
        H = xp.asarray(self.components_)
        XHt, HHt = X @ H.T, H @ H.T  # fixed while only W moves
        W = self._random_factor(X, (X.shape[0], H.shape[0]), check_random_state(self.random_state))
        x_sq, history = total_sq(X), []
        spare, scratch = xp.empty_like(W), xp.empty_like(W)
        for _ in range(self.max_iter):
            W, spare = _update_rows(W, XHt, HHt, spare, scratch, xp), W
            loss = 0.5 * (x_sq - 2.0 * float((W * XHt).sum()) + float(((W.T @ W) * HHt).sum()))
            if _converged(history, loss, self.tol, x_sq):
                break
        return to_host(W), history[-1]

    def transform(self, X: MatrixLike) -> Array:
        """The factor W of X for the fitted H (multiplicative updates on W only).

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Non-negative samples.

        Returns
        -------
        W : ndarray of shape (n_samples, n_components)
            W >= 0 minimizing ||X - W H||_F.
        """
        return self._solve_rows(X)[0]

    def score(self, X: MatrixLike, y: object = None) -> float:
        """Minus half the squared reconstruction error of X (higher is better).

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Non-negative samples.
        y : None
            Ignored.

        Returns
        -------
        float
            -0.5 ||X - W H||_F^2 with W from :meth:`transform`.
        """
        return -self._solve_rows(X)[1]

    def inverse_transform(self, W: MatrixLike) -> Array:
        """The reconstruction ``W @ components_`` of data from its factor W.

        Parameters
        ----------
        W : array-like of shape (n_samples, n_components)
            A factor, as :meth:`transform` returns it.

        Returns
        -------
        ndarray of shape (n_samples, n_features)
            The reconstructed data.
        """
        check_is_fitted(self)
        return np.asarray(W) @ self.components_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.input_tags.positive_only = True
        return tags
