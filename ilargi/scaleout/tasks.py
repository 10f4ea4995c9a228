"""What each task of a Dask-backed matrix runs on its partition, and how partials combine.

Every function takes the partition's in-memory :class:`~ilargi.rewriter.NormalizedMatrix` (and the
chunks of row-aligned operands) and runs the matrix's own operator, so the per-partition work is the
CPU backend's kernels with the kernel threads of one task (:func:`~.graph.kernel_threads`).
Partials are d-sized (or k × d, d × d): :func:`add` and :func:`add_scaled` merge them in the tree
reductions of :mod:`.matrix`.
"""

from functools import reduce

import numpy as np
import scipy.sparse as sp

from ilargi.backend import backend_of
from ilargi.rewriter import reductions, training

from . import sizes  # noqa: F401  (dask.sizeof of partitions, in every worker)
from .graph import kernel_threads
from .pieces import build


def _writable(a):
    """A row block the compiled kernels accept: Dask may hand out read-only blocks (pandas'
    copy-on-write arrays, deserialized buffers), which the kernels' signatures refuse."""
    if a is None or not isinstance(a, np.ndarray) or a.flags.writeable:
        return a
    return a.copy()


def build_partition(piece, dims, layout, ops):
    with kernel_threads():
        return build(piece, dims, layout, ops)


def on_piece(func, piece, dims, layout, ops, *args):
    """``func(matrix, *args)`` on the matrix of a piece, built for this task alone (a partition
    not persisted): one task per partition and pass instead of two, and the matrix forgets its
    cached structures afterwards. Caches form reference cycles (a plan keeps its parts), which
    would keep each pass's partition arrays alive until Python's full collection: a worker's
    memory would then grow by partitions, not stay at one."""
    nm = build_partition(piece, dims, layout, ops)
    try:
        return func(nm, *args)
    finally:
        for part in nm.parts:
            part.forget()


def apply_ops(nm, ops):
    for op in ops:
        nm = op(nm)
    return nm


def select_rows(nm, idx):
    return nm[np.asarray(idx, dtype=np.intp)]


def lmm(nm, X):
    with kernel_threads():
        return nm @ X


def tmm(nm, Y):
    with kernel_threads():
        return nm.T @ _writable(Y)


def reduce_axis(nm, name, axis, ddof=0):
    """nm.sum/mean/min/max/sum_of_squares along ``axis`` (a dense array or a float)."""
    with kernel_threads():
        method = getattr(nm, name)
        if name == "var":
            return method(axis=axis, ddof=ddof)
        return method(axis=axis)


def exact_colsums(nm):
    """The partition's column sums as (mantissa, exponent): partials that combine by
    :func:`add_scaled` without overflow."""
    with kernel_threads():
        return nm._exact_colsums()


def add_scaled(*items):
    return reductions.add_scaled(*items)


def centred_squares(nm, centre):
    """Σ (T_ij − centre_j)² per column of the partition: the second pass of a variance."""
    with kernel_threads():
        return np.asarray(nm._centred_squares(centre), dtype=np.float64)


def column(nm, j):
    return nm[:, j]


def minimum(*items):
    return reduce(np.minimum, items)


def maximum(*items):
    return reduce(np.maximum, items)


def any_of(*items):
    return tuple(bool(any(values)) for values in zip(*items))


def add(*items):
    """The sum of partials: numbers, arrays, sparse matrices, or tuples of them (None stays)."""
    first = items[0]
    if isinstance(first, tuple):
        return tuple(add(*column) for column in zip(*items))
    if first is None:
        return None
    return reduce(lambda a, b: a + b, items)


def nonfinite(nm):
    return nm.nonfinite()


def crossprod(nm, w):
    with kernel_threads():
        return nm.crossprod(_writable(w))


def gramvec(nm, y, alpha, v):
    with kernel_threads():
        return nm.gramvec(y, _writable(v), alpha)


def loss_gradient(nm, coef, intercept, kind, n_classes, y, sw):
    """(Σ loss, Tᵀr, Σ r) of the partition, its link built from its rows of the labels and
    weights (the CPU backend's link)."""
    kernels = backend_of(np.empty(0))
    y, sw = _writable(y), _writable(sw)
    if kind == "logistic":
        link = kernels.BinaryLink(np.asarray(y, dtype=np.float64), sw)
    else:
        link = kernels.MultinomialLink(np.asarray(y), n_classes, sw)
    if nm.shape[0] == 0:
        width = coef.shape[1:]
        return 0.0, np.zeros(coef.shape), (0.0 if not width else np.zeros(width))
    with kernel_threads():
        return training.loss_gradient(nm, coef, intercept, link)


def assign(nm, centers, rounding, x_sq):
    """Lloyd's assignment of the partition: (labels, closest, inertia, counts, sums)."""
    k, d = centers.shape
    if nm.shape[0] == 0:
        return (np.zeros(0, dtype=np.intp), np.zeros(0), 0.0, np.zeros(k), np.zeros((k, d)))
    with kernel_threads():
        labels, closest, counts, sums = training.assign(nm, centers, _writable(x_sq), rounding)
    return labels, closest, float(closest.sum()), counts, sums


def identity(value):
    return value


def item(result, position):
    return result[position]


def assign_totals(result):
    """The small part of an assignment: (inertia, counts, sums)."""
    return result[2], result[3], result[4]


def normal_equations(nm, gram, Y, sw):
    """One pass of the least-squares statistics: (XᵀSX or None, XᵀSY, XᵀS1, Σs, Σ sY)."""
    Y, sw = _writable(Y), _writable(sw)
    with kernel_threads():
        G = None
        if gram:
            G = nm.crossprod(sw)
            G = G.toarray() if sp.issparse(G) else np.asarray(G)
        if sw is None:
            R = nm.T @ Y
            c = np.asarray(nm.sum(axis=0), dtype=np.float64)
            return G, R, c, float(nm.shape[0]), Y.sum(axis=0)
        R = nm.T @ (sw[:, None] * Y)
        return G, R, nm.T @ sw, float(sw.sum()), sw @ Y


def materialize(nm):
    return nm.materialize()


def toarray(nm):
    return nm.toarray()


def stack(*blocks):
    """The rows of several materialized partitions, one after another."""
    if all(sp.issparse(block) for block in blocks):
        return sp.vstack(blocks, format="csr")
    return np.concatenate([block.toarray() if sp.issparse(block) else block for block in blocks])
