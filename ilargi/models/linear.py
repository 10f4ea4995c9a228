"""Least squares: LinearRegression and Ridge, closed form on the factorized Gram matrix.

Both minimize  sum_i s_i (y_i - x_i w - b)^2 + alpha ||w||^2  (alpha = 0 for LinearRegression; s =
sample weights). The intercept is exact without touching the data: with the weighted column means
mu, the centered Gram matrix is X^T S X - sum(s) mu mu^T and the centered right-hand side is
X^T S y - sum(s) mu ybar, so only the factorized ``crossprod`` and ``X.T @ r`` are needed.
"""

import warnings
from contextlib import nullcontext
from numbers import Integral, Real

import numpy as np
import scipy.linalg
from scipy.linalg.lapack import dpocon
from scipy.sparse.linalg import LinearOperator, cg, lsqr
from sklearn.base import RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import gramvec, is_distributed, namespace, normal_equations, on_rows, to_host, to_output
from ._sklearn_compat import Interval, StrOptions, _fit_context

SOLVERS = ("auto", "cholesky", "cg", "lsqr")

# Above this many features a dense d x d Gram matrix (and its Cholesky factor) costs more memory and
# time than an iterative solver: 4096^2 doubles are 128 MiB. Sparse one-hot data (d ~ 55k for the
# Yelp star schema) always goes to lsqr.
MAX_GRAM_FEATURES = 4096
# Up to this many features the Cholesky solve runs with BLAS at one thread: its second thread
# saves less than OpenBLAS's workers spinning after it cost the compiled passes that follow
# (lsqr on a singular Gram, the predictions).
QUIET_SOLVE = 2048

# SciPy's iteration caps when max_iter is None: lsqr 2 d, cg 10 d.
DEFAULT_ITERATIONS = {"lsqr": lambda d: 2 * d, "cg": lambda d: 10 * d}

# Normal equations lose about cond(G) * eps of relative accuracy; below this reciprocal condition
# number the solution would not be trustworthy to 1e-6, so lsqr (accuracy ~ sqrt(cond(G)) * eps)
# takes over.
MIN_RCOND = 1e-10


class _LeastSquares(RegressorMixin, IlargiEstimator):
    """Shared parameters, fit and predict of LinearRegression and Ridge; Ridge adds ``alpha``."""

    _distributed = True  # trains on a Dask-backed matrix: one pass for Cholesky, one per cg step

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(SOLVERS))],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self,
        *,
        fit_intercept: bool = True,
        solver: str = "auto",
        tol: float = 1e-10,
        max_iter: int | None = None,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.tol = tol
        self.max_iter = max_iter

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self, X: MatrixLike, y: MatrixLike, sample_weight: MatrixLike | None = None
    ) -> "_LeastSquares":
        """Fit the coefficients on X and y.

        Cholesky needs one Gram matrix ``X.T @ X`` and one ``X.T @ y``; lsqr and cg need a product
        with X and one with X.T per iteration: all factorized for a NormalizedMatrix.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Training data; a NormalizedMatrix runs the plan of ``plan``.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Target values.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample (None: all 1).

        Returns
        -------
        self : object
            The fitted estimator.
        """
        X, y = self._validate(X, y, multi_output=True, y_numeric=True)
        sw = self._sample_weight(sample_weight, X)
        X, self.plan_ = self._plan(X)
        Y = on_rows(X, y, np.float64)
        Y = Y[:, None] if Y.ndim == 1 else Y
        n, d = X.shape
        alpha = float(getattr(self, "alpha", 0.0))  # LinearRegression has no penalty
        solver = self._solver_for(n, d, distributed=is_distributed(X))
        # One pass for every statistic the solver needs (the Gram matrix for Cholesky).
        problem = _Problem(
            X,
            Y,
            sw,
            alpha,
            **normal_equations(
                X, Y, sw, self.fit_intercept, gram=solver == "cholesky", rhs=solver != "lsqr"
            ),
        )
        x_mean, y_mean = problem.x_mean, problem.y_mean

        self.n_iter_ = 1  # one direct solve, unless an iterative solver runs
        coef = None
        if solver == "cholesky":
            with self._blas_quiet() if d <= QUIET_SOLVE else nullcontext():
                coef = problem.cholesky()
        if coef is None:  # iterative by choice, or the normal equations are too ill-conditioned
            if solver == "cholesky":  # lsqr's vectors are n-long: cg for a Dask-backed matrix
                solver = "cg" if is_distributed(X) else "lsqr"
            iterate = problem.lsqr if solver == "lsqr" else problem.cg
            with self._iterations(Y.shape[1], f"fit ({solver})") as bar:
                results = [iterate(j, self.tol, self.max_iter, bar) for j in range(Y.shape[1])]
            coef = np.stack([c for c, _ in results], axis=1)
            self.n_iter_ = max(it for _, it in results)
        self.solver_ = solver

        coef = to_host(coef)  # d x targets
        with self._blas_quiet():
            intercept = (
                (to_host(y_mean) - to_host(x_mean) @ coef)
                if self.fit_intercept
                else np.zeros(coef.shape[1])
            )
        single = y.ndim == 1
        self.coef_ = coef[:, 0] if single else np.ascontiguousarray(coef.T)
        self.intercept_ = float(intercept[0]) if single else intercept
        return self

    def _solver_for(self, n, d, distributed=False):
        """The solver a fit on n × d data starts with: "auto" takes Cholesky for a determined
        problem whose Gram matrix is small enough, lsqr otherwise (cg on a Dask-backed matrix:
        lsqr works on n-long vectors, which would come to the client)."""
        if self.solver == "lsqr" and distributed:
            raise ValueError(
                "solver='lsqr' iterates on n-long vectors, which a Dask-backed "
                "matrix keeps on its workers; use 'cholesky', 'cg' or 'auto'"
            )
        if self.solver != "auto":
            return self.solver
        determined = float(getattr(self, "alpha", 0.0)) > 0 or d < n - int(self.fit_intercept)
        if determined and d <= MAX_GRAM_FEATURES:
            return "cholesky"
        return "cg" if distributed else "lsqr"

    def _workload(self, shape):
        """One Gram matrix and a solve (Cholesky), or an iterative solver's products."""
        n, d = shape
        solver = self._solver_for(n, d)
        if solver == "cholesky":
            return Workload("linreg_cholesky")
        return Workload(f"linreg_{solver}", 1, int(self.max_iter or DEFAULT_ITERATIONS[solver](d)))

    def predict(self, X: MatrixLike) -> Array:
        """Predict with the fitted linear model: ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples; a NormalizedMatrix is multiplied factorized.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_targets)
            Predicted values.
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        xp = namespace(X)
        out = X @ xp.asarray(self.coef_.T) + xp.asarray(self.intercept_)
        return to_output(out)  # a Dask array for a Dask-backed matrix

    def score(self, X: MatrixLike, y: MatrixLike, sample_weight: MatrixLike | None = None) -> float:
        """R² of the prediction (scikit-learn's ``score``); on a Dask-backed matrix in one pass
        over the target and the prediction, on the workers.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        if not is_distributed(X):
            return super().score(X, y, sample_weight)
        from ilargi.scaleout.arrays import r2_score  # lazy: Dask is optional

        prediction = self.predict(X)
        y = X.align(y, "y")
        sw = None if sample_weight is None else X.align(sample_weight, "sample_weight")
        return r2_score(y, prediction, sw)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.multi_output = True
        return tags


class _Problem:
    """One weighted, centered least-squares problem and the three ways to solve it, from the
    statistics of :func:`~ilargi.models._ops.normal_equations` (one pass over the data)."""

    def __init__(self, X, Y, sw, alpha, *, sw_sum, x_mean, y_mean, gram, rhs):
        self.X, self.Y, self.sw, self.sw_sum = X, Y, sw, sw_sum
        self.x_mean, self.y_mean, self.alpha = x_mean, y_mean, alpha
        self.gram, self.rhs = gram, rhs

    def _centered_rhs(self):
        """X_c^T S (Y - ybar) = X^T S Y - sum(s) mu ybar^T."""
        rhs = self.rhs
        if self.x_mean is not None:
            rhs = rhs - self.sw_sum * (self.x_mean[:, None] * self.y_mean[None, :])
        return rhs

    def cholesky(self):
        """Normal equations; None when the Gram matrix is singular or too ill-conditioned.

        The Gram matrix is equilibrated first (G -> D G D with D = diag(G)^(-1/2), i.e. unit-norm
        columns): the accuracy of Cholesky depends on the condition number of the equilibrated
        matrix (van der Sluis), so features on very different scales do not send a well-posed
        problem to lsqr.
        """
        gram = to_host(self.gram)
        if self.x_mean is not None:
            mu = to_host(self.x_mean)
            gram = gram - self.sw_sum * np.outer(mu, mu)
        gram[np.diag_indices_from(gram)] += self.alpha
        diagonal = np.diag(gram).copy()
        if not np.all(diagonal > 0):  # a constant (or all-zero) column without a penalty
            return None
        scale = 1.0 / np.sqrt(diagonal)
        gram *= scale[:, None] * scale[None, :]
        try:
            factor = scipy.linalg.cho_factor(gram, lower=False, check_finite=False)
        except np.linalg.LinAlgError:
            return None
        rcond, _ = dpocon(factor[0], np.abs(gram).sum(axis=0).max(), uplo="U")
        if rcond < MIN_RCOND:
            return None
        rhs = to_host(self._centered_rhs()) * scale[:, None]
        coef = scipy.linalg.cho_solve(factor, rhs, check_finite=False) * scale[:, None]
        return namespace(self.X).asarray(coef)

    def _centered_operator(self):
        """S^(1/2) (X - 1 mu^T) as a LinearOperator, never formed."""
        X, mu, xp = self.X, self.x_mean, namespace(self.X)
        root = None if self.sw is None else xp.sqrt(self.sw)
        n, d = X.shape

        def matvec(v):
            out = X @ xp.asarray(v).ravel()
            if mu is not None:
                out = out - float(mu @ xp.asarray(v).ravel())
            return to_host(out if root is None else root * out)

        def rmatvec(r):
            r = xp.asarray(r).ravel()
            r = r if root is None else root * r
            out = X.T @ r
            return to_host(out if mu is None else out - mu * float(r.sum()))

        return LinearOperator((n, d), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)

    def lsqr(self, j, tol, max_iter, bar):
        """lsqr on the centered, weighted operator; damp^2 = alpha gives the ridge penalty."""
        y = self.Y[:, j] if self.y_mean is None else self.Y[:, j] - self.y_mean[j]
        if self.sw is not None:
            y = namespace(y).sqrt(self.sw) * y
        result = lsqr(
            self._centered_operator(),
            to_host(y),
            damp=np.sqrt(self.alpha),
            atol=tol,
            btol=tol,
            iter_lim=max_iter,
        )
        _warn_if_not_converged(result[1] == 7, "lsqr", result[2])
        bar.update()
        return result[0], int(result[2])

    def cg(self, j, tol, max_iter, bar):
        """Conjugate gradients on the centered normal equations, one fused gramvec per step."""
        X, sw, mu, alpha, xp = self.X, self.sw, self.x_mean, self.alpha, namespace(self.X)
        d = X.shape[1]

        def matvec(v):
            v = xp.asarray(v).ravel()
            out = gramvec(X, v, sw, 1.0, alpha, v)
            if mu is not None:
                out = out - (self.sw_sum * float(mu @ v)) * mu
            return to_host(out)

        steps = []
        coef, info = cg(
            LinearOperator((d, d), matvec=matvec, dtype=np.float64),
            to_host(self._centered_rhs()[:, j]),
            rtol=tol,
            atol=0.0,
            maxiter=max_iter,
            callback=steps.append,
        )
        _warn_if_not_converged(info > 0, "cg", len(steps))
        bar.update()
        return coef, len(steps)


def _warn_if_not_converged(failed, solver, iterations):
    if failed:
        warnings.warn(
            f"{solver} did not converge in {iterations} iterations; increase max_iter or tol",
            ConvergenceWarning,
            stacklevel=3,
        )


_PARAMETERS = """
    fit_intercept : bool, default=True
        Fit an intercept (computed from the column means, without centering the data).
    solver : {"auto", "cholesky", "cg", "lsqr"}, default="auto"
        "auto": Cholesky of the centered Gram matrix when the problem is determined (alpha > 0 or
        more samples than features) and has at most ``MAX_GRAM_FEATURES`` features, else lsqr.
        Cholesky falls back to lsqr when the Gram matrix is singular or its reciprocal condition
        number is below ``MIN_RCOND`` (lsqr then returns the minimum-norm solution, like
        scikit-learn's lstsq). "cg": conjugate gradients on the normal equations.
    tol : float, default=1e-10
        Relative tolerance of the iterative solvers (lsqr atol and btol, cg rtol); >= 0.
    max_iter : int or None, default=None
        Iteration cap of the iterative solvers (None: lsqr 2 d, cg 10 d, SciPy's defaults).
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs: on the factorized form, on the joined table built
        once, or as the plan chooser decides (:func:`ilargi.choose`).
    verbose : bool or int, default=False
        Show a tqdm progress bar over the targets of an iterative solver."""

_ATTRIBUTES = """
    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Fitted coefficients.
    intercept_ : float or ndarray of shape (n_targets,)
        Fitted intercept (0 without ``fit_intercept``).
    n_iter_ : int
        Iterations of the iterative solver (the most over the targets); 1 for Cholesky.
    solver_ : str
        The solver that ran ("cholesky", "cg" or "lsqr").
    plan_ : str
        The plan that ran, "factorized" or "materialized".
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of X: a pandas DataFrame's, or a NormalizedMatrix's ``columns``; set
        only where X has names.
"""


class LinearRegression(_LeastSquares):
    __doc__ = (
        """Ordinary least squares on a NormalizedMatrix or an array.

    Minimizes ``sum_i s_i (y_i - x_i w - b)^2`` (s: sample weights) from the factorized Gram matrix
    ``X.T @ X`` and ``X.T @ y``, or with an iterative solver on products with X and X.T; the join
    is never built unless ``plan`` asks for it.

    Parameters
    ----------"""
        + _PARAMETERS
        + "\n"
        + _ATTRIBUTES
        + """
    See Also
    --------
    Ridge : The same with an L2 penalty.
    sklearn.linear_model.LinearRegression : The scikit-learn estimator it matches.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import LinearRegression
    >>> X, y = make_star(1000, tuple_ratio=10, d_fact=3, noise=0.0, random_state=0)
    >>> model = LinearRegression(plan="factorized").fit(X, y)
    >>> model.plan_, model.solver_, model.coef_.shape
    ('factorized', 'cholesky', (6,))
    >>> round(model.score(X, y), 6)
    1.0
    """
    )


class Ridge(_LeastSquares):
    __doc__ = (
        """L2-penalized least squares on a NormalizedMatrix or an array.

    Minimizes ``sum_i s_i (y_i - x_i w - b)^2 + alpha ||w||^2``; the intercept b is not penalized.
    With alpha > 0 the normal equations are always determined.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength, >= 0 (as in scikit-learn's Ridge)."""
        + _PARAMETERS
        + "\n"
        + _ATTRIBUTES
        + """
    See Also
    --------
    LinearRegression : The same without a penalty.
    sklearn.linear_model.Ridge : The scikit-learn estimator it matches.

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import Ridge
    >>> X, y = make_star(1000, tuple_ratio=10, d_fact=3, random_state=0)
    >>> model = Ridge(alpha=1.0, solver="cg", plan="factorized").fit(X, y)
    >>> model.plan_, model.solver_
    ('factorized', 'cg')
    >>> bool(model.score(X, y) > 0.9)
    True
    """
    )

    _parameter_constraints: dict = {
        **_LeastSquares._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        alpha: float = 1.0,
        *,
        fit_intercept: bool = True,
        solver: str = "auto",
        tol: float = 1e-10,
        max_iter: int | None = None,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(
            fit_intercept=fit_intercept,
            solver=solver,
            tol=tol,
            max_iter=max_iter,
            plan=plan,
            verbose=verbose,
        )
        self.alpha = alpha
