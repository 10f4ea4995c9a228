"""Element-wise operators (scalars, row vectors, unary ufuncs) stay factorized and stay exact.

The reference applies the same operation to the materialized table, so NULL cells (0 in T0, b after
the affine state) become f(b) exactly as in the materialized table. Every test runs on each backend
(tests/backends.py); the result must stay factorized on the matrix's device.
"""

import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.backends import assert_on_device, on_backend, to_host
from tests.strategies import assert_matches, cases, property_settings

SEEDS = st.integers(0, 2**32 - 1)
SCALARS = st.sampled_from([2.5, -1.5, 3, np.float64(0.75), np.int64(-2)])

# name -> (operation on (matrix, scalar), domain the table needs: "any", "nonneg" or "positive")
SCALAR_OPS = {
    "add": (lambda m, c: m + c, "any"),
    "radd": (lambda m, c: c + m, "any"),
    "sub": (lambda m, c: m - c, "any"),
    "rsub": (lambda m, c: c - m, "any"),
    "mul": (lambda m, c: m * c, "any"),
    "rmul": (lambda m, c: c * m, "any"),
    "div": (lambda m, c: m / c, "any"),
    "rdiv": (lambda m, c: c / m, "positive"),
    "square": (lambda m, c: m**2, "any"),
    "cube": (lambda m, c: m**3, "any"),
    "sqrt_pow": (lambda m, c: m**0.5, "nonneg"),
    "rpow": (lambda m, c: 2.0**m, "any"),
    "neg": (lambda m, c: -m, "any"),
    "abs": (lambda m, c: abs(m), "any"),
}

VECTOR_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
}

UFUNCS = {
    "exp": (np.exp, "any"),
    "log1p": (np.log1p, "nonneg"),
    "abs": (np.abs, "any"),
    "sqrt": (np.sqrt, "nonneg"),
    "sin": (np.sin, "any"),
    "tanh": (np.tanh, "any"),
    "square": (np.square, "any"),
    "negative": (np.negative, "any"),
    "expm1": (np.expm1, "any"),
    "cos": (np.cos, "any"),
}


def _cases_for(domain, **kwargs):
    if domain == "positive":  # T >= 0.5 everywhere: the affine state lifts NULL cells too
        return cases(positive=True, affine=True, **kwargs)
    return cases(nonneg=domain == "nonneg", **kwargs)


def _check_factorized(result, nm, backend):
    assert type(result) is type(nm), (
        f"result is {type(result).__name__}, expected it to stay factorized"
    )
    assert_on_device(result, backend, "elementwise result")


@pytest.mark.parametrize("name", sorted(SCALAR_OPS))
@property_settings(30)
@given(data=st.data(), c=SCALARS, seed=SEEDS)
def test_scalar_operations(backend, name, data, c, seed):
    operation, domain = SCALAR_OPS[name]
    case = data.draw(_cases_for(domain))
    nm = on_backend(case.build(), backend)
    result = operation(nm, c)
    _check_factorized(result, nm, backend)
    assert_matches(result, operation(case.expected, c), seed, what=name, backend=backend)
    assert_matches(nm, case.expected, seed, what=f"{name} (operand afterwards)", backend=backend)
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("reflected", [False, True])
@pytest.mark.parametrize("name", sorted(VECTOR_OPS))
@property_settings(30)
@given(data=st.data(), seed=SEEDS, as_2d=st.booleans())
def test_row_vector_broadcasting(backend, name, reflected, data, seed, as_2d):
    """nm op v and v op nm with a length-d row vector (shape (d,) or (1, d)) on a non-transposed T."""
    divides_by_table = reflected and name == "div"
    case = data.draw(_cases_for("positive" if divides_by_table else "any", transpose=False))
    nm, expected = on_backend(case.build(), backend), case.expected
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.5, 2.0, expected.shape[1]) * rng.choice([-1.0, 1.0], expected.shape[1])
    if as_2d:
        v = v[None, :]
    v_before = v.copy()
    on_device = on_backend(v, backend)
    operation = VECTOR_OPS[name]
    result = operation(on_device, nm) if reflected else operation(nm, on_device)
    reference = operation(v, expected) if reflected else operation(expected, v)
    _check_factorized(result, nm, backend)
    assert_matches(
        result,
        reference,
        seed,
        what=f"{'v ' + name + ' nm' if reflected else 'nm ' + name + ' v'}",
        backend=backend,
    )
    assert np.array_equal(to_host(on_device), v_before)
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("reflected", [False, True])
@pytest.mark.parametrize("name", sorted(VECTOR_OPS))
@property_settings(20)
@given(data=st.data(), seed=SEEDS)
def test_column_vector_on_transpose(backend, name, reflected, data, seed):
    """On a transposed view nm.T, one value per row of the view, shape (k, 1), is one value per column
    of T: an affine column state, exact. A row vector of the view, shape (n,), would scale rows of T
    (not affine per column): refused with a message naming the shapes."""
    divides_by_table = reflected and name == "div"
    case = data.draw(_cases_for("positive" if divides_by_table else "any", transpose=True, min_n=2))
    nm, expected = on_backend(case.build(), backend), case.expected
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.5, 2.0, (expected.shape[0], 1)) * rng.choice(
        [-1.0, 1.0], (expected.shape[0], 1)
    )
    on_device = on_backend(v, backend)
    operation = VECTOR_OPS[name]
    result = operation(on_device, nm) if reflected else operation(nm, on_device)
    reference = operation(v, expected) if reflected else operation(expected, v)
    _check_factorized(result, nm, backend)
    assert_matches(result, reference, seed, what=f"nm.T {name} column vector", backend=backend)
    if expected.shape[1] > 1:  # a single value is a scalar
        row_vector = on_backend(rng.uniform(0.5, 2.0, expected.shape[1]), backend)
        with pytest.raises(ValueError, match=r"(?s)does not broadcast per column.*shape"):
            operation(row_vector, nm) if reflected else operation(nm, row_vector)


@pytest.mark.parametrize("name", sorted(UFUNCS))
@property_settings(30)
@given(data=st.data(), seed=SEEDS)
def test_unary_ufuncs(backend, name, data, seed):
    ufunc, domain = UFUNCS[name]
    case = data.draw(_cases_for(domain))
    nm = on_backend(case.build(), backend)
    result = ufunc(nm)
    _check_factorized(result, nm, backend)
    assert_matches(result, ufunc(case.expected), seed, what=name, backend=backend)
    case.scenario.assert_inputs_untouched()


# Operations defined everywhere and bounded enough to chain without overflow.
CHAIN_STEPS = {
    "add": (lambda m, v: m + 0.5, lambda t, v: t + 0.5),
    "rsub": (lambda m, v: 1.0 - m, lambda t, v: 1.0 - t),
    "mul": (lambda m, v: m * -1.5, lambda t, v: t * -1.5),
    "sub_vec": (lambda m, v: m - v, lambda t, v: t - v),
    "mul_vec": (lambda m, v: v * m, lambda t, v: v * t),
    "div_vec": (lambda m, v: m / v, lambda t, v: t / v),
    "sin": (lambda m, v: np.sin(m), lambda t, v: np.sin(t)),
    "tanh": (lambda m, v: np.tanh(m), lambda t, v: np.tanh(t)),
    "abs": (lambda m, v: abs(m), lambda t, v: np.abs(t)),
    "square": (lambda m, v: m**2, lambda t, v: t**2),
    "exp_tanh": (lambda m, v: np.exp(np.tanh(m)), lambda t, v: np.exp(np.tanh(t))),
}


@property_settings(60)
@given(
    case=cases(transpose=False, select=False),
    steps=st.lists(st.sampled_from(sorted(CHAIN_STEPS)), min_size=1, max_size=4),
    seed=SEEDS,
)
def test_chains_of_elementwise_operations(backend, case, steps, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.5, 2.0, expected.shape[1]) * rng.choice([-1.0, 1.0], expected.shape[1])
    on_device = on_backend(v, backend)
    for step in steps:
        on_matrix, on_table = CHAIN_STEPS[step]
        nm, expected = on_matrix(nm, on_device), on_table(expected, v)
    assert_matches(nm, expected, seed, what=" -> ".join(steps), backend=backend)
    assert_matches(nm.T, expected.T, seed, what=" -> ".join(steps) + " -> T", backend=backend)
    case.scenario.assert_inputs_untouched()


def test_division_by_zero_cells_matches_materialized(backend):
    """1 / T where T has NULL and zero cells: inf exactly where the materialized table has inf."""
    from ilargi import NormalizedMatrix

    fact = np.array([[1.0, 0.0], [2.0, 4.0], [0.0, -1.0]])
    dim = np.array([[0.5], [0.0]])
    nm = on_backend(
        NormalizedMatrix.from_parts(
            [fact, dim], [None, np.array([1, -1, 0])], [[0, 1], [2]], (3, 3)
        ),
        backend,
    )
    table = np.array([[1.0, 0.0, 0.0], [2.0, 4.0, 0.0], [0.0, -1.0, 0.5]])
    with np.errstate(divide="ignore"):
        expected = 1.0 / table
    result = (1.0 / nm).materialize()
    assert_on_device(result, backend)
    np.testing.assert_array_equal(to_host(result), expected)
