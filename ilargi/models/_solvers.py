"""L-BFGS and Newton-CG for smooth unconstrained objectives (logistic and softmax losses, ridge).

SciPy's L-BFGS-B carries bound-constraint machinery whose per-iteration cost grows with d whatever the
objective; an unconstrained problem needs only the two-loop recursion, O(memory · d) vector work. Both
solvers take one callable ``fun(x) -> (f, g)``, so the objective computes loss and gradient in one pass
over the data, and the line search reuses that same pass for every trial step. They stop as
scikit-learn's solvers do, so ``tol`` and ``max_iter`` mean the same: when max |g_i| <= tol, and L-BFGS
also when an iteration decreases f by less than ``ftol`` relative (L-BFGS-B's ``factr`` test).
"""

from dataclasses import dataclass

import numpy as np

from ilargi.backend import backend_of, cpu, optional

EPS = np.finfo(np.float64).eps
C1, C2 = 1e-4, 0.9  # sufficient decrease and curvature constants of the strong Wolfe conditions


@dataclass
class Result:
    """x: the last iterate; fun, grad: f and g there; n_iter: iterations taken; converged and why."""

    x: np.ndarray
    fun: float
    grad: np.ndarray
    n_iter: int
    converged: bool
    message: str


def line_search(fun, x, f0, g0, direction, step=1.0, max_evals=50):
    """A step a along ``direction`` that meets the strong Wolfe conditions
    f(x + a·p) <= f0 + C1·a·g0ᵀp and |g(x + a·p)ᵀp| <= C2·|g0ᵀp| (Nocedal & Wright, Alg. 3.5-3.6).

    Returns (a, x + a·p, f, g), or None after ``max_evals`` evaluations of ``fun``.
    """
    slope0 = float(g0 @ direction)
    previous = (0.0, f0, slope0)  # (step, f, slope) of the last trial
    for evals in range(max_evals):
        x_new = x + step * direction
        f, g = fun(x_new)
        slope = float(g @ direction)
        trial = (step, f, slope)
        if f > f0 + C1 * step * slope0 or (evals and f >= previous[1]):
            return _zoom(fun, x, f0, slope0, direction, previous, trial, max_evals - evals - 1)
        if abs(slope) <= -C2 * slope0:
            return step, x_new, f, g
        if slope >= 0:
            return _zoom(fun, x, f0, slope0, direction, trial, previous, max_evals - evals - 1)
        previous, step = trial, 4.0 * step  # still descending steeply: a longer step
    return None


def _zoom(fun, x, f0, slope0, direction, low, high, max_evals):
    """Shrink [low, high] (low meets sufficient decrease, with the lower f) to a strong Wolfe step."""
    for _ in range(max_evals):
        step = _cubic_minimizer(low, high)
        x_new = x + step * direction
        f, g = fun(x_new)
        slope = float(g @ direction)
        trial = (step, f, slope)
        if f > f0 + C1 * step * slope0 or f >= low[1]:
            high = trial
        else:
            if abs(slope) <= -C2 * slope0:
                return step, x_new, f, g
            if slope * (high[0] - low[0]) >= 0:
                high = low
            low = trial
        if abs(high[0] - low[0]) <= EPS * max(abs(low[0]), 1.0):
            break
    return None


def _cubic_minimizer(low, high):
    """The minimizer of the cubic through both ends' values and slopes, kept inside the middle 80 %
    of the interval (bisection where the cubic has no minimizer there)."""
    (a, fa, da), (b, fb, db) = low, high
    d1 = da + db - 3 * (fa - fb) / (a - b)
    radicand = d1 * d1 - da * db
    lo, hi = min(a, b), max(a, b)
    margin = 0.1 * (hi - lo)
    if radicand >= 0:
        d2 = np.copysign(np.sqrt(radicand), b - a)
        denominator = db - da + 2 * d2
        if denominator != 0:
            step = b - (b - a) * (db + d2 - d1) / denominator
            if lo + margin <= step <= hi - margin:
                return step
    return 0.5 * (a + b)


def lbfgs(fun, x0, *, tol, max_iter, ftol=64 * EPS, memory=10, max_evals=50, callback=None):
    """Minimize f with limited-memory BFGS; ``fun(x) -> (f, g)`` returns fresh arrays.

    Stops when max |g_i| <= tol (converged), when an iteration decreases f by at most
    ftol · max(|f|, |f_new|, 1) (converged), after ``max_iter`` iterations, or when the line search
    fails even from steepest descent. ``callback(x, f)`` runs after each iteration.
    """
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    history = _History(memory, x.size)
    for n_iter in range(max_iter + 1):
        if float(np.abs(g).max(initial=0.0)) <= tol:
            return Result(x, f, g, n_iter, True, "max |gradient| <= tol")
        if n_iter == max_iter:
            return Result(x, f, g, n_iter, False, f"reached max_iter={max_iter}")
        found = None
        while found is None:
            direction = history.direction(g)
            if not float(g @ direction) < 0:  # not a descent direction: forget the curvature pairs
                history.clear()
                direction = -g
            # Without curvature pairs the scale of the step is unknown: a unit-length first trial.
            step = 1.0 if history.size else min(1.0, 1.0 / float(np.linalg.norm(g)))
            found = line_search(fun, x, f, g, direction, step, max_evals)
            if found is None:
                if not history.size:
                    return Result(x, f, g, n_iter, False, "the line search found no step")
                history.clear()
        _, x_new, f_new, g_new = found
        history.push(x_new - x, g_new - g)
        decrease = f - f_new
        x, f, g = x_new, f_new, g_new
        if callback is not None:
            callback(x, f)
        if decrease <= ftol * max(abs(f), abs(f + decrease), 1.0):
            return Result(x, f, g, n_iter + 1, True, "relative decrease of f <= ftol")
    raise AssertionError("unreachable")


class _History:
    """The last ``memory`` curvature pairs (s, y) in circular buffers, and the two-loop recursion."""

    def __init__(self, memory, d):
        self.s, self.y = np.empty((memory, d)), np.empty((memory, d))
        self.rho = np.empty(memory)
        self.memory, self.size, self.newest = memory, 0, -1

    def clear(self):
        self.size, self.newest = 0, -1

    def push(self, s, y):
        sy = float(s @ y)
        if not sy > EPS * float(y @ y):  # no positive curvature along s: the pair would spoil H
            return
        self.newest = (self.newest + 1) % self.memory
        self.s[self.newest], self.y[self.newest] = s, y
        self.rho[self.newest] = 1.0 / sy
        self.size = min(self.size + 1, self.memory)

    def direction(self, g):
        """-H·g, with H the L-BFGS inverse-Hessian approximation (the identity when empty): the
        backend's recursion where it has one for this g (the compiled kernels' fused passes, the
        NumPy kernels' BLAS at every thread), else the two-loop recursion as it is."""
        order = [(self.newest - k) % self.memory for k in range(self.size)]  # newest first
        kernels = optional(backend_of(g), "lbfgs_direction")
        q = None if kernels is None else kernels(self.s, self.y, self.rho, order, g)
        return cpu.two_loop(self.s, self.y, self.rho, order, g) if q is None else q


def newton_cg(fun, hessp, x0, *, tol, max_iter, max_inner=200, max_evals=50, callback=None):
    """Minimize a convex f with Newton steps solved by conjugate gradients (scikit-learn's scheme).

    ``fun(x) -> (f, g)``; ``hessp(x) -> (v -> H(x)·v)``, called at the point ``fun`` evaluated last,
    so an objective may reuse what that evaluation computed. Each Newton system H·p = -g is solved
    to sum |residual| <= min(0.5, sqrt(sum |g|)) · sum |g|; a strong Wolfe line search takes the step.
    """
    x = np.array(x0, dtype=np.float64)
    f, g = fun(x)
    for n_iter in range(max_iter + 1):
        if float(np.abs(g).max(initial=0.0)) <= tol:
            return Result(x, f, g, n_iter, True, "max |gradient| <= tol")
        if n_iter == max_iter:
            return Result(x, f, g, n_iter, False, f"reached max_iter={max_iter}")
        total = float(np.abs(g).sum())
        direction = _truncated_cg(hessp(x), g, min(0.5, np.sqrt(total)) * total, max_inner)
        found = line_search(fun, x, f, g, direction, 1.0, max_evals)
        if found is None:
            return Result(x, f, g, n_iter, False, "the line search found no step")
        _, x, f, g = found
        if callback is not None:
            callback(x, f)
    raise AssertionError("unreachable")


def _truncated_cg(apply, g, tol, max_iter):
    """p ≈ -H⁻¹g by conjugate gradients from 0, stopped at sum |residual| <= tol, at max_iter, or
    at a direction of (almost) no curvature (capped CG, as scikit-learn's ``_cg``)."""
    p = np.zeros_like(g)
    r = g.copy()  # residual H·p + g
    d = -r
    rr = float(r @ r)
    d_norm2 = rr
    for i in range(max_iter + 1):
        if float(np.abs(r).sum()) <= tol:
            break
        Hd = apply(d)
        curvature = float(d @ Hd)
        if 0 <= curvature <= 16 * EPS * d_norm2:
            break
        if curvature < 0:
            if i == 0:  # not convex here: a steepest-descent step
                p += rr / abs(curvature) * d
            break
        step = rr / curvature
        p += step * d
        r += step * Hd
        rr_new = float(r @ r)
        beta = rr_new / rr
        d = -r + beta * d
        d_norm2 = rr_new + beta * beta * d_norm2
        rr = rr_new
    return p
