"""Gaussian non-negative matrix factorization X ~= W H by multiplicative updates (Lee & Seung).

Each iteration updates both factors,

    W <- W * (X H^T) / (W (H H^T)),        H <- H * (W^T X) / ((W^T W) H),

so the data are touched by one LMM (X @ H^T) and one transposed product (X^T @ W); everything else
is r x r or n x r. The objective 0.5 ||X - W H||_F^2 never increases; it is tracked without forming
W H: 0.5 (||X||^2 - 2 <W^T X, H> + <W^T W, H H^T>), with ||X||^2 computed once.

W for a fixed H -- what ``transform`` returns -- is a non-negative least-squares problem per row,
solved from X H^T and H H^T alone (:func:`solve_rows`). ``fit_transform`` returns that W for the
fitted H too, not the last iterate of the joint updates: both are then one computation on the same
data, so ``fit_transform(X)`` equals ``fit(X).transform(X)`` (scikit-learn's contract) however far
the joint updates got, and W fits X at least as well as the last update's W (the solve is exact;
it costs one more X @ H^T, and ``fit``, which returns no W, skips it).
"""

from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, check_non_negative

from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import dot_into, is_normalized, namespace, to_host, total_sq
from ._sklearn_compat import Interval, _fit_context

# Floor of the update denominators, so that a factor entry that reached 0 cannot divide by 0
# (scikit-learn's NMF uses the same float32 epsilon).
EPSILON = float(np.finfo(np.float32).eps)


def _multiplicative_step(factor, numerator, denominator, xp):
    return factor * numerator / xp.maximum(denominator, EPSILON)


def _update_rows(W, numerator, gram, out, scratch, xp):
    """W * numerator / max(W @ gram, EPSILON) written into ``out`` (``scratch``: one more n x r
    buffer). Fresh n x r temporaries cost a page fault per 4 KiB at every iteration, which took
    most of an iteration (several times the time of the same products into buffers)."""
    xp.matmul(W, gram, out=scratch)
    xp.maximum(scratch, EPSILON, out=scratch)
    xp.multiply(W, numerator, out=out)
    return xp.divide(out, scratch, out=out)


# A row's solution is optimal when its gradient on the entries held at 0 is not below -KKT_RTOL
# times the row's scale (the gradient's rounding is ~1e-16 times that).
KKT_RTOL = 1e-9
# H H^T of a larger condition number is singular in effect (collinear components): W is not
# unique then (W H is), and the exact solves would return rounding noise. A ridge of its largest
# eigenvalue / SINGULAR makes W unique (the collinear components share each row) and changes the
# objective by about 1/SINGULAR of ||W H||^2.
SINGULAR = 1e10
# Rows are solved per free set where the sets hold this many rows on average, else one masked
# system per row, batched in blocks of about BATCH_BYTES.
GROUP_ROWS = 16
BATCH_BYTES = 1 << 25


def solve_rows(XHt, HHt, rounds):
    """W >= 0 minimizing ||X - W H||_F for a fixed H, from ``X H^T`` (n x r) and ``H H^T`` (r x r).

    A non-negative least-squares problem per row of r unknowns, solved on the host (n x r
    numbers) by block principal pivoting (Kim and Park, 2011: the active-set method for many
    right-hand sides), started from the least-squares W's positive entries; a row still not
    optimal after ``rounds`` rounds takes Lawson and Hanson's NNLS. Where H H^T is singular
    (collinear components), a tiny ridge makes W unique (see SINGULAR). Every step is per row, so
    a row's W depends on that row alone (a subset or a reordering of the rows gives the same
    rows), and there is no random start (the same data give the same W).

    Parameters
    ----------
    XHt : ndarray of shape (n, r)
        ``X @ H.T`` (NumPy or CuPy; solved on the host).
    HHt : ndarray of shape (r, r)
        ``H @ H.T``.
    rounds : int
        Pivoting rounds at most.

    Returns
    -------
    ndarray of shape (n, r)
        W, on the host.
    """
    XHt, HHt = np.ascontiguousarray(to_host(XHt), dtype=np.float64), to_host(HHt)
    eigenvalues = np.linalg.eigvalsh(HHt)
    if eigenvalues[-1] <= 0:  # H = 0: every W fits equally, 0 is the smallest
        return np.zeros_like(XHt)
    if eigenvalues[0] < eigenvalues[-1] / SINGULAR:
        HHt = HHt + np.eye(len(HHt)) * (eigenvalues[-1] / SINGULAR)
    W, done = _pivoting(XHt, HHt, rounds)
    if not done.all():
        W[~done] = _nnls_rows(XHt[~done], HHt)
    return W


def _pivoting(XHt, HHt, rounds):
    """Block principal pivoting for every row at once: (W, whether each row is optimal).

    Each row keeps a passive set F (its free entries): W is solved exactly on F and is 0
    elsewhere; the entries infeasible for that (W < 0 on F, gradient < 0 off F) switch sides,
    all at once while that shrinks their number (at most 3 times without it), else only the
    last one, which makes the method finite (Kim and Park's rule)."""
    n, r = XHt.shape
    free = XHt @ np.linalg.inv(HHt) > 0
    W, gradient = _solve_free(free, XHt, HHt)
    tolerance = KKT_RTOL * (np.abs(XHt).sum(axis=1) + np.finfo(float).tiny)
    chances, best = np.full(n, 3), np.full(n, r + 1)
    for _ in range(rounds):
        infeasible = (free & (W < 0)) | (~free & (gradient < -tolerance[:, None]))
        count = infeasible.sum(axis=1)
        rows = np.flatnonzero(count)
        if not rows.size:
            break
        count, infeasible = count[rows], infeasible[rows]
        shrank = count < best[rows]
        full = shrank | (chances[rows] >= 1)
        best[rows[shrank]], chances[rows[shrank]] = count[shrank], 3
        chances[rows[full & ~shrank]] -= 1
        flip = np.where(full[:, None], infeasible, False)
        single = np.flatnonzero(~full)
        flip[single, r - 1 - np.argmax(infeasible[single, ::-1], axis=1)] = True
        free[rows] ^= flip
        W[rows], gradient[rows] = _solve_free(free[rows], XHt[rows], HHt)
    done = ~((free & (W < 0)) | (~free & (gradient < -tolerance[:, None]))).any(axis=1)
    return np.maximum(W, 0.0), done


def _solve_free(free, XHt, HHt):
    """(W, gradient W H H^T - X H^T): each row solved exactly on its free entries, 0 elsewhere;
    the gradient is 0 on them. Rows are grouped by their free set, one linear solve per set; where
    the sets are mostly distinct (many components), each row solves its own masked r x r system
    instead (one batched LAPACK call per block of rows, no Python loop over sets)."""
    n, r = free.shape
    if r <= 62:  # one integer per set: np.unique of the rows would sort n x r
        key = free @ (np.int64(1) << np.arange(r, dtype=np.int64))
        _, first, group = np.unique(key, return_index=True, return_inverse=True)
        sets = free[first]
    else:
        sets, group = np.unique(free, axis=0, return_inverse=True)
    W = np.zeros((n, r))
    if len(sets) * GROUP_ROWS > n:
        step = max(1, BATCH_BYTES // (8 * r * r))
        for start in range(0, n, step):
            mask = free[start : start + step]
            # H H^T on the free rows and columns, the identity on the others; X H^T masked alike
            systems = HHt * (mask[:, :, None] & mask[:, None, :])
            systems[:, np.arange(r), np.arange(r)] += ~mask
            targets = np.where(mask, XHt[start : start + step], 0.0)
            W[start : start + step] = np.linalg.solve(systems, targets[:, :, None])[:, :, 0]
    else:
        group = group.reshape(-1)
        order = np.argsort(group, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(group, minlength=len(sets)))])
        for number, columns in enumerate(sets):
            if columns.any():
                rows = order[bounds[number] : bounds[number + 1]]
                W[np.ix_(rows, columns)] = np.linalg.solve(
                    HHt[np.ix_(columns, columns)], XHt[np.ix_(rows, columns)].T
                ).T
    gradient = W @ HHt - XHt
    gradient[free] = 0.0
    return W, gradient


def _nnls_rows(XHt, HHt):
    """Lawson and Hanson's NNLS row by row (SciPy): min ||L^T w - L^-1 x H^T|| with
    H H^T = L L^T is the row's problem."""
    from scipy.linalg import cholesky, solve_triangular
    from scipy.optimize import nnls

    L = cholesky(HHt, lower=True)
    targets = solve_triangular(L, XHt.T, lower=True).T
    return np.array([nnls(L.T, target)[0] for target in targets]).reshape(XHt.shape)


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
        ||X - W H||_F after the last update (the W that :meth:`fit_transform` returns, solved
        for the final H, fits at least as well).
    plan_ : str
        The plan that ran, "factorized" or "materialized".
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of X: a pandas DataFrame's, or a NormalizedMatrix's ``columns``; set
        only where X has names.

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

    def __init__(
        self,
        n_components: int = 2,
        *,
        max_iter: int = 200,
        tol: float = 1e-4,
        random_state: int | np.random.RandomState | None = None,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    def _checked(self, X, reset):
        X = self._validate(X, reset=reset)
        if is_normalized(X):
            if float(X.min()) < 0:
                raise ValueError(
                    f"{type(self).__name__} needs non-negative data; "
                    f"the NormalizedMatrix has minimum {float(X.min())}"
                )
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
            The factor W of the training data for the fitted H, solved as :meth:`transform`
            solves it, so that it equals ``fit(X).transform(X)``.

        Raises
        ------
        ValueError
            If X has a negative entry.
        """
        X, H = self._fit(X)
        with self._blas_quiet():  # W solved for the final H, as transform solves it
            return self._rows_for(X, H)[0]

    def _fit(self, X):
        """The multiplicative updates: sets the fitted attributes; returns (the data the fit
        ran on, H)."""
        X = self._checked(X, reset=True)
        r = self.n_components
        X, self.plan_ = self._plan(X)
        xp = namespace(X)
        rng = check_random_state(self.random_state)
        # BLAS on every thread here would leave OpenBLAS's workers spinning into the first
        # iterations' compiled passes (a short fit takes markedly longer)
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
        return X, H

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
        self._fit(X)  # no W: fit_transform solves the W it returns
        return self

    def _rows_for(self, X, H):
        """(W on the host, objective - 0.5 ||X||^2): W >= 0 minimizing ||X - W H||_F
        (:func:`solve_rows`). Runs in the caller's BLAS context."""
        XHt, HHt = to_host(X @ H.T), to_host(H @ H.T)
        W = solve_rows(XHt, HHt, self.max_iter)
        return W, float(((W.T @ W) * HHt).sum()) / 2 - float((W * XHt).sum())

    def _solve_rows(self, X):
        """W >= 0 minimizing ||X - W H||_F for the fitted H, and that objective."""
        check_is_fitted(self)
        X = self._checked(X, reset=False)
        xp = namespace(X)
        with self._blas_quiet():
            W, loss = self._rows_for(X, xp.asarray(self.components_))
            return W, 0.5 * total_sq(X) + loss

    def transform(self, X: MatrixLike) -> Array:
        """The factor W of X for the fitted H: a non-negative least-squares solve per row.

        W is unique when the rows of ``components_`` are linearly independent; where they are
        collinear, any split of a row between them fits equally well: a tiny ridge (relative
        1e-10) picks the one that shares it.

        Block principal pivoting (at most ``max_iter`` rounds, then NNLS for the rows left)
        solves each row exactly (see :func:`solve_rows`); no random start, and each row's W
        depends on that row alone.

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
