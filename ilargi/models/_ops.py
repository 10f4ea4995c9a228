"""The handful of operations the estimators are written against, for every kind of input.

A NormalizedMatrix provides them natively (factorized); plain arrays -- NumPy or CuPy dense, SciPy or
cupyx sparse -- get them here. Every algorithm in :mod:`ilargi.models` is written once on top of these
plus ``X @ W``, ``X.T @ R`` and ``X[idx]``, which all inputs support directly, so the factorized and the
materialized plan run the same code.

A table on the CPU (the materialized plan's, or a NumPy or SciPy array from the user) is trained on
as a NormalizedMatrix of one part, the table itself, where ilargi's compiled kernels are the faster
(:func:`fit_matrix`: a dense table always, a sparse one where there are threads to use): its
products and fused passes then run on every thread of :func:`ilargi.threads`, as a factorized
fit's do, where SciPy's CSR products and BLAS inside a fit run on one.
"""

import numpy as np
import scipy.sparse as sp

from ilargi.backend import backend_of, links, threads
from ilargi.metadata import Indicator, Part
from ilargi.rewriter import NormalizedMatrix, training


def is_normalized(X):
    """True for a NormalizedMatrix (duck-typed on its factorized operators, so any backend's qualifies)."""
    return hasattr(X, "gramvec") and hasattr(X, "materialize")


def is_distributed(X):
    """True for a Dask-backed matrix (:mod:`ilargi.scaleout`): its rows live in partitions on Dask
    workers, per-row results are row-chunked Dask arrays and reductions come back computed."""
    return is_normalized(X) and hasattr(X, "npartitions")


def is_lazy(a):
    """True for a Dask array (a per-row result or target of a Dask-backed matrix)."""
    return type(a).__module__.startswith("dask.")


def is_sparse(X):
    """True for a SciPy or cupyx sparse matrix."""
    return sp.issparse(X) or type(X).__module__.startswith("cupyx.scipy.sparse")


# A table of fewer stored values runs its products on one thread in the compiled backend too
# (its SMALL_CSR cut-off), where a NormalizedMatrix only adds its per-call checks.
PARALLEL_VALUES = 1 << 16


def fit_matrix(X):
    """The matrix a fit runs on: a NumPy array or SciPy sparse matrix on the CPU (already checked,
    finite float64) as a NormalizedMatrix of one part (:func:`one_part`) where ilargi's compiled
    kernels are the faster: a dense table of at least ``PARALLEL_VALUES`` values at any thread
    count (on one thread too, where every fit measured ran faster than on NumPy and BLAS: see
    the models guide), a sparse one where there are several threads (:func:`ilargi.threads`). Then every product and fused pass of the fit runs
    them, as a factorized fit's do; SciPy's sparse products run on one core. On one thread a
    sparse table runs SciPy's products as it is: on the Hamlet and TPC-DS tables they were the
    faster for most fits (lsqr, GNMF, L-BFGS), k-means' fused pass the slower.
    Anything else (a NormalizedMatrix, CuPy, Dask) as it is."""
    if not (isinstance(X, np.ndarray) or sp.issparse(X)) or X.ndim != 2:
        return X
    sparse = sp.issparse(X)
    values = X.nnz if sparse else X.size
    if (sparse and threads.get_num_threads() == 1) or values < PARALLEL_VALUES:
        return X
    return one_part(X)


def one_part(X, finite=True):
    """A NumPy array or SciPy sparse matrix as a NormalizedMatrix of one part, the table itself:
    a sparse table as canonical CSR, a dense one C-ordered (the kernels read rows), each copied
    only where it is not. ``finite``: whether X is known to hold no NaN (a tree learner's
    table may, and says so)."""
    kernels = backend_of(X)
    if kernels.is_sparse(X):
        table = kernels.as_csr(X, dtype=np.float64)
        if not table.has_canonical_format:
            table = table.copy()  # the CSR view may share its arrays with the caller's matrix
            table.sum_duplicates()
    else:
        table = np.ascontiguousarray(X, dtype=np.float64)
    n, d = table.shape
    part = Part("table", table, Indicator(None, n), np.arange(d), finite)
    return NormalizedMatrix.from_trusted_parts([part], (n, d))


def table(X):
    """The host table behind a NormalizedMatrix of one finite part that is the whole table (as
    :func:`one_part` makes), else X: row selections and column moments read it directly
    (selecting rows of a NormalizedMatrix and materializing them costs a pass over its source)."""
    if (
        not is_normalized(X)
        or is_distributed(X)
        or len(X.parts) != 1
        or X.transposed
        or any(v is not None for v in X.affine)
    ):
        return X
    part = X.parts[0]
    on_host = isinstance(part.source, np.ndarray) or sp.issparse(part.source)
    if not (on_host and part.indicator.is_identity and part.finite) or not np.array_equal(
        part.cols, np.arange(X.shape[1])
    ):
        return X
    return part.source


def kernels(X):
    """The backend of X's data (the compiled CPU kernels, NumPy's, or the GPU's; for a Dask-backed
    matrix NumPy with links that keep their labels on the workers)."""
    if is_distributed(X):
        return X.backend
    return backend_of(X.parts[0].source if is_normalized(X) else X)


def namespace(X):
    """The array module of X's data: NumPy, or CuPy when X lives on a GPU."""
    return kernels(X).xp


def to_host(a):
    """A NumPy copy of a NumPy or CuPy array (SciPy's solvers and fitted attributes live on the host)."""
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def to_output(a):
    """A result per row for the caller: a Dask array stays one (lazy, on the workers), anything
    else comes to the host."""
    return a if is_lazy(a) else to_host(a)


def persist(a):
    """A Dask array computed once and kept on the workers (it is reused several times); other
    arrays as they are."""
    return a.persist() if is_lazy(a) else a


def on_rows(X, a, dtype=None):
    """``a`` (one value per row of X) where X's rows are: on X's device, or a Dask array chunked
    like the rows of a Dask-backed matrix."""
    if is_distributed(X):
        a = X.align(a)
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    return namespace(X).asarray(a, dtype=dtype)


def _dense(a):
    return a.toarray() if is_sparse(a) else a


def _row_scaled(X, w):
    """diag(w) X, keeping a sparse X sparse."""
    return X.multiply(w[:, None]).tocsr() if is_sparse(X) else X * w[:, None]


def _ravel(a):
    # Sparse reductions return np.matrix; bring them back to 1-D arrays.
    return namespace(a).asarray(a).ravel()


def normal_equations(X, Y, sw, fit_intercept, gram, rhs=True):
    """The statistics of a weighted least-squares fit: sum(s), the weighted column means and
    target means (None without an intercept), XᵀSX (when ``gram``) and XᵀSY (when ``rhs``), in
    one distributed pass for a Dask-backed matrix.

    Returns
    -------
    dict
        ``sw_sum``, ``x_mean``, ``y_mean``, ``gram`` and ``rhs`` (None where not asked).
    """
    n = X.shape[0]
    if is_distributed(X):
        G, rhs, x_sum, sw_sum, y_sum = X.normal_equations(Y, sw, gram)
        x_mean = x_sum / sw_sum if fit_intercept else None
        y_mean = y_sum / sw_sum if fit_intercept else None
        return dict(sw_sum=sw_sum, x_mean=x_mean, y_mean=y_mean, gram=G, rhs=rhs)
    sw_sum = float(n) if sw is None else float(sw.sum())
    x_mean = y_mean = None
    if fit_intercept:
        x_mean = column_mean(X) if sw is None else (X.T @ sw) / sw_sum
        y_mean = (Y.sum(axis=0) if sw is None else sw @ Y) / sw_sum
    return dict(
        sw_sum=sw_sum,
        x_mean=x_mean,
        y_mean=y_mean,
        gram=crossprod(X, sw) if gram else None,
        rhs=(X.T @ (Y if sw is None else sw[:, None] * Y)) if rhs else None,
    )


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
    compiled backend (:func:`ilargi.rewriter.training.loss_gradient`), one per partition for a
    Dask matrix (its ``loss_gradient``), the product, the link and the transposed product in turn
    otherwise."""
    if is_distributed(X):
        return X.loss_gradient(coef, intercept, link)
    if is_normalized(X):
        return training.loss_gradient(X, coef, intercept, link)
    z = dot_into(X, coef, link.scores(coef.shape[1:]))
    z += intercept
    loss, r = link(z)
    return float(loss), X.T @ r, r.sum(axis=0)


def assign(X, centers, x_sq, rounding):
    """Lloyd's assignment (labels, closest, counts, cluster sums k × d) of the rows of X to their
    nearest centers (:func:`ilargi.rewriter.training.assign` for a NormalizedMatrix, its own
    ``assign`` for a Dask matrix)."""
    if is_distributed(X):
        return X.assign(centers, x_sq, rounding)
    if is_normalized(X):
        return training.assign(X, centers, x_sq, rounding)
    xp = namespace(centers)
    c_sq = (centers * centers).sum(axis=1)
    labels, closest = links.nearest(
        links.distances(X @ centers.T, x_sq, c_sq, rounding), x_sq, c_sq, rounding
    )
    one_hot = (labels[:, None] == xp.arange(centers.shape[0])[None, :]).astype(xp.float64)
    return labels, closest, one_hot.sum(axis=0), _dense(X.T @ one_hot).T


def column_mean(X):
    """Mean of each column."""
    return _ravel(X.mean(axis=0))


def column_var(X):
    """Population variance of each column (ddof=0)."""
    X = table(X)
    if is_normalized(X) or not is_sparse(X):
        return X.var(axis=0)
    # Two passes, as NumPy's var: E[x²] − E[x]² would leave rounding of the size of mean² in a
    # constant column, which the scalers' test for constant columns would take for a spread.
    X = X.tocsr()
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    xp = namespace(X.data)
    n, d = X.shape
    mean = column_mean(X)
    deviations = X.data - mean[X.indices]
    stored = xp.bincount(X.indices, minlength=d)
    squares = xp.bincount(X.indices, weights=deviations * deviations, minlength=d)
    return (squares + (n - stored) * mean * mean) / n


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
    selected = table(X)[idx]
    if is_normalized(selected):
        selected = selected.materialize()
    return _dense(selected)


def draw_rows(weights, draws):
    """The rows that the values ``draws`` (in [0, Σ weights)) fall into along the cumulative sum
    of ``weights``: k-means++'s sampling by D². A Dask array is searched chunk by chunk (its
    chunk totals on the client, each chunk's cumulative sum on its worker)."""
    if is_lazy(weights):
        from ilargi.scaleout.arrays import draw_rows as draw  # lazy: Dask is optional

        return draw(weights, draws)
    cumulative = to_host(namespace(weights).cumsum(weights))
    return np.minimum(np.searchsorted(cumulative, draws), weights.shape[0] - 1)


def largest(values, m):
    """Positions of the m largest values, largest first (host array)."""
    if is_lazy(values):
        from ilargi.scaleout.arrays import largest as top

        return top(values, m)
    return to_host(namespace(values).argsort(-values)[:m])


def take_values(values, codes):
    """``values[codes]`` (class labels of predicted codes), lazily for Dask codes."""
    if is_lazy(codes):
        from ilargi.scaleout.arrays import take_values as take

        return take(values, codes)
    return values[codes]


FEW_CLASSES = 8


def class_codes(y):
    """(sorted classes, code of each label) of a classification target, checked as
    scikit-learn checks one; a Dask target's codes stay a Dask array."""
    from sklearn.utils.multiclass import check_classification_targets

    if is_lazy(y):
        from ilargi.scaleout.arrays import class_codes as codes

        return codes(y, check_classification_targets)
    check_classification_targets(y)
    classes = np.unique(y)
    if classes.size > FEW_CLASSES:
        return classes, np.searchsorted(classes, y)
    # a code counts the classes at or below the label: few passes of a comparison beat unique's
    # inverse (an argsort) and a branchy binary search, many times over on binary labels
    codes = np.zeros(np.shape(y), dtype=np.intp)
    for label in classes[1:]:
        codes += y >= label
    return classes, codes
