"""What the estimators' solvers run outside the fused passes: the links of the materialized plan,
and L-BFGS's two-loop recursion.

:class:`BinaryLink` and :class:`MultinomialLink` are :mod:`ilargi.backend.links`' links as one
parallel pass each (a factorized table fuses them into :mod:`.passes` instead);
:func:`lbfgs_direction` runs L-BFGS's direction on host vectors in 2m + 1 parallel passes.
"""

import numpy as np

from .. import compiled, links
from .kernels import combine_dot_kernel, logistic_link_kernel, softmax_link_kernel
from .launch import EMPTY_V, c_float, thread_count


class BinaryLink(links.BinaryLink):
    """The binary log-loss link of :class:`ilargi.backend.links.BinaryLink` as one parallel pass
    (the materialized plan's scores; a factorized table fuses it into :func:`.passes.logistic_pass`)."""

    def __call__(self, z):
        z = c_float(z)
        nb = min(thread_count(), max(z.shape[0], 1))
        stats = np.empty((nb, 2))
        sw = EMPTY_V if self.sw is None else self.sw
        logistic_link_kernel(z, self.y, sw, self.grad, stats)
        return float(np.add.reduce(stats[:, 0])), self.grad


class MultinomialLink(links.MultinomialLink):
    """The softmax link of :class:`ilargi.backend.links.MultinomialLink` as one parallel pass."""

    def __init__(self, labels, n_classes, sw=None):
        super().__init__(labels, n_classes, sw)
        self.codes = np.ascontiguousarray(labels, dtype=np.intp)

    def __call__(self, Z):
        Z = c_float(Z)
        nb = min(thread_count(), max(Z.shape[0], 1))
        stats = np.empty((nb, 1 + Z.shape[1]))
        sw = EMPTY_V if self.sw is None else self.sw
        softmax_link_kernel(Z, self.codes, sw, self.grad, stats)
        return float(np.add.reduce(stats[:, 0])), self.grad


def lbfgs_direction(s, y, rho, order, g):
    """-H·g by L-BFGS's two-loop recursion over the curvature pairs (s[i], y[i]), i in ``order``
    (newest first; ρ_i = 1 / s_iᵀy_i), the scale γ = s_newᵀy_new / y_newᵀy_new, as
    :func:`ilargi.backend.cpu.two_loop`; None for a short g (the caller's NumPy).

    Each step's axpy and the next step's dot are one parallel pass (the dot in row blocks, summed
    in block order), 2m + 1 passes over q where BLAS, single-threaded inside a fit, makes 4m."""
    if g.shape[0] < compiled.SMALL_DIRECTION or not order:
        return None
    parts = np.empty(min(thread_count(), g.shape[0]))

    def step(c, a, v, w):  # q = c·q + a·v; returns w·q
        combine_dot_kernel(q, c, a, v, w, parts)
        return float(np.add.reduce(parts))

    q = np.negative(g, dtype=np.float64)
    alpha = {}
    dot = step(1.0, 0.0, s[order[0]], s[order[0]])  # s_newest·q
    for t, i in enumerate(order):  # newest to oldest: α_i = ρ_i s_iᵀq, q -= α_i y_i
        alpha[i] = rho[i] * dot
        dot = step(1.0, -alpha[i], y[i], s[order[t + 1]] if t + 1 < len(order) else y[order[-1]])
    newest = order[0]
    gamma = 1.0 / (rho[newest] * float(y[newest] @ y[newest]))
    scale, dot = gamma, gamma * dot  # q ← γq folds into the next step; y_oldest·(γq)
    for t, i in enumerate(reversed(order)):  # oldest to newest: q += (α_i - ρ_i y_iᵀq) s_i
        beta = rho[i] * dot
        dot = step(scale, alpha[i] - beta, s[i], y[order[-t - 2]] if t + 1 < len(order) else s[i])
        scale = 1.0
    return q
