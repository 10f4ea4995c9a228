"""Operators refuse bad operands with a clear ValueError/TypeError (shapes, axes, selections, sizes);
dtypes follow NumPy's promotion; NaN/inf in source rows no target row takes never reach a result.

Messages are matched on the reason's key words, not on exact wording.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.backends import on_backend
from tests.strategies import (
    assert_close,
    assert_matches,
    property_settings,
    scenarios,
    with_unreferenced_rows,
)
from tests.strategies import raises_all as _raises

FACT = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])  # 4 x 2, identity part
DIM = np.array([[10.0], [20.0], [30.0]])  # 3 x 1
FK = np.array([2, 0, 1, 0])
NAMES = ["fact", "dim"]
SHAPE = (4, 3)


def _build(sources=None, rows=None, cols=None, shape=SHAPE, names=NAMES, **kwargs):
    from ilargi import NormalizedMatrix

    sources = [FACT, DIM] if sources is None else sources
    rows = [None, FK] if rows is None else rows
    cols = [[0, 1], [2]] if cols is None else cols
    return NormalizedMatrix.from_parts(sources, rows, cols, shape, names=names, **kwargs)


@pytest.fixture
def nm():
    return _build()


# --- shape mismatch in @ and the other operand-taking operators ------------------------------------


@pytest.mark.parametrize("operand", [np.ones(4), np.ones((2, 3)), np.ones((3, 1, 1))])
def test_matmul_shape_mismatch(nm, operand):
    if operand.ndim == 3:
        with pytest.raises((ValueError, TypeError)):
            nm @ operand
        return
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        nm @ operand


@pytest.mark.parametrize("operand", [np.ones(3), np.ones((2, 3))])
def test_left_matmul_shape_mismatch(nm, operand):
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        operand @ nm


def test_transpose_matmul_shape_mismatch(nm):
    with _raises(ValueError, r"shape|dimension|mismatch|align"):
        nm.T @ np.ones(3)


@pytest.mark.parametrize("vector", [np.ones(2), np.ones(4), np.ones((2, 3))])
def test_row_vector_of_wrong_length(nm, vector):
    with pytest.raises(ValueError):
        nm + vector
    with pytest.raises(ValueError):
        nm * vector


def test_operator_argument_shapes(nm):
    with pytest.raises(ValueError):
        nm.crossprod(np.ones(3))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(2))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(3), v=np.ones(3))
    with pytest.raises(ValueError):
        nm.gramvec(np.ones(3), beta=1.0, z=np.ones(4))


@pytest.mark.parametrize("axis", [2, -3])
def test_reduction_axis_out_of_range(nm, axis):
    with pytest.raises((ValueError, TypeError)):
        nm.sum(axis=axis)


def test_tcrossprod_refuses_huge_result():
    """T T^T for 10^6 rows would be 8 TB: refused with a clear error, not an attempted allocation."""
    big = _build([DIM], [np.zeros(10**6, dtype=np.int64)], [[0]], (10**6, 1), names=["dim"])
    with _raises(ValueError, r"tcrossprod|large|size|bound|memory"):
        big.tcrossprod()


# --- row selection -------------------------------------------------------------------------------


@pytest.mark.parametrize("selection", [np.array([0, 4]), np.array([5]), [0, 99]])
def test_selection_out_of_range(nm, selection):
    with pytest.raises((IndexError, ValueError)):
        nm[selection]


def test_selection_mask_of_wrong_length(nm):
    with pytest.raises((IndexError, ValueError)):
        nm[np.array([True, False, True])]


def test_selection_by_floats(nm):
    with pytest.raises((IndexError, TypeError)):
        nm[np.array([0.0, 1.0])]


# --- dtypes --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtypes, expected",
    [
        ((np.int64, np.float64), np.float64),
        ((np.int32, np.int64), np.float64),
        ((np.float32, np.float64), np.float64),
        ((np.float32, np.int64), np.float64),
        ((np.float32, np.float32), np.float32),
        ((np.bool_, np.float32), np.float64),
    ],
)
@pytest.mark.parametrize("sparse_dim", [False, True])
def test_dtype_promotion(dtypes, expected, sparse_dim):
    fact = (FACT > 3).astype(dtypes[0]) if dtypes[0] == np.bool_ else FACT.astype(dtypes[0])
    dim = DIM.astype(dtypes[1])
    nm = _build(sources=[fact, sp.csr_matrix(dim) if sparse_dim else dim])
    assert nm.dtype == expected
    materialized = nm.materialize()
    assert materialized.dtype == expected
    assert nm.toarray().dtype == expected
    table = np.hstack([fact.astype(np.float64), DIM[FK]])
    np.testing.assert_allclose(nm.toarray(), table, rtol=1e-6)
    x = np.ones(3, dtype=expected)
    out = nm @ x
    assert out.dtype == expected
    np.testing.assert_allclose(out, table @ np.ones(3), rtol=1e-6)
    # Inputs keep their dtype: the cast is a copy.
    assert fact.dtype == dtypes[0] and dim.dtype == dtypes[1]


def test_float32_stays_float32_through_scalar_and_unary_operations():
    """NumPy keeps float32 for float32 op Python scalar (NEP 50) and for unary ufuncs."""
    nm = _build(sources=[FACT.astype(np.float32), DIM.astype(np.float32)])
    table = nm.toarray()
    for derived, reference in (
        (nm * 2.0, table * 2.0),
        (nm + 1, table + 1),
        (-nm, -table),
        (np.exp(nm), np.exp(table)),
        (nm[[0, 2]], table[[0, 2]]),
    ):
        assert reference.dtype == np.float32
        assert derived.dtype == np.float32, f"dtype became {derived.dtype}"
        assert derived.toarray().dtype == np.float32


def test_float32_result_follows_numpy_with_float64_operand():
    nm = _build(sources=[FACT.astype(np.float32), DIM.astype(np.float32)])
    assert (nm @ np.ones(3)).dtype == np.result_type(np.float32, np.float64)


@property_settings(40)
@given(
    scenario=scenarios(), value=st.sampled_from([np.nan, np.inf]), seed=st.integers(0, 2**32 - 1)
)
def test_nonfinite_in_unreferenced_source_rows_stays_out(backend, scenario, value, seed):
    """With allow_nonfinite=True, a NaN/inf in a source row that no target row takes is not in T, so it
    must not reach any result (0 * NaN = NaN in a segment sum or a weighted gram would leak it)."""
    assume(any(r is not None for r in scenario.rows))
    poisoned = with_unreferenced_rows(scenario, value)
    nm, expected = on_backend(poisoned.build(allow_nonfinite=True), backend), poisoned.dense
    assert_matches(nm, expected, seed, what="unreferenced NaN/inf", backend=backend)
    assert_matches(nm.T, expected.T, seed, what="unreferenced NaN/inf, transposed", backend=backend)
    assert_close(nm.crossprod(), expected.T @ expected, what="crossprod", backend=backend)
    y = np.random.default_rng(seed).uniform(-1, 1, expected.shape[0])
    assert_close(
        nm.crossprod(on_backend(y, backend)),
        expected.T @ (y[:, None] * expected),
        what="weighted crossprod",
        backend=backend,
    )
    x = np.random.default_rng(seed + 1).uniform(-1, 1, expected.shape[1])
    assert_close(
        nm.gramvec(on_backend(x, backend), v=on_backend(y, backend)),
        expected.T @ (y * (expected @ x)),
        what="gramvec",
        backend=backend,
    )
    for name in ("sum", "mean", "var", "min", "max"):
        assert_close(
            getattr(nm, name)(axis=0), getattr(expected, name)(axis=0), what=name, backend=backend
        )
    assert_close(np.exp(nm), np.exp(expected), what="exp", backend=backend)


@pytest.mark.parametrize("operator", ["crossprod", "tcrossprod"])
def test_crossprod_of_a_very_wide_or_tall_matrix_is_refused_before_allocating(operator):
    """The dense d × d (crossprod) or n × n (tcrossprod) result is checked against the memory
    guard first: the error names the operator, the shape, the bytes and what is available. (The
    shift makes the table dense: a mostly-zero one's wide Gram is sparse, and needs no guard.)"""
    import scipy.sparse as sp

    from ilargi import NormalizedMatrix, config_context

    n, width = 3000, 3000
    rng = np.random.default_rng(0)
    one_hot = sp.identity(width, format="csr")
    fk = rng.integers(0, width, n)
    nm = (
        NormalizedMatrix.from_parts(
            [rng.normal(size=(n, 1)), one_hot],
            [None, fk],
            [[0], np.arange(1, width + 1)],
            (n, width + 1),
        )
        + 1.0
    )
    side = width + 1 if operator == "crossprod" else n
    with (
        config_context(available_memory=64 << 20),
        pytest.raises(MemoryError, match=rf"(?s){operator}.*{side} × {side}.*MiB.*available"),
    ):
        getattr(nm, operator)()
    small = nm[:50][:, :40]
    reference = small.toarray()
    expected = reference.T @ reference if operator == "crossprod" else reference @ reference.T
    with config_context(available_memory=4 << 30):
        result = getattr(small, operator)()
    np.testing.assert_allclose(np.asarray(result), expected, atol=1e-12)
