"""Lloyd's k-means with k-means++ seeding, on normalized data.

Squared distances are ||x||^2 - 2 x.c + ||c||^2: the row norms ||x||^2 are computed once (factorized
row sums of the squared table), the cross term is one LMM X @ C^T per iteration, and the new centers
are the per-cluster means X^T Z / counts with Z the one-hot label matrix (one transposed product).
"""
import math

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ilargi.chooser.workload import Workload

from ._base import IlargiEstimator
from ._ops import column_var, namespace, row_sq_norms, rows_dense, to_host


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, IlargiEstimator):
    """k-means clustering (Lloyd iterations) of a NormalizedMatrix or an array.

    Parameters
    ----------
    n_clusters : int, default=8
    init : "k-means++" or array of shape (n_clusters, n_features), default="k-means++"
        "k-means++" is scikit-learn's greedy variant (2 + log(k) candidate seeds per step).
    n_init : int, default=1
        Runs with different seeds; the one with the lowest inertia is kept (1 for a given init).
    max_iter : int, default=300
    tol : float, default=1e-4
        Convergence when the summed squared center shift is at most tol times the mean column
        variance of X (scikit-learn's rule).
    random_state : int, RandomState or None, default=None
    plan : {"auto", "factorized", "materialized"}, default="auto"
    verbose : bool, default=False
        Show a tqdm progress bar over the iterations.

    Attributes
    ----------
    cluster_centers_, labels_, inertia_, n_iter_, inertia_history_ (inertia after each assignment
    step of the kept run), plan_, n_features_in_.

    Empty clusters are re-seeded with the points farthest from their centers, as scikit-learn does.
    """

    def __init__(self, n_clusters=8, *, init="k-means++", n_init=1, max_iter=300, tol=1e-4,
                 random_state=None, plan="auto", verbose=False):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.plan = plan
        self.verbose = verbose

    def fit(self, X, y=None):
        """Cluster X (NormalizedMatrix, dense or sparse array)."""
        X = self._validate(X)
        n, k = X.shape[0], self.n_clusters
        if not 1 <= k <= n:
            raise ValueError(f"n_clusters must be in [1, n_samples = {n}], got {k}")
        given_init = not isinstance(self.init, str)
        if not given_init and self.init != "k-means++":
            raise ValueError(f"init must be 'k-means++' or an array, got {self.init!r}")
        if given_init:
            init = np.asarray(self.init, dtype=np.float64)
            if init.shape != (k, X.shape[1]):
                raise ValueError(f"init has shape {init.shape}, expected {(k, X.shape[1])}")
        X, self.plan_ = self._plan(X)
        xp = namespace(X)
        rng = check_random_state(self.random_state)
        lloyd = _Lloyd(X, self.tol * float(column_var(X).mean()))
        best = None
        for _ in range(1 if given_init else self.n_init):
            centers = xp.asarray(init) if given_init else lloyd.kmeans_plus_plus(k, rng)
            with self._progress(self.max_iter, "fit") as bar:
                run = lloyd.run(centers, self.max_iter, bar)
            if best is None or run[2] < best[2] * (1 - 1e-12):  # ties: the first, in both plans
                best = run
        centers, labels, inertia, n_iter, history = best
        self.cluster_centers_ = to_host(centers)
        self.labels_ = to_host(labels)
        self.inertia_, self.n_iter_, self.inertia_history_ = inertia, n_iter, history
        self._n_features_out = k
        return self

    def _distances(self, X):
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return _sq_distances(X, row_sq_norms(X), namespace(X).asarray(self.cluster_centers_))

    def workload(self, shape):
        """Per Lloyd step, distances to k centers (an LMM of width k) and the new centers (a TMM);
        ``n_init`` runs unless the centers are given."""
        runs = 1 if not isinstance(self.init, str) else int(self.n_init)
        return Workload("kmeans", int(self.n_clusters), int(self.max_iter) * runs)

    def predict(self, X):
        """Index of the closest center of each row."""
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        return to_host(_nearest(X, row_sq_norms(X), namespace(X).asarray(self.cluster_centers_))[0])

    def transform(self, X):
        """Euclidean distances of each row to every center."""
        distances = self._distances(X)
        return to_host(namespace(distances).sqrt(distances))

    def score(self, X, y=None):
        """Opposite of the inertia of X with respect to the fitted centers."""
        return -float(self._distances(X).min(axis=1).sum())

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _rounding(centers):
    """Relative rounding error of ||x||^2 - 2 x.c + ||c||^2: about (d + 2) eps (||x||^2 + ||c||^2)."""
    return (centers.shape[1] + 2) * float(np.finfo(np.float64).eps)


def _sq_distances(X, x_sq, centers):
    """Squared distances of every row of X to every center (n x k).

    Distances below their rounding error are set to exactly 0, so that a point and its duplicate
    center are at distance 0 whatever the summation order (factorized or not), and seeding agrees.
    """
    xp = namespace(centers)
    c_sq = (centers * centers).sum(axis=1)
    scale = x_sq[:, None] + c_sq[None, :]
    distances = scale - 2.0 * (X @ centers.T)
    return xp.where(distances <= _rounding(centers) * scale, 0.0, distances)


def _nearest(X, x_sq, centers):
    """(label, squared distance) of each row's nearest center: the first center within rounding
    of the nearest, so a point equidistant from two centers joins the same one in both plans."""
    xp = namespace(centers)
    distances = _sq_distances(X, x_sq, centers)
    slack = _rounding(centers) * (x_sq + float((centers * centers).sum(axis=1).max()))
    labels = (distances <= (distances.min(axis=1) + slack)[:, None]).argmax(axis=1)
    return labels, xp.take_along_axis(distances, labels[:, None], axis=1)[:, 0]


class _Lloyd:
    """The iteration-invariant state of one k-means fit: the data and its row norms."""

    def __init__(self, X, tol):
        self.X, self.tol = X, tol
        self.x_sq = row_sq_norms(X)
        self.xp = namespace(self.x_sq)

    def kmeans_plus_plus(self, k, rng):
        """Greedy k-means++: each new seed is the best of 2 + log(k) candidates drawn by D^2."""
        X, xp, n = self.X, self.xp, self.X.shape[0]
        trials = 2 + int(math.log(k))
        centers = [rows_dense(X, [int(rng.randint(n))])]
        closest = _sq_distances(X, self.x_sq, centers[0])[:, 0]
        potential = float(closest.sum())
        for _ in range(1, k):
            draws = rng.uniform(size=trials) * potential
            cumulative = to_host(xp.cumsum(closest))
            ids = np.minimum(np.searchsorted(cumulative, draws), n - 1)
            candidates = rows_dense(X, ids)
            options = xp.minimum(closest[:, None], _sq_distances(X, self.x_sq, candidates))
            potentials = to_host(options.sum(axis=0))
            # The first of the candidates within rounding of the best: equal potentials (as of
            # symmetric or duplicate points) must not pick differently in the two plans.
            best = int(np.flatnonzero(potentials <= potentials.min() * (1 + 1e-12))[0])
            closest, potential = options[:, best], float(potentials[best])
            centers.append(candidates[best:best + 1])
        return xp.concatenate(centers)

    def assign(self, centers):
        return _nearest(self.X, self.x_sq, centers)

    def update(self, labels, closest, k):
        """Cluster means; an empty cluster takes the farthest point not yet used for another."""
        xp = self.xp
        one_hot = (labels[:, None] == xp.arange(k)[None, :]).astype(xp.float64)
        counts = one_hot.sum(axis=0)
        sums = (self.X.T @ one_hot).T
        empty = to_host(xp.flatnonzero(counts == 0))
        if empty.size:
            far = to_host(xp.argsort(-closest)[: empty.size])
            sums[empty], counts[empty] = rows_dense(self.X, far), 1.0
        return sums / counts[:, None]

    def run(self, centers, max_iter, bar):
        """Lloyd iterations from ``centers``: (centers, labels, inertia, n_iter, inertia history)."""
        history, n_iter = [], 0
        k = centers.shape[0]
        for n_iter in range(1, max_iter + 1):
            labels, closest = self.assign(centers)
            history.append(float(closest.sum()))
            new = self.update(labels, closest, k)
            shift = float(((new - centers) ** 2).sum())
            centers = new
            bar.update()
            if shift <= self.tol:
                break
        labels, closest = self.assign(centers)
        return centers, labels, float(closest.sum()), n_iter, history
