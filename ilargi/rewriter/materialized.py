"""The materialized plan of each operator: the operator on the joined table T, through the
backend's kernels on T as on any source.

These are what ``plan="materialized"`` runs, what the chooser's sweep times against the
factorized plan (:func:`ilargi.calibration.runs.operator_calls`) and what
``benchmarks/bench_ops.py`` reports. On the compiled CPU backend the kernels are ilargi's parallel
ones at the thread count of :func:`ilargi.get_num_threads`, so both plans run at the same count
and in one thread pool (:mod:`.pool`): T·X and Tᵀ·Y of a tall dense or CSR T compiled (X, Y of
one column or several), wider dense products as BLAS calls in row blocks on the kernels' threads,
column sums and a dense Gram compiled, a sparse Gram as SciPy's product in blocks of rows on
Python threads. Elsewhere they are NumPy/SciPy's or CuPy's.
"""

from ilargi.backend import backend_of

from .pool import one_pool


def lmm(T, X):
    """T·X for a dense X (d [× m])."""
    kernels = backend_of(T)
    with one_pool(kernels):
        return kernels.product(T, X)


def tmm(T, Y):
    """Tᵀ·Y for a dense Y (n [× m])."""
    kernels = backend_of(T)
    with one_pool(kernels):
        return kernels.transposed_product(T, Y)


def rowsums(T):
    """The row sums of T, as T·1."""
    kernels = backend_of(T)
    with one_pool(kernels):
        return kernels.product(T, kernels.xp.ones(T.shape[1], dtype=_float(kernels, T)))


def colsums(T):
    """The column sums of T."""
    kernels = backend_of(T)
    with one_pool(kernels):
        return kernels.column_sums(T)


def crossprod(T, w=None):
    """Tᵀ·diag(w)·T (Tᵀ·T for w=None); sparse where the backend keeps a sparse T's Gram sparse."""
    kernels = backend_of(T)
    with one_pool(kernels):
        return kernels.weighted_gram(T, w)


def gramvec(T, y, v=None):
    """Tᵀ·(v ⊙ (T·y)) (v=None: Tᵀ·T·y) for y of length d (or d × m)."""
    kernels = backend_of(T)
    with one_pool(kernels):
        q = kernels.product(T, y)
        if v is not None:
            q = q * (v if q.ndim == 1 else v[:, None])
        return kernels.transposed_product(T, q)


def _float(kernels, T):
    return T.dtype if T.dtype.kind == "f" else kernels.xp.float64
