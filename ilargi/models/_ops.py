"""The handful of operations the estimators are written against, for every kind of input.

A NormalizedMatrix provides them natively (factorized); plain arrays -- NumPy or CuPy dense, SciPy or
cupyx sparse -- get them here. Every algorithm in :mod:`ilargi.models` is written once on top of these
plus ``X @ W``, ``X.T @ R`` and ``X[idx]``, which all inputs support directly, so the factorized and the
materialized plan run the same code.
"""
import numpy as np
import scipy.sparse as sp

from ilargi.backend import backend_of, links


def is_normalized(X):
    """True for a NormalizedMatrix (duck-typed on its factorized operators, so any backend's qualifies)."""
    return hasattr(X, "gramvec") and hasattr(X, "materialize")


def is_sparse(X):
    """True for a SciPy or cupyx sparse matrix."""
    return sp.issparse(X) or type(X).__module__.startswith("cupyx.scipy.sparse")


def kernels(X):
    """The backend of X's data (the compiled CPU kernels, NumPy's, or the GPU's)."""
    return backend_of(X.parts[0].source if is_normalized(X) else X)


def namespace(X):
    """The array module of X's data: NumPy, or CuPy when X lives on a GPU."""
    return kernels(X).xp


def to_host(a):
    """A NumPy copy of a NumPy or CuPy array (SciPy's solvers and fitted attributes live on the host)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _dense(a):
    return a.toarray() if is_sparse(a) else a


def _row_scaled(X, w):
    """diag(w) X, keeping a sparse X sparse."""
    return X.multiply(w[:, None]).tocsr() if is_sparse(X) else X * w[:, None]


def _ravel(a):
    # Sparse reductions return np.matrix; bring them back to 1-D arrays.
    return namespace(a).asarray(a).ravel()


def crossprod(X, w=None):
    """X^T diag(w) X as a dense d x d array (w=None: X^T X)."""
    if is_normalized(X):
        return _dense(X.crossprod(w))
    return _dense(X.T @ (X if w is None else _row_scaled(X, w)))


def dot_into(X, W, out):
    """X @ W written into the preallocated ``out`` where X can (a NormalizedMatrix or a dense
    array); a sparse X returns a fresh array."""
    return X @ W if is_sparse(X) else X.dot(W, out=out)


def gramvec(X, y, v=None, alpha=1.0, beta=0.0, z=None):
    """alpha * X^T (v * (X @ y)) + beta * z for a vector y (v=None: no row weights, z=None: no z term)."""
    if is_normalized(X):
        return X.gramvec(y, v, alpha, beta, z)
    r = X @ y
    out = alpha * (X.T @ (r if v is None else v * r))
    return out if z is None else out + beta * z


def loss_gradient(X, coef, intercept, link):
    """(Σ_i loss_i, Xᵀ·r, Σ_i r_i) of a link (:mod:`ilargi.backend.links`) at the scores
    X·coef + intercept, r the link's residual: one fused pass for a NormalizedMatrix on the
    compiled backend (:meth:`~ilargi.rewriter.NormalizedMatrix.loss_gradient`), the product, the
    link and the transposed product in turn otherwise."""
    if is_normalized(X):
        return X.loss_gradient(coef, intercept, link)
    z = dot_into(X, coef, link.scores(coef.shape[1:]))
    z += intercept
    loss, r = link(z)
    return float(loss), X.T @ r, r.sum(axis=0)


def assign(X, centers, x_sq, rounding):
    """Lloyd's assignment (labels, closest, counts, cluster sums k × d) of the rows of X to their
    nearest centers (:meth:`~ilargi.rewriter.NormalizedMatrix.assign` for a NormalizedMatrix)."""
    if is_normalized(X):
        return X.assign(centers, x_sq, rounding)
    xp = namespace(centers)
    c_sq = (centers * centers).sum(axis=1)
    labels, closest = links.nearest(links.distances(X @ centers.T, x_sq, c_sq, rounding), x_sq,
                                    c_sq, rounding)
    one_hot = (labels[:, None] == xp.arange(centers.shape[0])[None, :]).astype(xp.float64)
    return labels, closest, one_hot.sum(axis=0), _dense(X.T @ one_hot).T


def column_mean(X):
    """Mean of each column."""
    return _ravel(X.mean(axis=0))


def column_var(X):
    """Population variance of each column (ddof=0)."""
    if is_normalized(X) or not is_sparse(X):
        return X.var(axis=0)
    mean = column_mean(X)
    return _ravel(X.multiply(X).mean(axis=0)) - mean * mean


def row_sq_norms(X):
    """Squared Euclidean norm of each row; for a NormalizedMatrix the squares stay factorized."""
    if is_normalized(X):
        return X.sum_of_squares(axis=1)
    if is_sparse(X):
        return _ravel(X.multiply(X).sum(axis=1))
    return namespace(X).einsum("ij,ij->i", X, X)


def total_sq(X):
    """Sum of the squares of all entries (squared Frobenius norm)."""
    if is_normalized(X):
        return float(X.sum_of_squares())
    if is_sparse(X):
        return float((X.data * X.data).sum())
    return float((X * X).sum())


def rows_dense(X, idx):
    """Rows idx of X as a small dense array (k-means seeds and relocated centers)."""
    selected = X[idx]
    if is_normalized(selected):
        selected = selected.materialize()
    return _dense(selected)
