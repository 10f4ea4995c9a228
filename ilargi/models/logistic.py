"""L2-penalized logistic regression, binary and multinomial, on normalized data.

The objective is scikit-learn's, scaled by 1 / (C sum(s)) so that tolerances mean the same:

    f(w, b) = [ sum_i s_i loss(x_i W + b, y_i) ] / sum(s)  +  ||W||^2 / (2 C sum(s))

with the log-loss of the sigmoid (binary, one column of W) or of the softmax (multinomial, one
column per class); the intercept b is not penalized. Its gradient is X^T R / sum(s) + W / (C sum(s))
with R = s * (p - y): one LMM and one transposed product per evaluation, factorized or not.
"""

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser.workload import Workload

from . import _solvers
from ._base import IlargiEstimator
from ._ops import (
    class_codes,
    gramvec,
    is_distributed,
    kernels,
    loss_gradient,
    namespace,
    on_rows,
    persist,
    row_sq_norms,
    take_values,
    to_host,
    to_output,
    total_sq,
)
from ._sklearn_compat import Interval, StrOptions, _fit_context

SOLVERS = ("lbfgs", "newton-cg", "gd")


def _softmax_log(Z, xp):
    """Row-wise log-softmax, computed stably."""
    top = Z.max(axis=1, keepdims=True)
    shifted = Z - top
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


class LogisticRegression(ClassifierMixin, IlargiEstimator):
    """Logistic regression with an L2 penalty, binary or multinomial, on a NormalizedMatrix or an array.

    Minimizes scikit-learn's objective, ``C sum_i s_i log-loss_i + ||W||^2 / 2`` (s: sample weights;
    the sigmoid for two classes, the softmax for more; the intercept is not penalized). Each
    evaluation of the loss and its gradient is one product with X and one with X.T, factorized or not.

    Parameters
    ----------
    C : float, default=1.0
        Inverse penalty strength, > 0, as in scikit-learn.
    fit_intercept : bool, default=True
        Fit an (unpenalized) intercept per class column.
    solver : {"lbfgs", "newton-cg", "gd"}, default="lbfgs"
        "lbfgs": limited-memory BFGS (10 curvature pairs, strong Wolfe line search) on the exact
        loss and gradient, stopping as scikit-learn's does (``max |gradient| <= tol``, or a relative
        decrease of the objective below 64 eps). "newton-cg": Newton steps solved by conjugate
        gradients whose Hessian-vector products are ``X.T @ (D * (X @ v))`` (one fused
        ``gramvec`` pass each), scikit-learn's inexact scheme. "gd": batch gradient descent with
        a fixed step, the setting of the factorized-learning literature (e.g. ``max_iter=20``);
        it stops early only when the gradient is below ``tol``.
    learning_rate : float or "auto", default="auto"
        Step of "gd", > 0. "auto" is 1/L for the Lipschitz bound L = c (mean_i s_i ||x_i||^2 /
        mean(s) + fit_intercept) + 1/(C sum(s)) of the gradient (c = 1/4 binary, 1/2 multinomial),
        which never diverges.
    tol : float, default=1e-4
        Stop when the largest gradient entry is at most tol (scikit-learn's meaning for "lbfgs"
        and "newton-cg"; the only test of "gd").
    max_iter : int, default=100
        Iterations at most, >= 0.
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs: on the factorized form, on the joined table built
        once, or as the plan chooser decides (:func:`ilargi.choose`).
    verbose : bool or int, default=False
        Show a tqdm progress bar over the iterations.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The class labels, sorted.
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
        Coefficients: one row for two classes (the second class's score), one per class otherwise.
    intercept_ : ndarray of shape (1,) or (n_classes,)
        Intercepts (zeros without ``fit_intercept``).
    n_iter_ : int
        Iterations run.
    loss_history_ : list of float
        The objective, scaled by 1 / (C sum(s)), at the start and after each iteration
        (``n_iter_ + 1`` values).
    plan_ : str
        The plan that ran, "factorized" or "materialized".
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of X: a pandas DataFrame's, or a NormalizedMatrix's ``columns``; set
        only where X has names.

    See Also
    --------
    sklearn.linear_model.LogisticRegression : The scikit-learn estimator it matches (L2 penalty).

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import LogisticRegression
    >>> X, y = make_star(2000, tuple_ratio=10, d_fact=3, target="logistic", noise=0.1,
    ...                  random_state=0)
    >>> model = LogisticRegression(plan="factorized").fit(X, y)
    >>> model.plan_, model.classes_, model.coef_.shape
    ('factorized', array([0., 1.]), (1, 6))
    >>> bool(model.score(X, y) > 0.85)  # training accuracy
    True
    >>> model.predict_proba(X[:3]).shape
    (3, 2)
    """

    _distributed = True  # trains on a Dask-backed matrix: one distributed pass per evaluation

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(SOLVERS))],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
    }

    def __init__(
        self,
        C: float = 1.0,
        *,
        fit_intercept: bool = True,
        solver: str = "lbfgs",
        learning_rate: str | float = "auto",
        tol: float = 1e-4,
        max_iter: int = 100,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.C = C
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.learning_rate = learning_rate
        self.tol = tol
        self.max_iter = max_iter

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self, X: MatrixLike, y: MatrixLike, sample_weight: MatrixLike | None = None
    ) -> "LogisticRegression":
        """Fit the coefficients on X and the class labels y.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Training data; a NormalizedMatrix runs the plan of ``plan``.
        y : array-like of shape (n_samples,)
            Class labels, at least two distinct ones.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample (None: all 1).

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If y holds a single class or is not a classification target.
        """
        X, y = self._validate(X, y)
        self.classes_, encoded = class_codes(y)
        if self.classes_.size < 2:
            raise ValueError(
                "LogisticRegression needs samples of at least 2 classes, but the "
                f"data contain only one class: {self.classes_[0]!r}"
            )
        sw = self._sample_weight(sample_weight, X)
        X, self.plan_ = self._plan(X)
        problem = _Objective(X, encoded, self.classes_.size, sw, self.C, self.fit_intercept)

        self.loss_history_: list[float] = []
        with self._iterations(self.max_iter, f"fit ({self.solver})") as bar:
            if self.solver == "gd":
                params = self._gradient_descent(problem, bar)
            else:
                params = self._minimize(problem, bar)
        coef, intercept = problem.unpack(params)
        self.coef_ = np.ascontiguousarray(to_host(coef).reshape(problem.d, -1).T)
        self.intercept_ = to_host(intercept).reshape(-1)
        return self

    def _record(self, loss, bar):
        self.loss_history_.append(loss)
        bar.update()

    def _minimize(self, problem, bar):
        """L-BFGS or Newton-CG from zero; warns when it stops before converging."""
        start = np.zeros(problem.n_params)
        callback = lambda params, loss: self._record(loss, bar)  # noqa: E731
        if self.solver == "lbfgs":
            result = _solvers.lbfgs(
                problem.loss_and_gradient,
                start,
                tol=self.tol,
                max_iter=self.max_iter,
                callback=callback,
            )
        else:
            result = _solvers.newton_cg(
                problem.loss_and_gradient,
                problem.hessian_product,
                start,
                tol=self.tol,
                max_iter=self.max_iter,
                callback=callback,
            )
        self.loss_history_.insert(0, problem.initial_loss)
        self.n_iter_ = result.n_iter
        if not result.converged:
            warnings.warn(
                f"{self.solver} did not converge in {result.n_iter} iterations "
                f"({result.message}); increase max_iter or scale the data",
                ConvergenceWarning,
                stacklevel=4,
            )
        return result.x

    def _gradient_descent(self, problem, bar):
        step = self.learning_rate
        if step == "auto":
            step = 1.0 / problem.lipschitz_bound()
        params = np.zeros(problem.n_params)
        loss, grad = problem.loss_and_gradient(params)
        self.loss_history_.append(loss)
        self.n_iter_ = 0
        while self.n_iter_ < self.max_iter and np.abs(grad).max() > self.tol:
            params = params - step * grad
            loss, grad = problem.loss_and_gradient(params)
            self.n_iter_ += 1
            self._record(loss, bar)
        return params

    def _workload(self, shape):
        """One loss-and-gradient pass (an LMM and a TMM) per iteration, of one column for two
        classes and of k for k > 2 (a softmax pass): the classes of the fit that asks (known
        before it chooses a plan) or of the last fit; two before any fit."""
        kind = {"gd": "logreg_gd", "lbfgs": "logreg_lbfgs", "newton-cg": "logreg_newton"}[
            self.solver
        ]
        classes = len(getattr(self, "classes_", ()))
        return Workload(kind, classes if classes > 2 else 1, int(self.max_iter))

    def decision_function(self, X: MatrixLike) -> Array:
        """Linear scores ``X @ coef_.T + intercept_``.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,) or (n_samples, n_classes)
            The score of the second class for two classes, of every class otherwise.
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        xp = namespace(X)
        scores = to_output(X @ xp.asarray(self.coef_.T) + xp.asarray(self.intercept_))
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_log_proba(self, X: MatrixLike) -> Array:
        """Log-probabilities of the classes.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Log-probabilities, columns in the order of ``classes_``.
        """
        scores = self.decision_function(X)
        if scores.ndim == 1:
            scores = np.stack([np.zeros_like(scores), scores], axis=1)
        return _softmax_log(scores, np)

    def predict_proba(self, X: MatrixLike) -> Array:
        """Probabilities of the classes.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            Probabilities, columns in the order of ``classes_``; rows sum to 1.
        """
        return np.exp(self.predict_log_proba(X))

    def predict(self, X: MatrixLike) -> Array:
        """The most probable class of each sample.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            Predicted labels, values of ``classes_``.
        """
        scores = self.decision_function(X)
        best = (scores > 0).astype(np.intp) if scores.ndim == 1 else scores.argmax(axis=1)
        return take_values(self.classes_, best)  # lazily for a Dask-backed matrix

    def score(self, X: MatrixLike, y: MatrixLike, sample_weight: MatrixLike | None = None) -> float:
        """Mean accuracy (scikit-learn's ``score``); on a Dask-backed matrix in one pass on the
        workers.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        float
        """
        if not is_distributed(X):
            return super().score(X, y, sample_weight)
        from ilargi.scaleout.arrays import accuracy  # lazy: Dask is optional

        sw = None if sample_weight is None else X.align(sample_weight, "sample_weight")
        return accuracy(X.align(y, "y"), self.predict(X), sw)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class _Objective:
    """The scaled penalized log-loss of one training set, its gradient and Hessian products, on
    flat parameters [W (d x m, row-major), b (m)], m = 1 column for two classes and k for k > 2.

    One evaluation is one :func:`~ilargi.models._ops.loss_gradient`: a fused pass over the fact
    rows for a factorized X on the compiled backend, the products and the link otherwise.
    """

    def __init__(self, X, encoded, n_classes, sw, C, fit_intercept):
        self.X, self.fit_intercept = X, fit_intercept
        self.xp = xp = namespace(X)
        self.d = X.shape[1]
        self.binary = n_classes == 2
        self.m = 1 if self.binary else n_classes
        labels = on_rows(X, encoded)  # a Dask array stays on the workers
        self.sw_sum = float(X.shape[0]) if sw is None else float(sw.sum())
        self.sw = None if sw is None else on_rows(X, sw, xp.float64)
        backend = kernels(X)
        self.link = (
            backend.BinaryLink(labels.astype(xp.float64), self.sw)
            if self.binary
            else backend.MultinomialLink(labels, n_classes, self.sw)
        )
        self.l2 = 1.0 / (C * self.sw_sum)
        self.n_params = (self.d + int(fit_intercept)) * self.m
        self.initial_loss = None

    def unpack(self, params):
        """(W, b) on the data's device; W is (d,) for binary problems, (d, k) otherwise."""
        params = self.xp.asarray(params)
        split = self.d * self.m
        coef = params[:split] if self.binary else params[:split].reshape(self.d, self.m)
        intercept = params[split:] if self.fit_intercept else self.xp.zeros(self.m)
        return coef, (intercept[0] if self.binary else intercept)

    def loss_and_gradient(self, params):
        """(f, ∇f) at the flat parameters (a fresh host vector)."""
        coef, intercept = self.unpack(params)
        loss, grad_coef, total = loss_gradient(self.X, coef, intercept, self.link)
        loss = loss / self.sw_sum + 0.5 * self.l2 * float((coef * coef).sum())
        if self.initial_loss is None:
            self.initial_loss = loss
        grad = [to_host(grad_coef / self.sw_sum + self.l2 * coef).ravel()]
        if self.fit_intercept:
            grad.append(np.atleast_1d(to_host(total)) / self.sw_sum)
        return loss, np.concatenate(grad)

    def hessian_product(self, params):
        """v -> ∇²f(params)·v (flat, host), for Newton-CG: one gramvec pass per product for two
        classes (Xᵀ(D ⊙ (X·v)), D = s σ(1 - σ) / Σs); for k classes an LMM and a TMM of width k."""
        coef, intercept = self.unpack(params)
        X, xp, d, m = self.X, self.xp, self.d, self.m
        z = X @ coef
        z += intercept
        if self.binary:
            D = persist(self.link.curvature(z) / self.sw_sum)  # reused by every product
            u = X.T @ D if self.fit_intercept else None  # Xᵀ·D, the intercept's cross terms
            total = float(D.sum())

            def product(v):
                v_w = xp.asarray(v[:d])
                out = gramvec(X, v_w, D, 1.0, self.l2, v_w)
                if not self.fit_intercept:
                    return to_host(out)
                out = out + v[d] * u
                return np.concatenate([to_host(out), [float(u @ v_w) + v[d] * total]])

            return product
        P = persist(self.link.probabilities(z))
        weights = (1.0 if self.sw is None else self.sw[:, None]) / self.sw_sum

        def product(v):
            V = xp.asarray(v[: d * m]).reshape(d, m)
            Q = X @ V
            if self.fit_intercept:
                Q += xp.asarray(v[d * m :])
            PQ = P * Q
            R = (PQ - P * PQ.sum(axis=1, keepdims=True)) * weights
            out = [to_host(X.T @ R + self.l2 * V).ravel()]
            if self.fit_intercept:
                out.append(to_host(R.sum(axis=0)))
            return np.concatenate(out)

        return product

    def lipschitz_bound(self):
        """An upper bound of the gradient's Lipschitz constant (see ``learning_rate``).

        The Hessian is X^T S D X / sum(s) with D <= c I (c = 1/4 for the sigmoid, 1/2 for the
        softmax), so its largest eigenvalue is at most c * trace(X^T S X) / sum(s): c times the
        weighted mean squared row norm (plus 1 for the intercept column) -- one reduction, no
        per-row vector in the unweighted case.
        """
        curvature = 0.25 if self.binary else 0.5
        if self.sw is None:
            mean_sq = total_sq(self.X) / self.X.shape[0]
        else:
            mean_sq = float(row_sq_norms(self.X) @ self.sw) / self.sw_sum
        return curvature * (mean_sq + float(self.fit_intercept)) + self.l2
