"""Linear-algebra operators of NormalizedMatrix against the materialized table, on random DI scenarios.

Each case may carry affine state (nm * a + b), a row selection and a transpose (see strategies.Case);
every test also checks that the caller's sources, index vectors and operands were not modified.
"""
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, strategies as st

from tests.strategies import (as_dense, assert_close, cases, dense_operand, property_settings, relative_error,
                        scenarios)

SEEDS = st.integers(0, 2**32 - 1)
WIDTHS = st.sampled_from([None, 1, 3])  # None: a 1-D operand
OPERAND_DTYPES = st.sampled_from([np.float64, np.float64, np.int64])


def _operand_shape(size, m, side):
    if m is None:
        return (size,)
    return (size, m) if side == "right" else (m, size)


@pytest.mark.parametrize("side", ["right", "left"])
@property_settings(80)
@given(case=cases(), m=WIDTHS, dtype=OPERAND_DTYPES, seed=SEEDS)
def test_matmul(side, case, m, dtype, seed):
    nm, expected = case.build(), case.expected
    size = expected.shape[1] if side == "right" else expected.shape[0]
    x = dense_operand(seed, _operand_shape(size, m, side), dtype)
    x_before = x.copy()
    out, reference = (nm @ x, expected @ x) if side == "right" else (x @ nm, x @ expected)
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float64
    assert_close(out, reference, what=f"matmul, operand on the {side}")
    assert np.array_equal(x, x_before)
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases(transpose=False), m=WIDTHS, seed=SEEDS)
def test_transpose_matmul_is_tmm(case, m, seed):
    """nm.T @ Y is T^T Y (the T0^T rule with the affine correction a * (T0^T y) + b (1^T y))."""
    nm, expected = case.build(), case.expected
    y = dense_operand(seed, _operand_shape(expected.shape[0], m, "right"))
    assert_close(nm.T @ y, expected.T @ y, what="nm.T @ Y")


@property_settings(60)
@given(case=cases())
def test_materialize_toarray_asarray(case):
    nm, expected = case.build(), case.expected
    materialized = nm.materialize()
    if sp.issparse(materialized):
        has_shift = case.affine is not None and np.any(case.affine[1] != 0)
        assert case.scenario.all_sparse and not has_shift, "sparse result although a source is dense or b != 0"
        assert materialized.format == "csr"
    else:
        assert isinstance(materialized, np.ndarray)
    assert_close(materialized, expected, what="materialize")
    for dense in (nm.toarray(), np.asarray(nm)):
        assert isinstance(dense, np.ndarray) and dense.dtype == np.float64
        assert_close(dense, expected, what="toarray/asarray")
    # The result is the caller's to modify: it must not alias a source or the matrix's own state.
    if sp.issparse(materialized):
        materialized.data[:] = 7.5
    else:
        materialized[...] = 7.5
    array = nm.toarray()
    array[...] = -7.5
    case.scenario.assert_inputs_untouched()
    assert_close(nm.toarray(), expected, what="toarray after modifying an earlier result")


def _canonical_nnz(matrix):
    """Stored entries once duplicates are summed (explicit zeros still count, as in scipy)."""
    canonical = sp.csr_matrix(matrix, copy=True)
    canonical.sum_duplicates()
    return canonical.nnz


@property_settings(40)
@given(scenario=scenarios())
def test_shape_dtype_ndim_nnz(scenario):
    nm = scenario.build()
    n, d = scenario.shape
    assert nm.shape == (n, d) and nm.T.shape == (d, n)
    assert nm.ndim == 2 and nm.T.ndim == 2
    assert nm.dtype == np.float64
    expected_nnz = sum(_canonical_nnz(s) if sp.issparse(s) else int(np.count_nonzero(s)) for s in scenario.sources)
    assert nm.nnz == expected_nnz


@property_settings(40)
@given(case=cases(), seed=SEEDS)
def test_double_transpose_is_identity(case, seed):
    nm, expected = case.build(), case.expected
    twice = nm.T.T
    assert twice.shape == expected.shape
    assert_close(twice.materialize(), expected, what="nm.T.T")
    x = dense_operand(seed, (expected.shape[1], 2))
    assert_close(twice @ x, nm @ x, what="nm.T.T @ X")


@property_settings(60)
@given(case=cases(), weighted=st.booleans(), seed=SEEDS)
def test_crossprod(case, weighted, seed):
    nm, expected = case.build(), case.expected
    if weighted:
        w = dense_operand(seed, (expected.shape[0],)) + 0.5  # some negative weights too
        w_before = w.copy()
        out = nm.crossprod(w)
        assert np.array_equal(w, w_before)
    else:
        w = np.ones(expected.shape[0])
        out = nm.crossprod()
    if sp.issparse(out):
        has_shift = case.affine is not None and np.any(case.affine[1] != 0)
        assert case.scenario.all_sparse and not has_shift
    else:
        assert isinstance(out, np.ndarray)
    reference = expected.T @ (w[:, None] * expected)
    assert_close(out, reference, what="crossprod")
    assert_close(as_dense(out), as_dense(out).T, rtol=1e-12, what="crossprod symmetry")
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases())
def test_tcrossprod(case):
    nm, expected = case.build(), case.expected
    assert_close(nm.tcrossprod(), expected @ expected.T, what="tcrossprod")
    case.scenario.assert_inputs_untouched()


@property_settings(80)
@given(case=cases(), with_v=st.booleans(), with_z=st.booleans(), m=WIDTHS,
       alpha=st.sampled_from([1.0, -0.5, 2.0]), beta=st.sampled_from([0.0, 1.0, -3.0]), seed=SEEDS)
def test_gramvec(case, with_v, with_z, m, alpha, beta, seed):
    """alpha * T^T (v * (T y)) + beta * z; y (and z) of length d or d x m, v one weight per row."""
    nm, expected = case.build(), case.expected
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    y = rng.uniform(-1, 1, _operand_shape(cols, m, "right"))
    v = rng.uniform(-1, 2, rows) if with_v else None
    z = rng.uniform(-1, 1, y.shape) if with_z else None
    kept = [x.copy() for x in (y, v, z) if x is not None]
    out = nm.gramvec(y, v=v, alpha=alpha, beta=beta, z=z)
    weights = np.ones(rows) if v is None else v
    product = expected @ y
    reference = alpha * (expected.T @ (weights * product if y.ndim == 1 else weights[:, None] * product))
    if z is not None:
        reference = reference + beta * z
    assert isinstance(out, np.ndarray) and out.shape == y.shape
    assert_close(out, reference, what="gramvec")
    assert all(np.array_equal(a, b) for a, b in zip(kept, [x for x in (y, v, z) if x is not None])), \
        "gramvec modified an operand"
    case.scenario.assert_inputs_untouched()


@property_settings(60)
@given(case=cases(), seed=SEEDS)
def test_linear_operator(case, seed):
    nm, expected = case.build(), case.expected
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    x, y, x2 = rng.uniform(-1, 1, cols), rng.uniform(-1, 1, rows), rng.uniform(-1, 1, (cols, 3))
    for op in (nm.aslinearoperator(), spla.aslinearoperator(nm)):
        assert isinstance(op, spla.LinearOperator)
        assert op.shape == expected.shape
        assert np.dtype(op.dtype) == np.float64
        assert_close(op.matvec(x), expected @ x, what="matvec")
        assert_close(op.rmatvec(y), expected.T @ y, what="rmatvec")
        assert_close(op.matmat(x2), expected @ x2, what="matmat")
        assert_close(op @ x, expected @ x, what="op @ x")
        assert_close(op.T.matvec(y), expected.T @ y, what="op.T.matvec")
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases(), seed=SEEDS)
def test_lsqr_same_solution_as_dense(case, seed):
    """scipy's lsqr on the factorized operator follows the same iterates as on the dense matrix."""
    nm, expected = case.build(), case.expected
    y = np.random.default_rng(seed).uniform(-1, 1, expected.shape[0])
    # A few fixed iterations: the iterates are the same polynomials in the data on both sides.
    options = dict(atol=0.0, btol=0.0, conlim=0.0, iter_lim=3)
    x_factorized = spla.lsqr(nm.aslinearoperator(), y, **options)[0]
    x_dense = spla.lsqr(expected, y, **options)[0]
    assert relative_error(expected @ x_factorized, expected @ x_dense) <= 1e-7
    # Converged: both fit the least-squares solution (normal equations hold).
    full = dict(atol=1e-14, btol=1e-14, conlim=1e12, iter_lim=500)
    x_factorized = spla.lsqr(spla.aslinearoperator(nm), y, **full)[0]
    x_dense = spla.lsqr(expected, y, **full)[0]
    gradient = expected.T @ (expected @ x_factorized - y)
    scale = max(1.0, np.linalg.norm(expected) ** 2 * max(1.0, np.linalg.norm(x_factorized)))
    assert np.linalg.norm(gradient) <= 1e-8 * scale
    if np.linalg.cond(expected) < 1e4 and expected.shape[0] >= expected.shape[1]:
        assert relative_error(x_factorized, x_dense) <= 1e-7


@pytest.mark.parametrize("solver", ["cg", "svds"])
def test_other_scipy_solvers_run(solver):
    """cg on T^T T (via gramvec-free LinearOperator composition) and svds run on the operator."""
    rng = np.random.default_rng(0)
    fact = rng.uniform(-1, 1, (30, 2))
    dim = rng.uniform(-1, 1, (5, 3))
    fk = rng.integers(0, 5, 30)
    from ilargi import NormalizedMatrix
    nm = NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0, 1], [2, 3, 4]], (30, 5))
    dense = np.hstack([fact, dim[fk]])
    op = nm.aslinearoperator()
    if solver == "cg":
        normal = op.T @ op
        b = dense.T @ rng.uniform(-1, 1, 30)
        x, info = spla.cg(normal, b, rtol=1e-12, maxiter=200)
        assert info == 0
        assert_close(x, np.linalg.solve(dense.T @ dense, b), rtol=1e-7, what="cg")
    else:
        singular = spla.svds(op, k=2, return_singular_vectors=False, random_state=0)
        assert_close(np.sort(singular), np.sort(np.linalg.svd(dense, compute_uv=False))[-2:],
                     what="svds")


@pytest.mark.parametrize("plan", ["factorized", "materialized", "auto"])
def test_heavy_operators_take_a_plan(plan):
    """crossprod, gramvec and matmul give the same result whichever plan runs them."""
    from ilargi import NormalizedMatrix
    rng = np.random.default_rng(3)
    fact, dim = rng.standard_normal((40, 3)), rng.standard_normal((6, 4))
    nm = NormalizedMatrix.from_parts([fact, dim], [None, rng.integers(-1, 6, 40)],
                                     [[0, 1, 2], [3, 4, 5, 6]], (40, 7)) * 2.0 + 1.0
    table = nm.toarray()
    w, y, v, X = rng.random(40), rng.standard_normal(7), rng.random(40), rng.standard_normal((7, 2))
    assert_close(nm.crossprod(plan=plan), table.T @ table, what=f"crossprod {plan}")
    assert_close(nm.crossprod(w, plan=plan), table.T @ (w[:, None] * table), what="crossprod w")
    assert_close(nm.gramvec(y, v, 0.5, 2.0, y, plan=plan),
                 0.5 * table.T @ (v * (table @ y)) + 2.0 * y, what=f"gramvec {plan}")
    assert_close(nm.matmul(X, plan=plan), table @ X, what=f"matmul {plan}")


def test_unknown_plan_is_refused():
    from ilargi import NormalizedMatrix
    nm = NormalizedMatrix.from_parts([np.ones((3, 2))], [None], [[0, 1]], (3, 2))
    with pytest.raises(ValueError, match="plan must be"):
        nm.crossprod(plan="fast")


@property_settings(40)
@given(case=cases(), m=WIDTHS, seed=SEEDS)
def test_dot_writes_into_the_buffer(case, m, seed):
    """nm.dot(X, out=buf) is nm @ X, written into buf and returned (a training loop's buffer)."""
    nm, expected = case.build(), case.expected
    x = dense_operand(seed, _operand_shape(expected.shape[1], m, "right"))
    buffer = np.full((expected.shape[0],) + x.shape[1:], np.nan)
    out = nm.dot(x, out=buffer)
    assert out is buffer
    assert_close(buffer, expected @ x, what="dot into a buffer")
    assert_close(nm.dot(x), expected @ x, what="dot")
    with pytest.raises(ValueError, match="out must be"):
        nm.dot(x, out=np.empty((expected.shape[0] + 1,) + x.shape[1:]))
    case.scenario.assert_inputs_untouched()
