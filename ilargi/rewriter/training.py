"""The training passes: what one iteration of an estimator computes on a NormalizedMatrix, in one
pass over the fact rows where the backend has one (the compiled CPU backend), else by the products
and a link.

They are functions that take the matrix, as scikit-learn's ``LinearModelLoss`` takes X, not methods
of it: a GLM's loss and gradient or a k-means assignment is a model's question, and the matrix
stays an array type (:mod:`ilargi.rewriter.normalized`). :mod:`ilargi.models` calls them through
:mod:`ilargi.models._ops`, which gives dense and sparse arrays the same passes; the Dask matrix
(:mod:`ilargi.scaleout`) runs them on each partition. The one-pass kernels are those of
:mod:`ilargi.rewriter.passes`; the operand and result of a pass (a⊙X and bᵀX in, a⊙(T₀ᵀ·r) + b·Σr
out) are the matrix's, shared with its ``gramvec`` (:mod:`ilargi.rewriter.products`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ilargi.backend import links
from ilargi.backend.contract import Array

from . import passes, pool, rules, softmax

if TYPE_CHECKING:
    from .normalized import NormalizedMatrix


@pool.operator
def loss_gradient(
    T: NormalizedMatrix, coef: Array, intercept: float | Array, link: Any
) -> tuple[float, Array, float | Array]:
    """The summed loss of a link at the scores T·coef + intercept, its gradient and Σ residual.

    With z = T·coef + intercept and (loss, r) = link(z), returns (loss, Tᵀ·r, Σ_i r_i): what
    one evaluation of a GLM objective needs (logistic: r = s ⊙ (σ(z) - y)). The compiled CPU
    backend computes the scores, the link and every table's segment-sum of r in one pass over
    the target rows; the NumPy kernels run a softmax link class by class in blocks of rows
    (:mod:`ilargi.rewriter.softmax`); other links and backends run T·coef, the link and Tᵀ·r in
    turn.

    Parameters
    ----------
    T : NormalizedMatrix
        The matrix trained on (not a transposed view).
    coef : array of shape (d,) or (d, k)
        Coefficients: one column (binary link) or one per class (softmax link).
    intercept : float or array of shape (k,)
    link : ilargi.backend.links.BinaryLink or MultinomialLink
        The link with its labels and sample weights (``kernels.BinaryLink(y, sw)`` of the
        matrix's backend).

    Returns
    -------
    loss : float
        Σ_i s_i loss_i (not divided by Σ s, no penalty).
    grad : array of shape (d,) or (d, k)
        Tᵀ·r.
    total : float or array of shape (k,)
        Σ_i r_i, the intercept's gradient.

    Examples
    --------
    >>> from ilargi.backend.links import BinaryLink
    >>> T = NormalizedMatrix.from_parts(
    ...     [np.array([[1.0], [2.0], [3.0]]), np.array([[1.0, 2.0], [3.0, 4.0]])],
    ...     [None, np.array([0, 1, 0])], [[0], [1, 2]], (3, 3))
    >>> loss, grad, total = loss_gradient(T, np.zeros(3), 0.0,
    ...                                   BinaryLink(np.array([0.0, 1.0, 1.0])))
    >>> round(loss, 6), grad.tolist(), total
    (2.079442, [-2.0, -1.5, -2.0], -0.5)
    """
    if T._transposed:
        raise ValueError("loss_gradient trains on T, not on a transposed view; use T.T")
    coef = T._operand(coef, "coef of loss_gradient")
    n, d = T._shape
    if coef.shape[0] != d:
        raise ValueError(
            f"loss_gradient: coef must have {d} rows (columns of T), got shape {coef.shape}"
        )
    kernels = T._kernels
    X, c = T._pass_operand(coef)
    c = c + intercept
    tabs = T._pass_tables()
    if tabs is not None:
        loss, grad, total = passes.loss(tabs, kernels, X, c, link, d)
    elif softmax.applies(kernels, link, n):  # the NumPy kernels' softmax, class-major in blocks
        loss, grad, total = softmax.loss(T._parts, n, d, X, c, link)
    else:
        z = rules.lmm(T._parts, n, X, out=link.scores(X.shape[1:]))
        z += c
        loss, r = link(z)
        grad = rules.tmm(T._parts, d, r)
        total = r.sum() if r.ndim == 1 else kernels.column_sums(r)  # narrow rows: 1ᵀ·R
    return float(loss), T._pass_result(grad, total), total


@pool.operator
def assign(
    T: NormalizedMatrix, centers: Array, x_sq: Array, rounding: float
) -> tuple[Array, Array, Array, Array]:
    """Lloyd's assignment of every row of T to its nearest center, and the clusters' sums.

    Squared distances are ‖x_i‖² - 2·x_i·c_k + ‖c_k‖² (0 below ``rounding`` of ‖x_i‖² + ‖c_k‖²;
    the first center within rounding of the nearest wins, see :mod:`ilargi.backend.links`).
    One pass over the target rows on the compiled CPU backend.

    Parameters
    ----------
    T : NormalizedMatrix
        The matrix whose rows are clustered (not a transposed view).
    centers : array of shape (k, d)
    x_sq : array of shape (n,)
        ‖x_i‖², e.g. ``T.sum_of_squares(axis=1)`` (computed once per fit).
    rounding : float
        The relative rounding error (:func:`ilargi.backend.links.rounding`).

    Returns
    -------
    labels : int array of shape (n,)
    closest : array of shape (n,)
        The squared distance of each row to its center.
    counts : array of shape (k,)
        Rows per cluster.
    sums : array of shape (k, d)
        The sum of the rows of each cluster.

    Examples
    --------
    >>> from ilargi.backend.links import rounding
    >>> T = NormalizedMatrix.from_parts([np.array([[0.0], [1.0], [10.0]])], [None], [[0]], (3, 1))
    >>> centers = np.array([[0.0], [10.0]])
    >>> labels, closest, counts, sums = assign(T, centers, T.sum_of_squares(axis=1),
    ...                                        rounding(centers))
    >>> labels.tolist(), counts.tolist(), sums.tolist()
    ([0, 0, 1], [2.0, 1.0], [[1.0], [10.0]])
    """
    if T._transposed:
        raise ValueError("assign clusters the rows of T, not of a transposed view; use T.T")
    kernels, xp = T._kernels, T._kernels.xp
    n, d = T._shape
    centers = T._operand(centers, "centers of assign")
    if centers.ndim != 2 or centers.shape[1] != d:
        raise ValueError(f"assign: centers must have shape (k, {d}), got {centers.shape}")
    c_sq = (centers * centers).sum(axis=1)
    X, c = T._pass_operand(xp.ascontiguousarray(centers.T))
    tabs = T._pass_tables()
    if tabs is not None:
        labels, closest, _, counts, sums = passes.assign(
            tabs, kernels, X, c, x_sq, c_sq, rounding, d
        )
    else:
        Z = rules.lmm(T._parts, n, X)
        Z += c
        labels, closest = links.nearest(
            links.distances(Z, x_sq, c_sq, rounding), x_sq, c_sq, rounding
        )
        one_hot = (labels[:, None] == xp.arange(centers.shape[0])[None, :]).astype(xp.float64)
        counts, sums = one_hot.sum(axis=0), rules.tmm(T._parts, d, one_hot)
    return labels, closest, counts, xp.ascontiguousarray(T._pass_result(sums, counts).T)
