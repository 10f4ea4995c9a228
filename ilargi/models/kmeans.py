"""Lloyd's k-means with k-means++ seeding, on normalized data.

Squared distances are ||x||^2 - 2 x.c + ||c||^2: the row norms ||x||^2 are computed once (factorized
row sums of the squared table), the cross term is one LMM X @ C^T per iteration, and the new centers
are the per-cluster means X^T Z / counts with Z the one-hot label matrix (one transposed product).
"""

import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_array, check_is_fitted

from ilargi.backend import links
from ilargi.backend.contract import Array, MatrixLike
from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import (
    assign,
    column_var,
    draw_rows,
    largest,
    namespace,
    persist,
    row_sq_norms,
    rows_dense,
    to_host,
    to_output,
)
from ._sklearn_compat import Interval, StrOptions, _fit_context


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, IlargiEstimator):
    """K-means clustering (Lloyd iterations, k-means++ seeding) of a NormalizedMatrix or an array.

    Each Lloyd step is one product ``X @ centers.T`` for the distances and one ``X.T @ Z`` (Z the
    one-hot labels) for the new centers; the row norms are computed once, factorized. Empty
    clusters are re-seeded with the points farthest from their centers, as scikit-learn does.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k, >= 1 (and at most the number of samples).
    init : "k-means++" or array-like of shape (n_clusters, n_features), default="k-means++"
        "k-means++": scikit-learn's greedy variant (2 + log(k) candidate seeds per step); an
        array gives the initial centers.
    n_init : int, default=1
        Runs with different seeds, >= 1; the one with the lowest inertia is kept (one run when
        ``init`` is an array).
    max_iter : int, default=300
        Lloyd iterations per run at most, >= 1.
    tol : float, default=1e-4
        Convergence when the summed squared center shift is at most tol times the mean column
        variance of X (scikit-learn's rule); >= 0.
    random_state : int, RandomState instance or None, default=None
        Seeds k-means++.
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs: on the factorized form, on the joined table built
        once, or as the plan chooser decides (:func:`ilargi.choose`).
    verbose : bool or int, default=False
        Show a tqdm progress bar over the iterations.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The centers.
    labels_ : ndarray of shape (n_samples,)
        Index of the closest center of each training sample.
    inertia_ : float
        Sum of squared distances of the training samples to their closest center.
    n_iter_ : int
        Lloyd iterations of the kept run.
    inertia_history_ : list of float
        Inertia after each assignment step of the kept run.
    plan_ : str
        The plan that ran, "factorized" or "materialized".
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of X: a pandas DataFrame's, or a NormalizedMatrix's ``columns``; set
        only where X has names.

    See Also
    --------
    sklearn.cluster.KMeans : The scikit-learn estimator it matches (Lloyd's algorithm).

    Examples
    --------
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import KMeans
    >>> X, _ = make_star(1000, tuple_ratio=10, d_fact=3, target=None, random_state=0)
    >>> model = KMeans(n_clusters=3, random_state=0, plan="factorized").fit(X)
    >>> model.plan_, model.cluster_centers_.shape, model.labels_.shape
    ('factorized', (3, 6), (1000,))
    >>> model.transform(X[:2]).shape
    (2, 3)
    """

    _distributed = True  # trains on a Dask-backed matrix: one distributed pass per Lloyd step

    _parameter_constraints: dict = {
        **IlargiEstimator._parameter_constraints,
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"k-means++"}), "array-like"],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        init: str | MatrixLike = "k-means++",
        n_init: int = 1,
        max_iter: int = 300,
        tol: float = 1e-4,
        random_state: int | np.random.RandomState | None = None,
        plan: str = "auto",
        verbose: bool = False,
    ) -> None:
        super().__init__(plan=plan, verbose=verbose)
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: MatrixLike, y: object = None) -> "KMeans":
        """Cluster X.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Training data; a NormalizedMatrix runs the plan of ``plan``.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If ``n_clusters`` exceeds the number of samples, or ``init`` has the wrong shape or
            holds NaN or infinity.
        """
        X = self._validate(X)
        n, k = X.shape[0], self.n_clusters
        if k > n:
            raise ValueError(f"n_samples={n} should be >= n_clusters={k}")
        given_init = not isinstance(self.init, str)
        if given_init:
            init = _checked_init(self.init, (k, X.shape[1]))
        X, self.plan_ = self._plan(X)
        xp = namespace(X)
        rng = check_random_state(self.random_state)
        lloyd = _Lloyd(X, self.tol * float(column_var(X).mean()))
        best = None
        for _ in range(1 if given_init else self.n_init):
            with self._blas_quiet():  # k-means++ alternates small BLAS calls with compiled passes
                centers = xp.asarray(init) if given_init else lloyd.kmeans_plus_plus(k, rng)
            with self._iterations(self.max_iter, "fit") as bar:
                run = lloyd.run(centers, self.max_iter, bar)
            if best is None or run[2] < best[2] * (1 - 1e-12):  # ties: the first, in both plans
                best = run
        assert best is not None  # n_init >= 1: the loop ran
        centers, labels, inertia, n_iter, history = best
        self.cluster_centers_ = to_host(centers)
        self.labels_ = to_output(labels)  # a (persisted) Dask array for a Dask-backed matrix
        self.inertia_, self.n_iter_, self.inertia_history_ = inertia, n_iter, history
        self._n_features_out = k
        return self

    def _distances(self, X):
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return _sq_distances(X, row_sq_norms(X), namespace(X).asarray(self.cluster_centers_))

    def _workload(self, shape):
        """Per Lloyd step, distances to k centers (an LMM of width k) and the new centers (a TMM);
        ``n_init`` runs unless the centers are given."""
        runs = 1 if not isinstance(self.init, str) else int(self.n_init)
        return Workload("kmeans", int(self.n_clusters), int(self.max_iter) * runs)

    def predict(self, X: MatrixLike) -> Array:
        """Index of the closest center of each sample.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples,)
            Cluster labels (ties within rounding go to the first center).
        """
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return to_output(
            _nearest(X, row_sq_norms(X), namespace(X).asarray(self.cluster_centers_))[0]
        )

    def transform(self, X: MatrixLike) -> Array:
        """Euclidean distances of each sample to every center.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.

        Returns
        -------
        ndarray of shape (n_samples, n_clusters)
            Distances.
        """
        distances = self._distances(X)
        return to_output(namespace(distances).sqrt(distances))

    def score(self, X: MatrixLike, y: object = None) -> float:
        """Opposite of the inertia of X with respect to the fitted centers (higher is better).

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Samples.
        y : None
            Ignored.

        Returns
        -------
        float
            Minus the sum of squared distances of the samples to their closest center.
        """
        return -float(self._distances(X).min(axis=1).sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _checked_init(init, shape):
    """The given initial centers as a float64 array of ``shape``, checked as X is: finite numbers
    (a NaN center takes no point and stays NaN, so the fit would silently end with it)."""
    try:
        given = np.asarray(init)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"init must be an array of shape {shape}: {error}") from None
    if given.shape != shape:
        raise ValueError(f"init has shape {given.shape}, expected {shape}")
    try:
        return check_array(given, dtype=np.float64, input_name="init")
    except (TypeError, ValueError) as error:
        raise ValueError(f"init must hold finite numbers: {error}") from None


def _sq_distances(X, x_sq, centers):
    """Squared distances of every row of X to every center (n x k), 0 below their rounding error,
    so a point and its duplicate center are at distance 0 whatever the summation order."""
    c_sq = (centers * centers).sum(axis=1)
    return links.distances(X @ centers.T, x_sq, c_sq, links.rounding(centers))


def _nearest(X, x_sq, centers):
    """(label, squared distance) of each row's nearest center: the first center within rounding
    of the nearest, so a point equidistant from two centers joins the same one in both plans."""
    c_sq = (centers * centers).sum(axis=1)
    return links.nearest(_sq_distances(X, x_sq, centers), x_sq, c_sq, links.rounding(centers))


class _Lloyd:
    """The iteration-invariant state of one k-means fit: the data and its row norms."""

    def __init__(self, X, tol):
        self.X, self.tol = X, tol
        self.x_sq = persist(row_sq_norms(X))  # a Dask array is computed once, kept on the workers
        self.xp = namespace(X)

    def kmeans_plus_plus(self, k, rng):
        """Greedy k-means++: each new seed is the best of 2 + log(k) candidates drawn by D^2."""
        X, xp, n = self.X, self.xp, self.X.shape[0]
        trials = 2 + int(math.log(k))
        centers = [rows_dense(X, [int(rng.randint(n))])]
        closest = persist(_sq_distances(X, self.x_sq, centers[0])[:, 0])
        potential = float(closest.sum())
        for _ in range(1, k):
            draws = rng.uniform(size=trials) * potential
            ids = draw_rows(closest, draws)
            candidates = rows_dense(X, ids)
            options = persist(xp.minimum(closest[:, None], _sq_distances(X, self.x_sq, candidates)))
            potentials = to_host(options.sum(axis=0))
            # The first of the candidates within rounding of the best: equal potentials (as of
            # symmetric or duplicate points) must not pick differently in the two plans.
            best = int(np.flatnonzero(potentials <= potentials.min() * (1 + 1e-12))[0])
            closest, potential = options[:, best], float(potentials[best])
            centers.append(candidates[best : best + 1])
        return xp.concatenate(centers)

    def step(self, centers):
        """One Lloyd step: (labels, closest, new centers) -- the assignment and the clusters'
        sums in one pass over the data (:func:`~ilargi.models._ops.assign`); an empty cluster
        takes the farthest point not yet used for another, as scikit-learn does."""
        labels, closest, counts, sums = assign(self.X, centers, self.x_sq, links.rounding(centers))
        empty = to_host(self.xp.flatnonzero(counts == 0))
        if empty.size:
            counts = counts.copy()
            far = largest(closest, empty.size)
            sums[empty], counts[empty] = rows_dense(self.X, far), 1.0
        return labels, closest, sums / counts[:, None]

    def run(self, centers, max_iter, bar):
        """Lloyd iterations from ``centers``: (centers, labels, inertia, n_iter, inertia history)."""
        history, n_iter = [], 0
        for n_iter in range(1, max_iter + 1):
            labels, closest, new = self.step(centers)
            history.append(float(closest.sum()))
            shift = float(((new - centers) ** 2).sum())
            centers = new
            bar.update()
            if shift <= self.tol:
                break
        labels, closest = _nearest(self.X, self.x_sq, centers)
        labels, closest = persist(labels), persist(closest)
        return centers, labels, float(closest.sum()), n_iter, history
