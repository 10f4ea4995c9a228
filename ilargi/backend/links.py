"""Links of the training losses on scores, in array code that runs on NumPy and CuPy alike.

A link turns the scores z of every row (z_i = x_i·w + b) into the loss summed over the rows and
its derivative r_i with respect to z_i, the residual that one transposed product turns into the
gradient. The compiled backend (:mod:`.compiled`) gives the same links as parallel kernels, and
also fuses them into one pass with the gathers and segment-sums of a factorized table.
"""

import numpy as np


def _weighted_sum(values, sw):
    return float(values.sum() if sw is None else sw @ values)


def _sum_of_logs(x, xp, block=512):
    """Σ log(x_i) for x_i in [1, 2], as logs of products of ``block`` values (≤ 2^512, so no
    overflow; each product rounds like a sum of ``block`` logs would): multiplying is much cheaper
    than taking a log per value."""
    whole = x.size - x.size % block
    products = xp.prod(x[:whole].reshape(block, -1), axis=0)
    return float(xp.log(products).sum()) + float(xp.log(x[whole:]).sum())


class BinaryLink:
    """Σ_i s_i (log(1 + e^z_i) - y_i z_i), the weighted log-loss of the sigmoid, and its derivative
    r = s ⊙ (σ(z) - y), in a few passes over buffers allocated once.

    Parameters
    ----------
    y : array of shape (n,)
        Labels in {0, 1} (float).
    sw : array of shape (n,) or None
        Sample weights s (None: all 1).

    Notes
    -----
    Fresh n-vectors would be page-faulted in on every call, which costs more than the arithmetic.
    log(1 + e^z) = max(z, 0) + log(1 + e^-|z|): exp(-|z|) is formed once and serves both the loss
    and the sigmoid, stably on both sides of 0; Σ max(z, 0) is (Σz + Σ|z|) / 2 and the logs are
    summed as logs of products, so the loss adds reductions, not passes that write.
    """

    kind = "logistic"

    def __init__(self, y, sw=None):
        xp = np if type(y).__module__ == "numpy" else _array_module(y)
        self.y, self.sw, self.xp = y, sw, xp
        self._buffers = None
        self._scores = None

    def _allocated(self):
        """The n-long buffers, allocated on first use (a link that only describes its labels,
        as the fused passes read them, never allocates)."""
        if self._buffers is None:
            xp, n, y, sw = self.xp, self.y.shape[0], self.y, self.sw
            self._buffers = (
                xp.empty(n),
                xp.empty(n),
                xp.empty(n),
                xp.empty(n, dtype=bool),
                y if sw is None else sw * y,
            )
        return self._buffers

    e = property(lambda self: self._allocated()[0])
    one_e = property(lambda self: self._allocated()[1])
    grad = property(lambda self: self._allocated()[2])
    positive = property(lambda self: self._allocated()[3])
    sw_y = property(lambda self: self._allocated()[4], doc="s ⊙ y (y without weights)")

    def scores(self, width=()):
        """A buffer for the scores (n [× width]), the same one every call: a fresh n-vector per
        iteration would be page-faulted in each time."""
        return _buffer(self, (self.y.shape[0],) + tuple(width))

    def __call__(self, z):
        """(loss, r) for the scores z (n,); r is a buffer the next call overwrites."""
        xp, e, one_e, grad, sw = self.xp, self.e, self.one_e, self.grad, self.sw
        xp.abs(z, out=e)
        loss = 0.5 * (_weighted_sum(e, sw) + _weighted_sum(z, sw)) - float(self.sw_y @ z)
        xp.negative(e, out=e)
        xp.exp(e, out=e)  # exp(-|z|), in (0, 1]
        xp.add(e, 1.0, out=one_e)
        loss += _sum_of_logs(one_e, xp) if sw is None else float(sw @ xp.log(one_e, out=grad))
        xp.greater_equal(z, 0.0, out=self.positive)
        xp.maximum(e, self.positive, out=e)  # e^min(z, 0): 1 where z >= 0 (e <= 1), e^z elsewhere
        xp.divide(e, one_e, out=grad)  # sigmoid(z)
        grad -= self.y
        if sw is not None:
            grad *= sw
        return loss, grad

    def curvature(self, z):
        """s ⊙ σ(z)(1 - σ(z)): the second derivative of the loss of each row (the Hessian's D)."""
        xp = self.xp
        p = 1.0 / (1.0 + xp.exp(-xp.abs(z)))  # σ(|z|); σ(z)(1 - σ(z)) is even in z
        d = p * (1.0 - p)
        return d if self.sw is None else d * self.sw


class MultinomialLink:
    """Σ_i s_i (logsumexp(Z_i) - Z_i,y_i), the weighted log-loss of the softmax over k classes,
    and its derivative R = s ⊙ (softmax(Z) - onehot(y)).

    Parameters
    ----------
    labels : int array of shape (n,)
        Class codes in [0, k).
    n_classes : int
        k.
    sw : array of shape (n,) or None
        Sample weights s (None: all 1).
    """

    kind = "softmax"

    def __init__(self, labels, n_classes, sw=None):
        xp = _array_module(labels)
        self.labels, self.n_classes, self.sw, self.xp = labels, n_classes, sw, xp
        self._buffers = None
        self._scores = None

    def _allocated(self):
        """The one-hot labels (weighted, for the loss's picked scores), the residual buffer
        (n × k) and two n-vectors, built on first use."""
        if self._buffers is None:
            xp, labels, sw, n = self.xp, self.labels, self.sw, self.labels.shape[0]
            onehot = (labels[:, None] == xp.arange(self.n_classes)[None, :]).astype(xp.float64)
            picks = onehot if sw is None else onehot * sw[:, None]
            self._buffers = (
                onehot,
                xp.empty(onehot.shape),
                picks,
                xp.empty(n),
                xp.empty(n),
                xp.ones(self.n_classes),
            )
        return self._buffers

    onehot = property(lambda self: self._allocated()[0])
    grad = property(lambda self: self._allocated()[1])

    def scores(self, width=()):
        """A buffer for the scores (n × k), the same one every call."""
        return _buffer(self, (self.labels.shape[0],) + tuple(width))

    def __call__(self, Z):
        """(loss, R) for the scores Z (n, k), which it shifts in place; R is a buffer the next
        call overwrites.

        Row by row, the short rows of Z would cost more than their arithmetic (NumPy's max over
        the 5 values of a row takes several times as long as 4 elementwise maxima of 5 columns): the row
        maxima come column by column, the row sums as a product with a vector of ones, and the
        picked scores Σ_i s_i Z[i, y_i] as one dot with the (weighted) one-hot labels.
        """
        xp = self.xp
        onehot, grad, picks, shift, total, ones = self._allocated()
        _row_max(Z, shift, xp)
        Z -= shift[:, None]
        xp.exp(Z, out=grad)
        xp.matmul(grad, ones, out=total)
        grad /= total[:, None]
        xp.log(total, out=total)
        loss = _weighted_sum(total, self.sw) - float(xp.vdot(Z, picks))
        grad -= onehot
        if self.sw is not None:
            grad *= self.sw[:, None]
        return loss, grad

    def probabilities(self, Z):
        """softmax(Z) row by row (Z is not modified)."""
        xp = self.xp
        P = xp.exp(Z - Z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        return P


# Up to this many columns, row maxima are taken column by column (elementwise, long loops); wider
# rows are reduced along the row, as NumPy does well once the row is long.
FEW_COLUMNS = 16


def _row_max(Z, out, xp):
    """The maximum of each row of Z (n × k) into out (n,)."""
    k = Z.shape[1]
    if k == 1 or k > FEW_COLUMNS:
        return xp.max(Z, axis=1, out=out)
    xp.maximum(Z[:, 0], Z[:, 1], out=out)
    for j in range(2, k):
        xp.maximum(out, Z[:, j], out=out)
    return out


def _buffer(link, shape):
    if link._scores is None or link._scores.shape != shape:
        link._scores = link.xp.empty(shape)
    return link._scores


def _array_module(a):
    if type(a).__module__.startswith("cupy"):
        import cupy  # lazy: only a CuPy array gets here

        return cupy
    return np


def rounding(centers):
    """Relative rounding error of ‖x‖² - 2 x·c + ‖c‖² for these centers: about (d + 2)·eps times
    ‖x‖² + ‖c‖². Distances below it are 0 (a point and its duplicate center are at distance 0
    whatever the summation order, factorized or not), and centers within it of the nearest tie."""
    return (centers.shape[1] + 2) * float(np.finfo(np.float64).eps)


def distances(Z, x_sq, c_sq, rounding):
    """Squared distances ‖x_i‖² - 2 Z_ik + ‖c_k‖² (n × k) from the scores Z_ik = x_i·c_k, 0 below
    their rounding error."""
    xp = _array_module(Z)
    scale = x_sq[:, None] + c_sq[None, :]
    D = scale - 2.0 * Z
    return xp.where(D <= rounding * scale, 0.0, D)


def nearest(D, x_sq, c_sq, rounding):
    """(labels, closest) from squared distances D: the first center within rounding of the nearest
    (a point equidistant from two centers joins the same one in both plans), and its distance."""
    slack = rounding * (x_sq + float(c_sq.max()))
    labels = (D <= (D.min(axis=1) + slack)[:, None]).argmax(axis=1)
    if hasattr(D, "map_blocks"):  # a row-chunked Dask array (ilargi.scaleout): block by block
        return labels, D.map_blocks(_picked, labels[:, None], drop_axis=1, dtype=D.dtype)
    return labels, _picked(D, labels[:, None])


def _picked(D, labels):
    """D[i, labels[i, 0]] for every row i."""
    return _array_module(D).take_along_axis(D, labels, axis=1)[:, 0]
