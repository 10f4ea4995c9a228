"""The backend a Dask-backed matrix presents to the estimators: NumPy for small results, and links
that only hold their row-chunked labels and weights.

The estimators build their loss's link from the matrix's backend (``kernels(X).BinaryLink(y,
sw)``). For a Dask matrix that link is a description: its labels and sample weights stay Dask
arrays on the workers; each task of :meth:`~.matrix.DaskNormalizedMatrix.loss_gradient` builds the
CPU backend's link from its partition's rows and runs the fused pass there. Nothing n-long is
allocated on the client.
"""

import dask.array as da
import numpy as np

name = "dask"
xp = np


class BinaryLink:
    """The weighted log-loss of the sigmoid over row-chunked labels y and weights sw."""

    kind = "logistic"

    def __init__(self, y, sw=None):
        self.y, self.sw = y, sw

    def curvature(self, z):
        """s ⊙ σ(z)(1 - σ(z)) as a lazy Dask array (the Hessian's D)."""
        p = 1.0 / (1.0 + da.exp(-abs(z)))
        d = p * (1.0 - p)
        return d if self.sw is None else d * self.sw


class MultinomialLink:
    """The weighted log-loss of the softmax over k classes, labels as codes in [0, k)."""

    kind = "softmax"

    def __init__(self, labels, n_classes, sw=None):
        self.labels, self.n_classes, self.sw = labels, int(n_classes), sw

    @property
    def y(self):
        return self.labels

    def probabilities(self, Z):
        """softmax(Z) row by row, lazily."""
        P = da.exp(Z - Z.max(axis=1, keepdims=True))
        return P / P.sum(axis=1, keepdims=True)
