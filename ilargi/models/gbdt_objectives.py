"""The objectives of :mod:`ilargi.models.gbdt`: LightGBM's gradients, hessians and initial
scores, in single precision (``score_t``), its metrics and its objective lines of the model
text: squared error (``regression``), log-loss (``binary``) and the softmax (``multiclass``)."""

from __future__ import annotations

import numpy as np

from ilargi.backend import backend_of

from .gbdt_gains import K_EPSILON


def _where(a):
    """An array's memory and layout: equal for views of the same values."""
    return a.__array_interface__["data"][0], a.shape, a.strides


class Objective:
    """An objective's link, gradients, initial score and default metric."""

    name = ""
    metric = ""
    n_trees = 1  # trees per round
    # Σg over every row of each tree's gradients last returned (sum_float64's bits), where the
    # objective made them in a pass that summed them too; else None
    gradient_sums: list | None = None

    def __init__(self, y, sw):
        self.y = np.asarray(y)
        self.sw = None if sw is None else np.asarray(sw, dtype=np.float32).astype(np.float64)

    def _weighted_mean(self, values):
        if self.sw is None:
            return float(np.sum(values, dtype=np.float64)) / values.shape[0]
        return float(np.sum(values * self.sw)) / float(np.sum(self.sw))

    def string(self):
        """The objective line of LightGBM's model text."""
        return self.name

    def add_by_label(self, score, values, labels):
        """score[i] += values[labels[i]] for every row, with the next round's gradients made in
        the same pass where the objective can (``gradients`` of this score then returns them
        without a pass of its own): True; False where nothing was done."""
        return False


class L2(Objective):
    """Squared error (LightGBM's ``regression``)."""

    name, metric = "regression", "l2"

    def __init__(self, y, sw):
        # single precision, as LightGBM holds labels; subtracted from double scores, each label is
        # widened exactly, so the residuals are those of the labels in double
        super().__init__(np.asarray(y, dtype=np.float32), sw)
        self._ones = None
        self._residuals = None
        self._ahead = None  # the score whose residuals add_by_label left in _residuals
        self._ahead_sum = 0.0  # their sum

    def init_scores(self):
        # summed from a double copy: a float32 array summed with dtype float64 is added in other
        # blocks, which may change the last bits of the initial score
        return [self._weighted_mean(self.y.astype(np.float64))]

    def gradients(self, score):
        # the residuals rounded to single precision as they are computed, without a double copy,
        # into one array from round to round (a round's gradients are let go before the next
        # round's are made; a new array's pages would be faulted in again each round)
        g = self._buffer(score.size)
        self.gradient_sums = None
        if self._ahead is None or self._ahead != _where(score):
            backend_of(g).residuals(score, self.y, g[0])
        else:
            self.gradient_sums = [self._ahead_sum]
        self._ahead = None
        if self.sw is None:
            # unit hessians: one value repeated, not stored (read-only; the kernels read the one
            # value for every row instead of gathering a leaf's), the same array every round
            if self._ones is None or self._ones.shape[1] != score.size:
                self._ones = np.broadcast_to(np.float32(1.0), (1, score.size))
            return g, self._ones
        w = self.sw.astype(np.float32)  # a single-precision product, as LightGBM's
        g *= w
        return g, w[None]

    def _buffer(self, n):
        if self._residuals is None or self._residuals.shape[1] != n:
            self._residuals = np.empty((1, n), np.float32)
        return self._residuals

    def add_by_label(self, score, values, labels):
        # a round's leaf values and the next round's residuals in one pass over the scores (the
        # same sums and differences as the two passes); with weights, the gradients are scaled
        # after, left to gradients
        if self.sw is not None:
            return False
        g = self._buffer(score.size)
        self._ahead_sum = backend_of(g).add_by_label_residuals(score, values, labels, self.y, g[0])
        self._ahead = _where(score)
        return True

    def loss(self, score, y, sw):
        err = (score - np.asarray(y, dtype=np.float32)) ** 2
        return float(np.average(err, weights=sw))

    @staticmethod
    def transform(raw):
        return raw


class Binary(Objective):
    """Log-loss of the sigmoid (LightGBM's ``binary``, sigmoid 1); y in {0, 1}."""

    name, metric = "binary", "binary_logloss"

    def init_scores(self):
        p = self._weighted_mean(self.y.astype(np.float64))
        p = min(max(p, K_EPSILON), 1.0 - K_EPSILON)
        return [float(np.log(p / (1.0 - p)))]

    def gradients(self, score):
        label = np.where(self.y > 0, 1.0, -1.0)
        response = -label / (1.0 + np.exp(label * score))
        absr = np.abs(response)
        w = 1.0 if self.sw is None else self.sw
        g = (response * w).astype(np.float32)
        h = (absr * (1.0 - absr) * w).astype(np.float32)
        return g[None], h[None]

    def string(self):
        return "binary sigmoid:1"

    @staticmethod
    def transform(raw):
        return 1.0 / (1.0 + np.exp(-raw))

    def loss(self, score, y, sw):
        p = np.clip(self.transform(score), K_EPSILON, 1.0 - K_EPSILON)
        y = np.asarray(y)
        return float(np.average(-np.where(y > 0, np.log(p), np.log(1.0 - p)), weights=sw))


class Softmax(Objective):
    """Log-loss of the softmax (LightGBM's ``multiclass``); y the class codes 0..K-1."""

    name, metric = "multiclass", "multi_logloss"

    def __init__(self, y, sw, n_classes):
        super().__init__(y, sw)
        self.n_trees = self.k = int(n_classes)
        self.factor = self.k / (self.k - 1.0)

    def init_scores(self):
        w = np.ones(self.y.size) if self.sw is None else self.sw
        totals = np.bincount(self.y, weights=w, minlength=self.k)
        probs = totals / float(np.sum(w))
        return [float(np.log(max(K_EPSILON, q))) for q in probs]

    @staticmethod
    def transform(raw):
        z = np.exp(raw - raw.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    def gradients(self, score):
        p = self.transform(score)  # (n, K)
        onehot = np.zeros_like(p)
        onehot[np.arange(p.shape[0]), self.y] = 1.0
        w = 1.0 if self.sw is None else self.sw[:, None]
        g = ((p - onehot) * w).astype(np.float32).T
        h = (self.factor * p * (1.0 - p) * w).astype(np.float32).T
        return np.ascontiguousarray(g), np.ascontiguousarray(h)

    def string(self):
        return f"multiclass num_class:{self.k}"

    def loss(self, score, y, sw):
        p = np.clip(self.transform(score), K_EPSILON, 1.0 - K_EPSILON)
        return float(np.average(-np.log(p[np.arange(p.shape[0]), y]), weights=sw))
