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
import scipy.optimize
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import dot_into, namespace, row_sq_norms, to_host, total_sq

SOLVERS = ("lbfgs", "gd")


def _softmax_log(Z, xp):
    """Row-wise log-softmax, computed stably."""
    top = Z.max(axis=1, keepdims=True)
    shifted = Z - top
    return shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))


def _weighted_sum(values, sw):
    return float(values.sum() if sw is None else sw @ values)


def _sum_of_logs(x, xp, block=512):
    """Σ log(x_i) for x_i in [1, 2], as logs of products of ``block`` values (≤ 2^512, so no
    overflow; each product rounds like a sum of ``block`` logs would): multiplying is much cheaper
    than taking a log per value."""
    whole = x.size - x.size % block
    products = xp.prod(x[:whole].reshape(block, -1), axis=0)
    return float(xp.log(products).sum()) + float(xp.log(x[whole:]).sum())


class _BinaryLink:
    """Σ_i s_i (log(1 + e^z_i) - y_i z_i), the weighted log-loss of the sigmoid, and its derivative
    s ⊙ (sigmoid(z) - y), in a few passes over preallocated buffers.

    Buffers are allocated once: fresh n-vectors would be page-faulted in on every call, which
    costs more than the arithmetic. log(1 + e^z) = max(z, 0) + log(1 + e^-|z|): exp(-|z|) is
    formed once and serves both the loss and the sigmoid, stably on both sides of 0; Σ max(z, 0)
    is (Σz + Σ|z|) / 2 and the logs are summed as logs of products, so the loss adds reductions,
    not passes that write; the sigmoid needs no masked copy (a masked copy costs a full pass).
    """

    def __init__(self, y, sw, xp):
        self.y, self.sw, self.xp = y, sw, xp
        self.sw_y = y if sw is None else sw * y
        n = y.shape[0]
        self.e, self.one_e, self.grad = (xp.empty(n) for _ in range(3))
        self.positive = xp.empty(n, dtype=bool)

    def __call__(self, z):
        xp, e, one_e, grad, sw = self.xp, self.e, self.one_e, self.grad, self.sw
        xp.abs(z, out=e)
        loss = 0.5 * (_weighted_sum(e, sw) + _weighted_sum(z, sw)) - float(self.sw_y @ z)
        xp.negative(e, out=e)
        xp.exp(e, out=e)                      # exp(-|z|), in (0, 1]
        xp.add(e, 1.0, out=one_e)
        loss += _sum_of_logs(one_e, xp) if sw is None else float(sw @ xp.log(one_e, out=grad))
        xp.greater_equal(z, 0.0, out=self.positive)
        xp.maximum(e, self.positive, out=e)   # e^min(z, 0): 1 where z >= 0 (e <= 1), e^z elsewhere
        xp.divide(e, one_e, out=grad)         # sigmoid(z)
        grad -= self.y
        if sw is not None:
            grad *= sw
        return loss, grad


class _MultinomialLink:
    """Σ_i s_i (logsumexp(z_i) - z_iy), the weighted log-loss of the softmax, and its derivative
    s ⊙ (softmax(z) - onehot(y))."""

    def __init__(self, labels, n_classes, sw, xp):
        self.labels, self.sw, self.xp = labels[:, None], sw, xp
        self.onehot = (labels[:, None] == xp.arange(n_classes)[None, :]).astype(xp.float64)
        self.grad = xp.empty(self.onehot.shape)

    def __call__(self, Z):
        xp, grad = self.xp, self.grad
        Z -= Z.max(axis=1, keepdims=True)     # Z is a fresh product, ours to shift
        xp.exp(Z, out=grad)
        total = xp.einsum("ij->i", grad)      # row sums; einsum beats sum(axis=1) on few columns
        grad /= total[:, None]
        loss = _weighted_sum(xp.log(total) - xp.take_along_axis(Z, self.labels, axis=1)[:, 0], self.sw)
        grad -= self.onehot
        if self.sw is not None:
            grad *= self.sw[:, None]
        return loss, grad


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
    solver : {"lbfgs", "gd"}, default="lbfgs"
        "lbfgs": SciPy's L-BFGS-B on the exact loss and gradient (scikit-learn's settings).
        "gd": batch gradient descent with a fixed step, the setting of the factorized-learning
        literature (e.g. ``max_iter=20``); it stops early only when the gradient is below ``tol``.
    learning_rate : float or "auto", default="auto"
        Step of "gd", > 0. "auto" is 1/L for the Lipschitz bound L = c (mean_i s_i ||x_i||^2 /
        mean(s) + fit_intercept) + 1/(C sum(s)) of the gradient (c = 1/4 binary, 1/2 multinomial),
        which never diverges.
    tol : float, default=1e-4
        L-BFGS-B's gtol (as in scikit-learn); for "gd" the largest gradient entry at which to stop.
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
    feature_names_in_ : ndarray of shape (n_features_in_,)
        Column names of a pandas DataFrame X; set only for one.

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

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "C": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "solver": [StrOptions(set(SOLVERS))],
        "learning_rate": [Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
    }

    def __init__(self, C=1.0, *, fit_intercept=True, solver="lbfgs", learning_rate="auto",
                 tol=1e-4, max_iter=100, plan="auto", verbose=False):
        super().__init__(plan=plan, verbose=verbose)
        self.C = C
        self.fit_intercept = fit_intercept
        self.solver = solver
        self.learning_rate = learning_rate
        self.tol = tol
        self.max_iter = max_iter

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
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
        check_classification_targets(y)
        self.classes_, encoded = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError("LogisticRegression needs samples of at least 2 classes, but the "
                             f"data contain only one class: {self.classes_[0]!r}")
        sw = self._sample_weight(sample_weight, X)
        X, self.plan_ = self._plan(X)
        problem = _Objective(X, encoded, self.classes_.size, sw, self.C, self.fit_intercept)

        self.loss_history_ = []
        with self._progress(self.max_iter, f"fit ({self.solver})") as bar:
            if self.solver == "lbfgs":
                params = self._lbfgs(problem, bar)
            else:
                params = self._gradient_descent(problem, bar)
        coef, intercept = problem.unpack(params)
        self.coef_ = np.ascontiguousarray(to_host(coef).reshape(problem.d, -1).T)
        self.intercept_ = to_host(intercept).reshape(-1)
        return self

    def _record(self, loss, bar):
        self.loss_history_.append(loss)
        bar.update()

    def _lbfgs(self, problem, bar):
        history = self.loss_history_

        def objective(params):
            loss, grad = problem.loss_and_gradient(params)
            if not history:  # the starting point
                history.append(loss)
            return loss, grad

        result = scipy.optimize.minimize(
            objective, np.zeros(problem.n_params), method="L-BFGS-B", jac=True,
            options={"maxiter": self.max_iter, "maxls": 50, "gtol": self.tol,
                     "ftol": 64 * np.finfo(float).eps},
            callback=lambda intermediate_result: self._record(float(intermediate_result.fun), bar))
        self.n_iter_ = int(result.nit)
        if result.status != 0:
            warnings.warn(f"L-BFGS-B did not converge in {result.nit} iterations "
                          f"({result.message}); increase max_iter or scale the data",
                          ConvergenceWarning, stacklevel=4)
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
        """One loss-and-gradient pass (an LMM and a TMM) per iteration."""
        return Workload("logreg_gd" if self.solver == "gd" else "logreg_lbfgs", 1, int(self.max_iter))

    def decision_function(self, X):
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
        scores = to_host(X @ xp.asarray(self.coef_.T) + xp.asarray(self.intercept_))
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_log_proba(self, X):
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
            scores = np.column_stack([np.zeros_like(scores), scores])
        return _softmax_log(scores, np)

    def predict_proba(self, X):
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

    def predict(self, X):
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
        return self.classes_[best]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


class _Objective:
    """The scaled penalized log-loss of one training set and its gradient, on flat parameters.

    Parameters are laid out as [W (d x m, row-major), b (m)] with m = 1 column for two classes
    and m = k columns for k > 2.
    """

    def __init__(self, X, encoded, n_classes, sw, C, fit_intercept):
        self.X, self.fit_intercept = X, fit_intercept
        self.xp = xp = namespace(X)
        self.d = X.shape[1]
        self.binary = n_classes == 2
        self.m = 1 if self.binary else n_classes
        labels = xp.asarray(encoded)
        self.sw_sum = float(X.shape[0]) if sw is None else float(sw.sum())
        self.sw = None if sw is None else xp.asarray(sw, dtype=xp.float64)
        self.link = _BinaryLink(labels.astype(xp.float64), self.sw, xp) if self.binary \
            else _MultinomialLink(labels, n_classes, self.sw, xp)
        self.l2 = 1.0 / (C * self.sw_sum)
        self.n_params = (self.d + int(fit_intercept)) * self.m
        self.scores = None  # X·W, one buffer for every evaluation

    def unpack(self, params):
        """(W, b) on the data's device; W is (d,) for binary problems, (d, k) otherwise."""
        params = self.xp.asarray(params)
        split = self.d * self.m
        coef = params[:split] if self.binary else params[:split].reshape(self.d, self.m)
        intercept = params[split:] if self.fit_intercept else self.xp.zeros(self.m)
        return coef, (intercept[0] if self.binary else intercept)

    def loss_and_gradient(self, params):
        coef, intercept = self.unpack(params)
        X = self.X
        if self.scores is None:
            self.scores = self.xp.empty((X.shape[0],) + coef.shape[1:])
        scores = dot_into(X, coef, self.scores)
        scores += intercept
        loss, residual = self.link(scores)
        loss = loss / self.sw_sum + 0.5 * self.l2 * float((coef * coef).sum())
        grad_coef = (X.T @ residual) / self.sw_sum + self.l2 * coef
        parts = [to_host(grad_coef).ravel()]
        if self.fit_intercept:
            parts.append(np.atleast_1d(to_host(residual.sum(axis=0))) / self.sw_sum)
        return loss, np.concatenate(parts)

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
