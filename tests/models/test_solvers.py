"""The unconstrained solvers against closed forms and SciPy's L-BFGS-B."""

import numpy as np
import pytest
import scipy.optimize
from scipy.special import expit

from ilargi.models._solvers import lbfgs, line_search, newton_cg


def quadratic(A, b):
    return lambda x: (0.5 * x @ A @ x - b @ x, A @ x - b)


def spd(d, seed, condition=1e3):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.geomspace(1.0, condition, d)) @ Q.T, rng.standard_normal(d)


def rosenbrock(x):
    f = float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2))
    return f, scipy.optimize.rosen_der(x)


def logistic(X, y, C):
    def fun(w):
        z = X @ w
        f = np.sum(np.logaddexp(0, z) - y * z) / len(y) + w @ w / (2 * C * len(y))
        return f, X.T @ (expit(z) - y) / len(y) + w / (C * len(y))

    def hessp(w):
        p = expit(X @ w)
        D = p * (1 - p) / len(y)
        return lambda v: X.T @ (D * (X @ v)) + v / (C * len(y))

    return fun, hessp


@pytest.mark.parametrize("seed", range(3))
def test_lbfgs_solves_a_quadratic(seed):
    A, b = spd(30, seed, condition=1e2)  # f resolves |g| = 1e-6 at this condition (not at 1e3)
    result = lbfgs(quadratic(A, b), np.zeros(30), tol=1e-6, max_iter=1000, ftol=0.0)
    assert result.converged and result.message.startswith("max")
    # |x - x*| <= |g| / lambda_min
    np.testing.assert_allclose(result.x, np.linalg.solve(A, b), rtol=0, atol=1e-5)


def test_lbfgs_on_rosenbrock_and_its_iteration_cap():
    result = lbfgs(rosenbrock, np.full(10, -1.2), tol=1e-8, max_iter=1000, ftol=0.0)
    assert result.converged
    np.testing.assert_allclose(result.x, np.ones(10), atol=1e-6)
    capped = lbfgs(rosenbrock, np.full(10, -1.2), tol=1e-8, max_iter=5)
    assert not capped.converged and capped.n_iter == 5


def test_newton_cg_solves_a_quadratic():
    A, b = spd(20, 0, condition=10)
    result = newton_cg(
        quadratic(A, b),
        lambda x: lambda v: A @ v,
        np.zeros(20),
        tol=1e-7,
        max_iter=20,
        max_inner=200,
    )
    assert result.converged and result.n_iter <= 12  # inexact early steps: eta = min(.5, sqrt|g|)
    np.testing.assert_allclose(result.x, np.linalg.solve(A, b), rtol=0, atol=1e-7)


@pytest.mark.parametrize("solver", ["lbfgs", "newton-cg"])
def test_logistic_optimum_matches_scipy(solver):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 12))
    y = (X @ rng.standard_normal(12) + rng.standard_normal(400) > 0).astype(float)
    fun, hessp = logistic(X, y, C=1.0)
    reference = scipy.optimize.minimize(
        fun,
        np.zeros(12),
        jac=True,
        method="L-BFGS-B",
        options={"gtol": 1e-12, "ftol": 0, "maxiter": 10_000},
    )
    if solver == "lbfgs":
        result = lbfgs(fun, np.zeros(12), tol=1e-10, max_iter=1000, ftol=0.0)
    else:
        result = newton_cg(fun, hessp, np.zeros(12), tol=1e-10, max_iter=100)
    assert result.converged
    np.testing.assert_allclose(result.x, reference.x, rtol=1e-6, atol=1e-8)


def test_callback_sees_every_iteration_and_decreasing_values():
    A, b = spd(15, 1)
    seen = []
    result = lbfgs(
        quadratic(A, b), np.zeros(15), tol=1e-9, max_iter=200, callback=lambda x, f: seen.append(f)
    )
    assert len(seen) == result.n_iter and all(a >= b for a, b in zip(seen, seen[1:]))


def test_line_search_meets_strong_wolfe():
    A, b = spd(10, 2)
    fun = quadratic(A, b)
    x = np.ones(10)
    f0, g0 = fun(x)
    for step in (1e-3, 1.0, 1e3):
        a, x_new, f, g = line_search(fun, x, f0, g0, -g0, step)
        assert f <= f0 + 1e-4 * a * (g0 @ -g0)
        assert abs(g @ -g0) <= 0.9 * abs(g0 @ -g0)


@pytest.mark.parametrize("pairs", [1, 4, 10])
def test_the_blocked_two_loop_is_the_two_loop_recursion(pairs, monkeypatch):
    from ilargi.backend import cpu, threads

    rng = np.random.default_rng(pairs)
    d, memory = 3 * cpu.DIRECTION_BLOCK + 123, 10  # several blocks, a short last one
    s = rng.standard_normal((memory, d))
    y = 0.5 * s + 0.1 * rng.standard_normal((memory, d))
    rho = 1.0 / np.einsum("ij,ij->i", s, y)
    order = [(7 - k) % memory for k in range(pairs)]  # newest first, wrapping around
    g = rng.standard_normal(d)
    expected = cpu.two_loop(s, y, rho, order, g)
    # the blocks sum the dots in another order: entries near zero differ in the last bits
    close = dict(rtol=1e-12, atol=1e-14 * np.abs(expected).max())
    np.testing.assert_allclose(cpu.blocked_two_loop(s, y, rho, order, g), expected, **close)
    with threads.threads(1):  # the NumPy kernels' direction at one thread takes it
        calls = []
        monkeypatch.setattr(
            cpu, "blocked_two_loop", lambda *a, f=cpu.blocked_two_loop: calls.append(1) or f(*a)
        )
        np.testing.assert_allclose(cpu.lbfgs_direction(s, y, rho, order, g), expected, **close)
        assert calls
