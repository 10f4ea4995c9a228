"""Linear-algebra operators of NormalizedMatrix against the materialized table, on random DI scenarios.

Each case may carry affine state (nm * a + b), a row selection and a transpose (see strategies.Case);
every test also checks that the caller's sources, index vectors and operands were not modified.
Tests taking ``backend`` run on the CPU and, moved with ``nm.to("gpu")``, on the GPU (tests/backends.py);
the SciPy interoperability tests (LinearOperator, lsqr, cg, svds) are CPU-only.
"""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import event, given
from hypothesis import strategies as st

from ilargi import NormalizedMatrix
from ilargi.chooser.memory import layout
from tests.backends import is_sparse, on_backend, to_host
from tests.strategies import (
    assert_close,
    cases,
    dense_operand,
    dense_reference,
    property_settings,
    relative_error,
    scenarios,
    wide_star,
)

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
def test_matmul(backend, side, case, m, dtype, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    size = expected.shape[1] if side == "right" else expected.shape[0]
    x_host = dense_operand(seed, _operand_shape(size, m, side), dtype)
    x_before = x_host.copy()
    x = on_backend(x_host, backend)
    out, reference = (nm @ x, expected @ x_host) if side == "right" else (x @ nm, x_host @ expected)
    assert out.dtype == np.float64
    assert_close(out, reference, what=f"matmul, operand on the {side}", backend=backend)
    assert np.array_equal(to_host(x), x_before)
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases(transpose=False), m=WIDTHS, seed=SEEDS)
def test_transpose_matmul_is_tmm(backend, case, m, seed):
    """nm.T @ Y is T^T Y (the T0^T rule with the affine correction a * (T0^T y) + b (1^T y))."""
    nm, expected = on_backend(case.build(), backend), case.expected
    y = dense_operand(seed, _operand_shape(expected.shape[0], m, "right"))
    assert_close(nm.T @ on_backend(y, backend), expected.T @ y, what="nm.T @ Y", backend=backend)


@pytest.mark.parametrize("fact_sparse", [True, False], ids=["csr", "mixed"])
def test_materialize_with_dimensions_taller_than_the_table(backend, fact_sparse):
    """Sources with more rows than the table are cut to the rows they feed before the table is
    built (metadata.parts.referenced): absent rows, a row taken twice, two parts sharing one
    indicator, rows in no particular order -- the same table, and the sources untouched."""
    rng = np.random.default_rng(0)
    n, tall = 40, 3_000
    fact = sp.random_array((n, 3), density=0.5, random_state=1, format="csr")
    fact = fact if fact_sparse else fact.toarray()
    onehot = sp.csr_array(
        (np.ones(tall), (np.arange(tall), rng.integers(0, 6, tall))), shape=(tall, 6)
    )
    numeric = sp.random_array((tall, 2), density=0.6, random_state=2, format="csr")
    other = rng.standard_normal((tall, 2)) if not fact_sparse else numeric.copy()
    rows = rng.integers(0, tall, n)
    rows[::5], rows[1] = -1, rows[2]
    other_rows = rng.permutation(tall)[:n]
    sources = [fact, onehot, numeric, other]
    before = [s.copy() for s in sources]
    cols = [[0, 1, 2], [3, 4, 5, 6, 7, 8], [9, 10], [11, 12]]
    nm = NormalizedMatrix.from_parts(sources, [None, rows, rows, other_rows], cols, (n, 13))
    expected = np.zeros((n, 13))
    for source, r, c in zip(sources, [np.arange(n), rows, rows, other_rows], cols):
        block = source.toarray() if sp.issparse(source) else source
        expected[:, c] = np.where((r >= 0)[:, None], block[np.maximum(r, 0)], 0.0)
    table = on_backend(nm, backend).materialize()
    assert is_sparse(table) == fact_sparse
    assert_close(table, expected, what="materialize", backend=backend)
    for source, copy in zip(sources, before):
        same = (source != copy).nnz == 0 if sp.issparse(source) else np.array_equal(source, copy)
        assert same


@property_settings(60)
@given(case=cases())
def test_materialize_toarray_asarray(backend, case):
    nm, expected = on_backend(case.build(), backend), case.expected
    materialized = nm.materialize()
    has_shift = case.affine is not None and np.any(case.affine[1] != 0)
    if is_sparse(materialized):  # every source sparse, or mostly zeros (chooser.memory.layout)
        assert not has_shift, "sparse result although b != 0"
        assert (
            case.scenario.all_sparse
            or expected.size == 0
            or np.count_nonzero(expected) <= expected.size / 2
        ), "sparse result of a mostly dense table"
        assert materialized.format == "csr"
    else:
        assert not is_sparse(materialized) and materialized.ndim == 2
        assert has_shift or not case.scenario.all_sparse, (
            "dense result although every source is sparse"
        )
    assert_close(materialized, expected, what="materialize", backend=backend)
    dense = nm.toarray()  # on the matrix's device
    assert not is_sparse(dense) and dense.dtype == np.float64
    assert_close(dense, expected, what="toarray", backend=backend)
    host = np.asarray(nm)  # always NumPy, whatever the device
    assert isinstance(host, np.ndarray) and host.dtype == np.float64
    assert_close(host, expected, what="asarray")
    # The result is the caller's to modify: it must not alias a source or the matrix's own state.
    if is_sparse(materialized):
        materialized.data[:] = 7.5
    else:
        materialized[...] = 7.5
    array = nm.toarray()
    array[...] = -7.5
    case.scenario.assert_inputs_untouched()
    assert_close(
        nm.toarray(), expected, what="toarray after modifying an earlier result", backend=backend
    )


def _canonical_nnz(matrix):
    """Stored entries once duplicates are summed (explicit zeros still count, as in scipy)."""
    canonical = sp.csr_matrix(matrix, copy=True)
    canonical.sum_duplicates()
    return canonical.nnz


def _as_kept(source, rows):
    """The rows of ``source`` a matrix keeps: the used ones where they are at most half of it."""
    if rows is None:
        return source
    used = np.unique(np.asarray(rows)[np.asarray(rows) >= 0])
    return source[used] if 0 < 2 * used.size <= source.shape[0] else source


@property_settings(40)
@given(scenario=scenarios())
def test_shape_dtype_ndim_nnz(backend, scenario):
    nm = on_backend(scenario.build(), backend)
    n, d = scenario.shape
    assert nm.shape == (n, d) and nm.T.shape == (d, n)
    assert nm.ndim == 2 and nm.T.ndim == 2
    assert nm.dtype == np.float64
    expected_nnz = sum(
        _canonical_nnz(s) if sp.issparse(s) else int(np.count_nonzero(s))
        for s in map(_as_kept, scenario.sources, scenario.rows)
    )
    assert nm.nnz == expected_nnz


@property_settings(40)
@given(case=cases(), seed=SEEDS)
def test_double_transpose_is_identity(backend, case, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    twice = nm.T.T
    assert twice.shape == expected.shape
    assert_close(twice.materialize(), expected, what="nm.T.T", backend=backend)
    x = dense_operand(seed, (expected.shape[1], 2))
    assert_close(twice @ on_backend(x, backend), expected @ x, what="nm.T.T @ X", backend=backend)


@property_settings(60)
@given(case=cases(), weighted=st.booleans(), seed=SEEDS)
def test_crossprod(backend, case, weighted, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    if weighted:
        w = dense_operand(seed, (expected.shape[0],)) + 0.5  # some negative weights too
        w_before = w.copy()
        on_device = on_backend(w, backend)
        out = nm.crossprod(on_device)
        assert np.array_equal(to_host(on_device), w_before)
    else:
        w = np.ones(expected.shape[0])
        out = nm.crossprod()
    if is_sparse(out):
        has_shift = case.affine is not None and np.any(case.affine[1] != 0)
        assert case.scenario.all_sparse and not has_shift
    reference = expected.T @ (w[:, None] * expected)
    assert_close(out, reference, what="crossprod", backend=backend)
    gram = to_host(out)
    gram = gram.toarray() if sp.issparse(gram) else gram
    assert_close(gram, gram.T, rtol=1e-12 if backend != "gpu" else 1e-9, what="crossprod symmetry")
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("limit", [0, 1 << 40], ids=["sparse", "dense"])
def test_crossprod_of_a_mostly_zero_mixed_table(backend, limit, monkeypatch):
    """A table of a dense fact part and a wide sparse dimension materializes as CSR; its Gram is
    sparse where a dense one would exceed DENSE_GRAM_BYTES (a dense d × d result of a wide one-hot
    dimension took seconds and gigabytes where the sparse one takes milliseconds)."""
    from ilargi.rewriter import products

    monkeypatch.setattr(products, "DENSE_GRAM_BYTES", limit)
    rng = np.random.default_rng(3)
    n, rows_dim, wide = 60, 20, 1_500
    fact = rng.standard_normal((n, 3))
    dim = sp.random_array((rows_dim, wide), density=0.02, random_state=4, format="csr")
    rows = rng.integers(-1, rows_dim, n)
    cols = [[0, 1, 2], np.arange(3, 3 + wide)]
    nm = NormalizedMatrix.from_parts([fact, dim], [None, rows], cols, (n, 3 + wide))
    T = nm.toarray()
    gram = on_backend(nm, backend).crossprod()
    assert layout(nm).sparse and is_sparse(gram) == (limit == 0)
    assert_close(gram, T.T @ T, what="crossprod", backend=backend)
    assert not is_sparse((nm + 1.0).crossprod())  # a shift fills the table


@property_settings(40)
@given(case=cases())
def test_tcrossprod(backend, case):
    nm, expected = on_backend(case.build(), backend), case.expected
    assert_close(nm.tcrossprod(), expected @ expected.T, what="tcrossprod", backend=backend)
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("density", [1.0, 0.3], ids=["dense", "sparse"])
def test_tcrossprod_of_a_few_rows_works_on_those_rows(density):
    """T[rows]·T[rows]ᵀ over a few rows of large sources: each source is cut to the rows the
    selection references first, so no block is source × source (8,000 fact rows: 512 MB)."""
    import tracemalloc

    from ilargi.datasets import make_star

    nm, _ = make_star(
        8000, tuple_ratio=5, feature_ratio=2, n_dims=2, d_fact=6, density=density, random_state=0
    )
    rows = np.array([7, 7, 7999, 0, 4000] + list(range(100, 140)))
    selected, table = nm[rows], nm.toarray()[rows]
    w = np.random.default_rng(0).random(nm.shape[1])
    tracemalloc.start()
    got, weighted = selected.tcrossprod(), selected.tcrossprod(w)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert_close(got, table @ table.T, what="tcrossprod of a selection")
    assert_close(weighted, (table * w) @ table.T, what="weighted tcrossprod of a selection")
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB for a {len(rows)} × {len(rows)} result"


@property_settings(80)
@given(
    case=cases(),
    with_v=st.booleans(),
    with_z=st.booleans(),
    m=WIDTHS,
    alpha=st.sampled_from([1.0, -0.5, 2.0]),
    beta=st.sampled_from([0.0, 1.0, -3.0]),
    seed=SEEDS,
)
def test_gramvec(backend, case, with_v, with_z, m, alpha, beta, seed):
    """alpha * T^T (v * (T y)) + beta * z; y (and z) of length d or d x m, v one weight per row."""
    nm, expected = on_backend(case.build(), backend), case.expected
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    y = rng.uniform(-1, 1, _operand_shape(cols, m, "right"))
    v = rng.uniform(-1, 2, rows) if with_v else None
    z = rng.uniform(-1, 1, y.shape) if with_z else None
    kept = [x.copy() for x in (y, v, z) if x is not None]
    operands = [on_backend(x, backend) for x in (y, v, z)]
    out = nm.gramvec(operands[0], v=operands[1], alpha=alpha, beta=beta, z=operands[2])
    weights = np.ones(rows) if v is None else v
    product = expected @ y
    reference = alpha * (
        expected.T @ (weights * product if y.ndim == 1 else weights[:, None] * product)
    )
    if z is not None:
        reference = reference + beta * z
    assert out.shape == y.shape
    assert_close(out, reference, what="gramvec", backend=backend)
    assert all(
        np.array_equal(a, to_host(b)) for a, b in zip(kept, [x for x in operands if x is not None])
    ), "gramvec modified an operand"
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
    # From x0 = 0, lsqr converges to the minimum-norm solution, unique even for a rank-deficient T
    # (uncovered columns, wide tables): compare wherever T is well conditioned on its row space.
    singular = np.linalg.svd(expected, compute_uv=False)
    nonzero = singular[
        singular > singular.max(initial=0.0) * max(expected.shape) * np.finfo(float).eps
    ]
    well_conditioned = nonzero.size == 0 or nonzero.max() / nonzero.min() < 1e4
    event(f"solutions compared: {well_conditioned}")
    if well_conditioned:
        minimum_norm = np.linalg.lstsq(expected, y, rcond=None)[0]
        assert relative_error(x_factorized, x_dense) <= 1e-7
        assert relative_error(x_factorized, minimum_norm) <= 1e-7


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
        assert_close(
            np.sort(singular), np.sort(np.linalg.svd(dense, compute_uv=False))[-2:], what="svds"
        )


@pytest.mark.parametrize("plan", ["factorized", "materialized", "auto"])
def test_heavy_operators_take_a_plan(backend, plan):
    """crossprod, gramvec and matmul give the same result whichever plan runs them."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(3)
    fact, dim = rng.standard_normal((40, 3)), rng.standard_normal((6, 4))
    fk = rng.integers(-1, 6, 40)
    table = dense_reference([fact, dim], [None, fk], [[0, 1, 2], [3, 4, 5, 6]], (40, 7)) * 2.0 + 1.0
    nm = on_backend(
        NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0, 1, 2], [3, 4, 5, 6]], (40, 7))
        * 2.0
        + 1.0,
        backend,
    )
    w, y, v, X = rng.random(40), rng.standard_normal(7), rng.random(40), rng.standard_normal((7, 2))
    w_, y_, v_, X_ = (on_backend(a, backend) for a in (w, y, v, X))
    assert_close(
        nm.crossprod(plan=plan), table.T @ table, what=f"crossprod {plan}", backend=backend
    )
    assert_close(
        nm.crossprod(w_, plan=plan),
        table.T @ (w[:, None] * table),
        what="crossprod w",
        backend=backend,
    )
    assert_close(
        nm.gramvec(y_, v_, 0.5, 2.0, y_, plan=plan),
        0.5 * table.T @ (v * (table @ y)) + 2.0 * y,
        what=f"gramvec {plan}",
        backend=backend,
    )
    assert_close(nm.matmul(X_, plan=plan), table @ X, what=f"matmul {plan}", backend=backend)


def test_unknown_plan_is_refused():
    from ilargi import NormalizedMatrix

    nm = NormalizedMatrix.from_parts([np.ones((3, 2))], [None], [[0, 1]], (3, 2))
    with pytest.raises(ValueError, match="plan must be"):
        nm.crossprod(plan="fast")


@property_settings(40)
@given(case=cases(), m=WIDTHS, seed=SEEDS)
def test_dot_writes_into_the_buffer(backend, case, m, seed):
    """nm.dot(X, out=buf) is nm @ X, written into buf and returned (a training loop's buffer)."""
    nm, expected = on_backend(case.build(), backend), case.expected
    x_host = dense_operand(seed, _operand_shape(expected.shape[1], m, "right"))
    x = on_backend(x_host, backend)
    buffer = on_backend(np.full((expected.shape[0],) + x.shape[1:], np.nan), backend)
    out = nm.dot(x, out=buffer)
    assert out is buffer
    assert_close(buffer, expected @ x_host, what="dot into a buffer", backend=backend)
    assert_close(nm.dot(x), expected @ x_host, what="dot", backend=backend)
    with pytest.raises(ValueError, match="out must be"):
        nm.dot(x, out=on_backend(np.empty((expected.shape[0] + 1,) + x.shape[1:]), backend))
    case.scenario.assert_inputs_untouched()


@property_settings(20)
@given(scenario=scenarios(), seed=SEEDS)
def test_float32_sources(backend, scenario, seed):
    """All-float32 sources stay float32 through products; results within 1e-4 of the float64 table."""
    from ilargi import NormalizedMatrix

    sources = [s.astype(np.float32) for s in scenario.sources]
    nm = on_backend(
        NormalizedMatrix.from_parts(sources, scenario.rows, scenario.cols, scenario.shape), backend
    )
    expected = dense_reference(sources, scenario.rows, scenario.cols, scenario.shape)
    assert nm.dtype == np.float32
    rows, cols = expected.shape
    x, y = dense_operand(seed, (cols, 2), np.float32), dense_operand(seed + 1, (rows,), np.float32)
    x_, y_ = on_backend(x, backend), on_backend(y, backend)
    product = nm @ x_
    assert product.dtype == np.float32
    assert_close(product, expected @ x, rtol=1e-4, what="float32 nm @ X", backend=backend)
    assert_close(nm.T @ y_, expected.T @ y, rtol=1e-4, what="float32 nm.T @ y", backend=backend)
    assert_close(
        nm.gramvec(x_[:, 0], v=y_),
        expected.T @ (y * (expected @ x[:, 0])),
        rtol=1e-4,
        what="float32 gramvec",
        backend=backend,
    )
    assert_close(
        nm.sum(axis=0), expected.sum(axis=0), rtol=1e-4, what="float32 colSums", backend=backend
    )
    assert_close(
        nm.crossprod(), expected.T @ expected, rtol=1e-4, what="float32 crossprod", backend=backend
    )


def test_operators_on_a_wide_star(backend):
    """The star the GPU's stacked passes are checked on (every kernel branch: wide fact table, long
    rows of Iᵀ, cuBLAS-sized dense part, two parts sharing one indicator), with affine state."""
    cpu, T0 = wide_star(40, np.float64)
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 2.0, T0.shape[1]), rng.uniform(-1, 1, T0.shape[1])
    nm, T = on_backend(cpu * a + b, backend), T0 * a + b
    n, d = T.shape
    x, X3 = rng.standard_normal(d), rng.standard_normal((d, 3))
    y, Y3, v = rng.standard_normal(n), rng.standard_normal((n, 3)), rng.random(n)
    x_, X3_, y_, Y3_, v_ = (on_backend(z, backend) for z in (x, X3, y, Y3, v))
    checks = [
        (nm @ x_, T @ x, "T x"),
        (nm @ X3_, T @ X3, "T X"),
        (y_ @ nm, y @ T, "y T"),
        (nm.T @ Y3_, T.T @ Y3, "T^T Y"),
        (nm.sum(axis=0), T.sum(axis=0), "colSums"),
        (nm.sum(axis=1), T.sum(axis=1), "rowSums"),
        (nm.crossprod(), T.T @ T, "crossprod"),
        (nm.crossprod(v_), T.T @ (v[:, None] * T), "crossprod(w)"),
        (nm.gramvec(x_, v=v_, alpha=0.5), 0.5 * T.T @ (v * (T @ x)), "gramvec"),
    ]
    for result, reference, what in checks:
        assert_close(result, reference, what=what, backend=backend)


def test_dimension_source_of_no_rows():
    """A dimension no target row takes, stored with no rows (a partition of a left join whose keys
    all miss, compacted): every reduction along either axis is the materialized one."""
    from ilargi import NormalizedMatrix
    from ilargi.metadata import Indicator, Part

    rng = np.random.default_rng(5)
    fact = rng.uniform(-1, 1, (7, 2))
    # from_parts refuses an empty source; the Dask partitions build theirs as trusted parts
    nm = NormalizedMatrix.from_trusted_parts(
        [
            Part("fact", fact, Indicator(None, 7), np.array([0, 1])),
            Part("dim", np.zeros((0, 3)), Indicator(np.full(7, -1), 0), np.array([2, 3, 4])),
        ],
        (7, 5),
    )
    dense = np.hstack([fact, np.zeros((7, 3))])
    for view, table in ((nm, dense), (nm * 2.0 + 1.0, dense * 2.0 + 1.0)):
        for name in ("sum", "mean", "var", "min", "max"):
            for axis in (0, 1):
                assert_close(
                    getattr(view, name)(axis=axis),
                    getattr(table, name)(axis=axis),
                    what=f"{name} axis={axis}",
                )
        assert_close(view.crossprod(), table.T @ table, what="crossprod")
