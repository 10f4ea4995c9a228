"""The compiled kernels (ilargi.backend.compiled) against NumPy references.

Every kernel is checked to 1e-12 relative to the largest reference value (float64), on random
stars with absent rows, a dense and a CSR fact block and sample weights; both segment-sum routes
(block partials, buckets) are forced; results are bit-identical at a fixed thread count and agree
across thread counts.
"""

import os

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import compiled, cpu, links, threads
from ilargi.metadata.indicator import Indicator

N = 3001  # not a multiple of the thread count, shorter than a chunk (see test_passes_over_many_chunks)


def close(actual, expected, rtol=1e-12):
    expected = np.asarray(expected, dtype=np.float64)
    scale = max(float(np.abs(expected).max()) if expected.size else 0.0, 1.0)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale)


def take(Z, rows):
    """Reference gather: Z[rows], 0 where rows = -1."""
    out = np.take(Z, np.maximum(rows, 0), axis=0).astype(np.float64)
    out[rows < 0] = 0
    return out


def segment(Y, rows, n_out):
    """Reference segment-sum with np.add.at (slow, obviously right)."""
    out = np.zeros((n_out + 1,) + Y.shape[1:])
    np.add.at(out, np.where(rows < 0, n_out, rows), Y)
    return out[:n_out]


@pytest.fixture(params=["partials", "buckets"])
def route(request, monkeypatch):
    """Both segment-sum routes: block partials, or the CSR of Iᵀ (forced by the ratio)."""
    monkeypatch.setattr(compiled, "PARTIALS_RATIO", 1e9 if request.param == "partials" else 0.0)
    with threads.threads(min(2, threads.max_num_threads())):
        yield request.param


class Star:
    """A random star: two tables (one with absent rows), dense + CSR fact blocks, weights."""

    def __init__(self, seed=0, n=N, absent=True, d_fact=4, one_hot=False, density=0.3):
        rng = self.rng = np.random.default_rng(seed)
        self.n = n
        self.sizes = (37, 5)
        self.rows = [rng.integers(-1 if absent else 0, 37, n), rng.integers(0, 5, n)]
        self.indicators = [Indicator(r, s) for r, s in zip(self.rows, self.sizes)]
        self.F = rng.standard_normal((n, d_fact))
        if one_hot:  # categorical columns of these levels (default 2 and 4): indices only
            levels = (2, 4) if one_hot is True else one_hot
            offsets = np.cumsum((0,) + tuple(levels))
            codes = np.stack(
                [offsets[j] + rng.integers(0, size, n) for j, size in enumerate(levels)], axis=1
            )
            k = len(levels)
            self.Fc = sp.csr_array(
                (np.ones(k * n), codes.ravel(), np.arange(0, k * n + 1, k)),
                shape=(n, int(offsets[-1])),
            )
        else:
            self.Fc = sp.random(n, 6, density=density, format="csr", random_state=seed)
        self.plan = compiled.PassPlan(self.indicators, fact=self.F, fact_csr=self.Fc)
        self.sw = rng.random(n) + 0.5

    def U(self, m=None):
        U = self.plan.buffer(m)
        for g, size in enumerate(self.sizes):
            self.plan.table(U, g)[...] = self.rng.standard_normal(
                (size,) if m is None else (size, m)
            )
        return U

    def scores(self, U, xf, xc, c):
        z = sum(take(self.plan.table(U, g), r) for g, r in enumerate(self.rows))
        return z + self.F @ xf + self.Fc @ xc + c

    def backward(self, r):
        tables = np.concatenate([segment(r, rows, s) for rows, s in zip(self.rows, self.sizes)])
        return tables, self.F.T @ r, self.Fc.T @ r, r.sum(axis=0)


# ---------------------------------------------------------------------------------------------
# Gathers and segment sums, one indicator (cpu.py's signatures).


@pytest.mark.parametrize("shape", [(), (1,), (3,)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gather_and_gather_add(shape, dtype):
    rng = np.random.default_rng(1)
    for rows in (rng.integers(-1, 40, N), rng.integers(0, 40, N)):
        ind = Indicator(rows, 40)
        Z = rng.standard_normal((40,) + shape).astype(dtype)
        got = compiled.gather(Z, ind)
        assert got.dtype == dtype and got.shape == (N,) + shape
        close(got, take(Z, rows))
        out = rng.standard_normal((N,) + shape).astype(dtype)
        expected = out + take(Z, rows)
        assert compiled.gather_add(out, Z, ind) is out
        close(out, expected, rtol=1e-6 if dtype == np.float32 else 1e-12)


def test_gather_identity_and_fortran_out():
    rng = np.random.default_rng(2)
    Z = rng.standard_normal((N, 3))
    ind = Indicator(None, N)
    assert compiled.gather(Z, ind) is Z
    assert compiled.gather_add(None, Z, ind) is Z
    rows = rng.integers(0, 9, N)
    small = rng.standard_normal((9, 3))
    out = np.asfortranarray(np.ones((N, 3)))
    compiled.gather_add(out, small, Indicator(rows, 9))
    close(out, 1 + small[rows])


@pytest.mark.parametrize("shape", [(), (1,), (3,)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_segment_sum(route, shape, dtype):
    rng = np.random.default_rng(3)
    rows = rng.integers(-1, 50, N)
    Y = rng.standard_normal((N,) + shape).astype(dtype)
    got = compiled.segment_sum(Y, Indicator(rows, 50))
    assert got.dtype == np.float64 and got.shape == (50,) + shape
    close(got, segment(Y.astype(np.float64), rows, 50))


def test_segment_sum_empty_trailing_buckets(route):
    rows = np.zeros(N, dtype=np.intp)  # every bucket but the first is empty
    close(
        compiled.segment_sum(np.ones((N, 2)), Indicator(rows, 20)),
        segment(np.ones((N, 2)), rows, 20),
    )


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("identity", [False, True])
def test_pushed_sums(route, sparse, weighted, identity):
    rng = np.random.default_rng(4)
    n_source = N if identity else 60
    source = Indicator(None if identity else rng.integers(-1, 60, N), n_source)
    target = Indicator(rng.integers(-1, 45, N), 45)
    S = (
        sp.random(n_source, 7, density=0.4, format="csr", random_state=4)
        if sparse
        else rng.standard_normal((n_source, 2))
    )
    w = rng.random(N) if weighted else None
    close(compiled.pushed_sums(S, source, target, w), cpu.pushed_sums(S, source, target, w))


@pytest.mark.parametrize(
    "formats", [("dense", "dense"), ("dense", "csr"), ("csr", "dense"), ("csr", "csr")]
)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("identity", [False, True])
def test_direct_cross(nthreads, formats, weighted, identity):
    """Σ_i w_i·S_p[rows_p[i]]ᵀ·S_q[rows_q[i]] over row blocks equals the gathered tables' product;
    a row where either table is absent (-1) adds nothing."""
    rng = np.random.default_rng(5)
    n = 40_000  # over two blocks of compiled.CROSS_ROWS
    n_p, n_q = (n if identity else 700), 300

    def source(fmt, n_rows, d):
        return (
            sp.random(n_rows, d, density=0.4, format="csr", random_state=5)
            if fmt == "csr"
            else rng.standard_normal((n_rows, d))
        )

    S_p, S_q = source(formats[0], n_p, 5), source(formats[1], n_q, 3)
    rows_p = None if identity else rng.integers(-1, n_p, n)
    rows_q = rng.integers(-1, n_q, n)
    w = rng.standard_normal(n) if weighted else None
    dense = [S.toarray() if sp.issparse(S) else S for S in (S_p, S_q)]
    T_p = dense[0] if identity else take(dense[0], rows_p)
    T_q = take(dense[1], rows_q)
    expected = T_p.T @ (T_q if w is None else w[:, None] * T_q)
    close(compiled.direct_cross(S_p, rows_p, S_q, rows_q, w), expected)
    empty = compiled.direct_cross(S_p, np.empty(0, dtype=np.intp), S_q, np.empty(0, dtype=np.intp))
    close(empty, np.zeros((5, 3)))


# ---------------------------------------------------------------------------------------------
# Dense products of one source: S·X, Sᵀ·Y, Sᵀ·diag(c)·S and crossprod's fact pass.


@pytest.fixture(params=[1, 2])
def nthreads(request):
    if request.param > threads.max_num_threads():
        pytest.skip("needs 2 Numba threads")
    with threads.threads(request.param):
        yield request.param


SHAPES = [(N, 20), (N, 7), (12_000, 3), (N, 80), (N, 1)]  # narrow, ragged tiles, wide


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m", [None, 1, 3, 8, 16, 17])
def test_product(nthreads, shape, dtype, m):
    rng = np.random.default_rng(20)
    S = rng.standard_normal(shape).astype(dtype)
    X = rng.standard_normal(shape[1:] if m is None else (shape[1], m))
    got = compiled.product(S, X)
    assert got.shape == (shape[0],) + X.shape[1:] and got.dtype == np.float64
    close(got, S.astype(np.float64) @ X)
    out = np.full(got.shape, np.nan)
    assert compiled.product(S, X, out=out) is out
    close(out, S.astype(np.float64) @ X)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_column_sums(nthreads, shape, dtype):
    S = np.random.default_rng(21).standard_normal(shape).astype(dtype)
    got = compiled.column_sums(S)
    assert got.shape == (shape[1],)
    close(got, S.astype(np.float64).sum(axis=0), rtol=1e-12 if dtype == np.float64 else 1e-5)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("m", [None, 1, 3, 8, 20, 129])
def test_transposed_product(nthreads, shape, dtype, m):
    rng = np.random.default_rng(21)
    S = rng.standard_normal(shape).astype(dtype)
    Y = rng.standard_normal(shape[:1] if m is None else (shape[0], m)).astype(dtype)
    got = compiled.transposed_product(S, Y)
    assert got.shape == (shape[1],) + Y.shape[1:]
    close(
        got,
        S.astype(np.float64).T @ Y.astype(np.float64),
        rtol=1e-12 if dtype == np.float64 else 1e-5,
    )


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
def test_dense_square_excess(nthreads, shape, dtype, weighted):
    """Σ (a·s + b)² − b² of a tall dense source, per row or per column with rows counted
    weights times: cpu's chunked NumPy to rounding, float32 sources read as float64."""
    rng = np.random.default_rng(23)
    S = rng.standard_normal(shape).astype(dtype)
    scale, shift = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    weights = rng.integers(0, 4, shape[0]) if weighted else None  # counts, as the rewriter's
    got = compiled.square_excess(S, scale, shift, weights)
    assert got.shape == (shape[1] if weighted else shape[0],) and got.dtype == np.float64
    v = S.astype(np.float64) * scale
    excess = v * (v + 2 * shift)
    close(got, weights @ excess if weighted else excess.sum(axis=1), rtol=1e-12)
    close(got, cpu.square_excess(S, scale, shift, weights), rtol=1e-12)


def test_products_of_other_sources_go_to_cpu():
    """Sparse, Fortran-ordered, wide or small sources (and a sparse Y) take cpu's route."""
    rng = np.random.default_rng(22)
    cases = [
        sp.random(N, 9, density=0.3, format="csr", random_state=22),
        np.asfortranarray(rng.standard_normal((N, 9))),
        rng.standard_normal((N, 130)),
        rng.standard_normal((40, 9)),
    ]
    for S in cases:
        dense = S.toarray() if sp.issparse(S) else S
        Y = rng.standard_normal((S.shape[0], 2))
        close(compiled.transposed_product(S, Y), dense.T @ Y)
        close(compiled.transposed_product(dense, sp.csr_array(Y)), dense.T @ Y)
        close(compiled.product(S, np.ones(S.shape[1])), dense.sum(axis=1))
        close(
            compiled.weighted_gram(S, np.arange(S.shape[0]) % 3 - 1.0),
            dense.T @ ((np.arange(S.shape[0]) % 3 - 1.0)[:, None] * dense),
        )


@pytest.mark.parametrize(
    "m, route", [(None, "compiled"), (1, "compiled"), (8, "compiled"), (9, "cpu")]
)
def test_transposed_product_takes_operands_up_to_eight_columns(monkeypatch, m, route):
    """Sᵀ·Y is compiled for a Y of at most TRANSPOSED_WIDE columns, and BLAS's beyond."""
    assert compiled.TRANSPOSED_WIDE == 8
    calls = []
    kernel = compiled.products.transposed_product_kernel
    monkeypatch.setattr(
        compiled.products,
        "transposed_product_kernel",
        lambda *args: calls.append(args) or kernel(*args),
    )
    rng = np.random.default_rng(23)
    S = rng.standard_normal((N, 20))
    Y = rng.standard_normal((N,) if m is None else (N, m))
    close(compiled.transposed_product(S, Y), S.T @ Y)
    assert bool(calls) == (route == "compiled")


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
@pytest.mark.parametrize("op", ["product", "transposed_product"])
def test_wide_blas_products_run_in_row_blocks_at_two_threads(monkeypatch, op):
    """S·X and Sᵀ·Y too wide for the compiled products: BLAS at one thread in row blocks, one
    per thread on the compiled kernels' threads (a 1-D x stays compiled); the same bits at a
    fixed thread count, BLAS's result to rounding; one NumPy call at one thread, off the main
    thread (BLAS is not held there) and for mixed dtypes."""
    import threading

    monkeypatch.setattr(compiled, "BLAS_SPLIT", 1)  # N rows: split at any width
    blocks = []
    for name, nb_of in (
        ("blas_product_kernel", lambda S, X, out, nb: nb),
        ("blas_transposed_kernel", lambda S, Y, parts: parts.shape[0]),
    ):
        kernel = getattr(compiled.products, name)
        monkeypatch.setattr(
            compiled.products,
            name,
            lambda *args, kernel=kernel, nb_of=nb_of: blocks.append(nb_of(*args)) or kernel(*args),
        )
    rng = np.random.default_rng(24)
    S = rng.standard_normal((N, 20))
    X = rng.standard_normal((20, 16) if op == "product" else (N, 16))
    fn = getattr(compiled, op)
    expected = S @ X if op == "product" else S.T @ X
    with threads.threads(2):
        got, again = fn(S, X), fn(S, X)
        assert blocks == [2, 2] and np.array_equal(got, again)
        close(got, expected)
        if op == "product":
            out = np.full(expected.shape, np.nan)
            assert fn(S, X, out=out) is out and np.array_equal(out, got)
        close(fn(S, X[:, 0]), expected[:, 0])
        close(fn(S.astype(np.float32), X), expected, rtol=1e-5)  # mixed dtypes: one NumPy call
        seen = []
        worker = threading.Thread(target=lambda: seen.append(fn(S, X)))
        worker.start()
        worker.join()
        close(seen[0], expected)
    with threads.threads(1):
        close(fn(S, X), expected)
    assert blocks == [2, 2] + ([2] if op == "product" else [])


@pytest.mark.parametrize("shape", SHAPES + [(N, 128)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weights", ["none", "positive", "signed"])
def test_weighted_gram(nthreads, shape, dtype, weights):
    rng = np.random.default_rng(23)
    S = rng.standard_normal(shape).astype(dtype)
    c = {"none": None, "positive": rng.random(shape[0]), "signed": rng.standard_normal(shape[0])}[
        weights
    ]
    got = compiled.weighted_gram(S, c)
    S64 = S.astype(np.float64)
    exact = dtype == np.float64 or S.size >= compiled.SMALL  # small float32: BLAS in float32
    close(got, S64.T @ (S64 if c is None else c[:, None] * S64), rtol=1e-12 if exact else 1e-5)
    if S.size >= compiled.SMALL:
        assert np.array_equal(got, got.T)  # the upper triangle, mirrored


@pytest.fixture(params=["blocks", "owned"])
def fact_route(request, monkeypatch):
    """Both routes of the fact pass: pushes into block partials, or threads owning output rows
    (forced by the partials' ratio; at one thread the blocks route runs)."""
    monkeypatch.setattr(compiled, "PARTIALS_RATIO", 1e9 if request.param == "blocks" else 0.0)
    return request.param


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gram_pushes(nthreads, fact_route, weighted, dtype):
    rng = np.random.default_rng(24)
    S = rng.standard_normal((N, 13)).astype(dtype)
    targets = [
        Indicator(rng.integers(-1, 37, N), 37),
        Indicator(rng.integers(0, 5, N), 5),
        Indicator(np.full(N, -1), 3),
    ]  # absent rows; a table no row takes
    w = rng.standard_normal(N) if weighted else None
    gram, sums = compiled.gram_pushes(S, targets, w)
    close(gram, cpu.weighted_gram(S.astype(np.float64), w))
    assert np.array_equal(gram, gram.T)
    identity = Indicator(None, N)
    for ind, got in zip(targets, sums):
        assert got.shape == (ind.n_source, 13)
        close(got, cpu.pushed_sums(S.astype(np.float64), identity, ind, w))
    assert compiled.gram_pushes(S[:10], targets[:1]) is None  # small: the generic route


# ---------------------------------------------------------------------------------------------
# The plan: stacked gathers, transposed products, fused passes.


@pytest.mark.parametrize("density", [0.3, 0.7])
@pytest.mark.parametrize("m", [None, 3])
def test_plan_scores_and_transposed(route, m, density):
    """Both routes of a CSR fact block: entry by entry (1.8 entries a row on average), row by row
    (4.2)."""
    star = Star(5, density=density)
    assert (star.plan.fact[4].size > 0) == (density < 0.5)
    U = star.U(m)
    shape = () if m is None else (m,)
    xf, xc = star.rng.standard_normal((4,) + shape), star.rng.standard_normal((6,) + shape)
    c = star.rng.standard_normal(shape) if m else 0.7
    expected = star.scores(U, xf, xc, c)
    close(star.plan.scores(U, xf, xc, c), expected)
    out = np.ones((N,) + shape)
    star.plan.scores(U, xf, xc, c, out=out, accumulate=True)
    close(out, 1 + expected)
    gathered = star.plan.scores(U)  # the stacked gather-add alone: fact blocks skipped
    close(gathered, star.scores(U, np.zeros((4,) + shape), np.zeros((6,) + shape), 0.0))
    Y = star.rng.standard_normal((N,) + shape)
    got = star.plan.transposed(Y)
    for a, b in zip((got.tables, got.fact, got.csr, got.total), star.backward(Y)):
        close(a, b)
    assert star.plan.transposed(Y, fact=False).fact is None


@pytest.mark.parametrize("m", [None, 3])
def test_one_hot_csr_fact_block(m):
    """A CSR fact block of k ones per row is read as indices only: scores, transposed products
    and a fused logistic pass equal the general CSR's."""
    star = Star(8, one_hot=True)
    assert star.plan.fact[1].tolist() == [2] and star.plan.fact[3].size == 0
    U = star.U(m)
    shape = () if m is None else (m,)
    xf, xc = star.rng.standard_normal((4,) + shape), star.rng.standard_normal((6,) + shape)
    close(star.plan.scores(U, xf, xc, 0.0), star.scores(U, xf, xc, 0.0))
    Y = star.rng.standard_normal((N,) + shape)
    got = star.plan.transposed(Y)
    for a, b in zip((got.tables, got.fact, got.csr, got.total), star.backward(Y)):
        close(a, b)
    if m is None:
        y = (star.rng.random(N) < 0.5).astype(float)
        general = compiled.PassPlan(star.indicators, fact=star.F, fact_csr=star.Fc)
        general.fact = (
            general.fact[0],
            star.Fc.indptr.astype(np.int64),
            general.fact[2],
            star.Fc.data,
            general.fact[4],
        )  # the same block through the general loops
        expected, got = (
            compiled.logistic_pass(plan, U, y, star.sw, xf, xc) for plan in (general, star.plan)
        )
        close(got.loss, expected.loss)
        close(got.csr, expected.csr)


@pytest.mark.parametrize("columns, density", [(1, 1.0), (6, 0.3), (6, 0.7), (3000, 0.002)])
def test_csr_fact_gradient_of_few_columns(nthreads, columns, density):
    """F_cᵀ·r of a CSR fact block (few columns: 4 local copies of the gradient, summed at the end;
    wide: into the block partial) in the transposed and the fused logistic passes: one entry a row
    (Hamlet Walmart's block) and short rows are read entry by entry, longer rows row by row."""
    rng = np.random.default_rng(11)
    Fc = sp.random(N, columns, density=density, format="csr", random_state=11)
    plan = compiled.PassPlan(fact_csr=Fc)
    assert (plan.fact[4].size > 0) == (Fc.nnz <= compiled.ENTRY_BY_ENTRY * N)
    r = rng.standard_normal(N)
    close(plan.transposed(r).csr, Fc.T @ r)
    y = (rng.random(N) < 0.5).astype(float)
    xc = rng.standard_normal(columns)
    got = compiled.logistic_pass(plan, plan.buffer(), y, None, None, xc)
    close(got.csr, Fc.T @ (1.0 / (1.0 + np.exp(-(Fc @ xc))) - y))


@pytest.mark.parametrize("levels", [(3,), (2, 4), (3, 2, 7), (2, 3, 4, 5, 2), (1500, 1600)])
def test_one_hot_transposed_of_any_width(nthreads, levels):
    """F_cᵀ·r of a one-hot block (1-5 ones per row; few columns: interleaved copies of the
    gradient, wide ones: one copy) equals the general CSR's, in the transposed and the fused
    gramvec passes."""
    star = Star(9, one_hot=levels)
    assert star.plan.fact[1].tolist() == [len(levels)]
    r = star.rng.standard_normal(N)
    close(star.plan.transposed(r).csr, star.Fc.T @ r)
    U, xf = star.U(), star.rng.standard_normal(4)
    xc = star.rng.standard_normal(star.Fc.shape[1])
    v = star.rng.random(N)
    w = v * star.scores(U, xf, xc, 0.0)
    got = compiled.gramvec_pass(star.plan, U, v, xf, xc, 0.0)
    close(got.csr, star.Fc.T @ w)
    close(got.total, w.sum())


@pytest.mark.parametrize("one_hot", [False, True, (2, 3, 4, 5, 2, 3, 2)])
def test_passes_over_many_chunks(nthreads, one_hot):
    """Passes whose blocks span several steps (scores and fused passes: CHUNK rows of a 1-D
    residual, CHUNK_WIDE of a 2-D one; the transposed pass: TRANSPOSED_STEP), lane sums carried
    across them, equal the references; a one-hot block of 2 or 7 ones a row (the latter: four
    running sums over each step's entries and a remainder)."""
    from ilargi.backend.compiled import kernels

    n = 2 * kernels.TRANSPOSED_STEP + 3 * kernels.CHUNK + 17
    star = Star(11, n=n, one_hot=one_hot)
    d_c = star.Fc.shape[1]
    for m in (None, 3):
        shape = () if m is None else (m,)
        U = star.U(m)
        xf, xc = star.rng.standard_normal((4,) + shape), star.rng.standard_normal((d_c,) + shape)
        close(star.plan.scores(U, xf, xc, 0.3), star.scores(U, xf, xc, 0.3))
        Y = star.rng.standard_normal((n,) + shape)
        got = star.plan.transposed(Y)
        for a, b in zip((got.tables, got.fact, got.csr, got.total), star.backward(Y)):
            close(a, b)
    U, xf, xc = star.U(), star.rng.standard_normal(4), star.rng.standard_normal(d_c)
    y = (star.rng.random(n) < 0.4).astype(float)
    got = compiled.logistic_pass(star.plan, U, y, None, xf, xc, -0.2)
    loss, r = links.BinaryLink(y, None)(star.scores(U, xf, xc, -0.2))
    close(got.loss, loss)
    for a, b in zip((got.tables, got.fact, got.csr, got.total), star.backward(r)):
        close(a, b)


def test_csr_transposed_product_checks_its_operand():
    """A y of the wrong length is SciPy's error, not a read past its end; a complex y keeps its
    imaginary part (SciPy's route)."""
    S = sp.random(100, 7, density=0.3, format="csr", random_state=4)
    with pytest.raises(ValueError):
        compiled.transposed_product(S, np.ones(99))
    y = np.arange(100) * (1 + 1j)
    close(compiled.transposed_product(S, y).imag, S.T @ y.imag)


@pytest.mark.parametrize("shape", [(200_003, 9), (70_000, 40), (300, 90_000)])
@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_csr_product_and_square_excess(nthreads, shape, index):
    """A float64 CSR's S·x and per-row square excess, compiled (rows in parallel, each in entry
    order; one thread for a small CSR), are SciPy's and cpu's bits, empty rows included; a wrong x
    keeps the cpu route (SciPy's error)."""
    S = sp.random_array(shape, density=0.05, format="csr", random_state=5)
    S.indices, S.indptr = S.indices.astype(index), S.indptr.astype(index)
    S = sp.csr_array((S.data, S.indices, S.indptr), shape=shape)
    S.data[S.indptr[1] : S.indptr[3]] = (
        0.0  # explicit zeros; rows with none stored come from density
    )
    rng = np.random.default_rng(5)
    x, scale, shift = (rng.standard_normal(shape[1]) for _ in range(3))
    assert S.nnz >= compiled.SMALL_CSR
    assert np.array_equal(compiled.product(S, x), S @ x)
    out = np.full(shape[0], np.nan)
    assert compiled.product(S, x, out=out) is out and np.array_equal(out, S @ x)
    assert np.array_equal(
        compiled.square_excess(S, scale, shift), cpu.square_excess(S, scale, shift)
    )
    with pytest.raises(ValueError):
        compiled.product(S, np.ones(shape[1] + 1))
    small = sp.random_array((50, 7), density=0.3, format="csr", random_state=6)
    assert small.nnz < compiled.SMALL_CSR
    assert np.array_equal(compiled.product(small, x[:7]), small @ x[:7])
    assert np.array_equal(
        compiled.square_excess(small, scale[:7], shift[:7]),
        cpu.square_excess(small, scale[:7], shift[:7]),
    )


@pytest.mark.parametrize("shape", [(N, 9), (70_000, 40), (70_000, 1), (20, 90_000), (0, 5)])
@pytest.mark.parametrize("weighted", [False, True])
def test_csr_column_sums_and_transposed_product(nthreads, shape, weighted):
    """A float64 CSR's column sums and Sᵀ·y compiled (one thread for a small one or a wide one,
    row blocks for a large one) equal SciPy's; other dtypes keep the cpu route."""
    S = (
        sp.random(*shape, density=0.05, format="csr", random_state=3)
        if shape[0]
        else sp.csr_array(shape)
    )
    y = np.random.default_rng(3).standard_normal(shape[0])
    got = compiled.transposed_product(S, y) if weighted else compiled.column_sums(S)
    assert got.shape == (shape[1],) and got.dtype == np.float64
    close(got, S.T @ y if weighted else np.asarray(S.sum(axis=0)).ravel())
    S32 = S.astype(np.float32)
    close(compiled.column_sums(S32), np.asarray(S.sum(axis=0)).ravel(), rtol=1e-5)


@pytest.mark.parametrize("weighted", [False, True])
def test_logistic(route, weighted):
    star = Star(6)
    U = star.U()
    xf, xc, b = star.rng.standard_normal(4), star.rng.standard_normal(6), -0.4
    y = (star.rng.random(N) < 0.3).astype(float)
    sw = star.sw if weighted else None
    got = compiled.logistic_pass(star.plan, U, y, sw, xf, xc, b)
    z = star.scores(U, xf, xc, b)
    loss, r = links.BinaryLink(y, sw)(z.copy())
    close(got.loss, loss)
    for a, e in zip((got.tables, got.fact, got.csr, got.total), star.backward(r)):
        close(a, e)


def test_logistic_float32_fact_block():
    """A float32 fact block (sources all float32) is read as is and accumulated in float64."""
    star = Star(17)
    F32 = star.F.astype(np.float32)
    plan = compiled.PassPlan(star.indicators, fact=F32, fact_csr=star.Fc)
    U = star.U()
    xf, y = star.rng.standard_normal(4), (star.rng.random(N) < 0.5).astype(float)
    got = compiled.logistic_pass(plan, U, y, None, xf)
    z = sum(take(plan.table(U, g), r) for g, r in enumerate(star.rows)) + F32.astype(float) @ xf
    loss, r = links.BinaryLink(y, None)(z.copy())
    close(got.loss, loss)
    close(got.fact, F32.astype(float).T @ r)


def test_logistic_extreme_scores():
    """log(1 + e^z) and σ(z) stay finite and exact far from 0 (the stable forms)."""
    star = Star(7, absent=False)
    U = star.plan.buffer()
    star.plan.table(U, 0)[...] = np.linspace(-800, 800, 37)
    y = (star.rng.random(N) < 0.5).astype(float)
    got = compiled.logistic_pass(star.plan, U, y)
    z = star.scores(U, np.zeros(4), np.zeros(6), 0.0)
    loss, r = links.BinaryLink(y, None)(z.copy())
    assert np.isfinite(got.loss)
    close(got.loss, loss)
    close(got.tables, star.backward(r)[0])


@pytest.mark.parametrize("weighted", [False, True])
def test_softmax(route, weighted):
    star = Star(8)
    k = 4
    U = star.U(k)
    xf, xc, b = (
        star.rng.standard_normal((4, k)),
        star.rng.standard_normal((6, k)),
        star.rng.standard_normal(k),
    )
    labels = star.rng.integers(0, k, N)
    sw = star.sw if weighted else None
    got = compiled.softmax_pass(star.plan, U, labels, sw, xf, xc, b)
    loss, R = links.MultinomialLink(labels, k, sw)(star.scores(U, xf, xc, b))
    close(got.loss, loss)
    for a, e in zip((got.tables, got.fact, got.csr, got.total), star.backward(R)):
        close(a, e)


@pytest.mark.parametrize("m", [None, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_gramvec(route, m, weighted):
    star = Star(9)
    U = star.U(m)
    shape = () if m is None else (m,)
    xf, xc = star.rng.standard_normal((4,) + shape), star.rng.standard_normal((6,) + shape)
    v = star.sw if weighted else None
    got = compiled.gramvec_pass(star.plan, U, v, xf, xc, 0.25)
    q = star.scores(U, xf, xc, 0.25)
    w = q if v is None else (v * q.T).T
    assert got.loss is None
    for a, e in zip((got.tables, got.fact, got.csr, got.total), star.backward(w)):
        close(a, e)


def test_kmeans_matches_lloyd_assignment(route):
    """Labels, distances and cluster sums as models/kmeans.py computes them on the joined table,
    duplicate centers included (ties go to the first center within rounding)."""
    star = Star(10, absent=False)
    plan, rng = star.plan, star.rng
    sources = [rng.standard_normal((37, 2)), rng.standard_normal((5, 3))]
    X = np.hstack([star.F, star.Fc.toarray()] + [s[r] for s, r in zip(sources, star.rows)])
    k = 5
    centers = X[rng.choice(N, k, replace=False)]
    centers[3] = centers[1]  # an exact tie
    U = plan.buffer(k)
    plan.table(U, 0)[...] = sources[0] @ centers[:, 10:12].T
    plan.table(U, 1)[...] = sources[1] @ centers[:, 12:15].T
    x_sq = np.einsum("ij,ij->i", X, X)
    got = compiled.kmeans_pass(
        plan,
        U,
        x_sq,
        (centers**2).sum(axis=1),
        links.rounding(centers),
        centers[:, :4].T,
        centers[:, 4:10].T,
    )
    c_sq, rounding = (centers**2).sum(axis=1), links.rounding(centers)
    labels, closest = links.nearest(
        links.distances(X @ centers.T, x_sq, c_sq, rounding), x_sq, c_sq, rounding
    )
    assert (got.labels == labels).mean() > 0.999  # scores round differently in a few last bits
    same = got.labels == labels
    close(got.closest[same], closest[same], rtol=1e-10)
    assert not (got.labels == 3).any()
    onehot = (got.labels[:, None] == np.arange(k)).astype(float)
    close(got.counts, onehot.sum(axis=0))
    close(got.inertia, got.closest.sum())
    for a, e in zip((got.tables, got.fact, got.csr), star.backward(onehot)[:3]):
        close(a, e)


# ---------------------------------------------------------------------------------------------
# Determinism and threads.


def _all_results(star, U, U3, y):
    P = compiled.logistic_pass(star.plan, U, y, None, np.ones(4), np.ones(6), 0.1)
    S = compiled.softmax_pass(star.plan, U3, (y * 2).astype(int), star.sw)
    G = compiled.gramvec_pass(star.plan, U3, star.sw, np.ones((4, 3)), np.ones((6, 3)))
    wide = np.repeat(star.F, 5, axis=1)  # 20 columns: the compiled dense products take it
    gram, pushed = compiled.gram_pushes(wide, star.indicators, star.sw)
    return [
        P.loss,
        P.tables,
        P.fact,
        P.csr,
        P.total,
        S.loss,
        S.tables,
        G.tables,
        G.fact,
        compiled.segment_sum(star.F, star.indicators[0]),
        star.plan.transposed(star.F[:, 0]).tables,
        compiled.product(wide, np.ones((20, 3))),
        compiled.transposed_product(wide, star.F),
        compiled.weighted_gram(wide, star.sw),
        gram,
        *pushed,
    ]


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_deterministic_per_thread_count_and_close_across():
    star = Star(11)
    U, U3 = star.U(), star.U(3)
    y = (star.rng.random(N) < 0.5).astype(float)
    results = {}
    for k, label in ((1, "one"), (2, "two"), (2, "again")):
        with threads.threads(k):
            results[label] = _all_results(star, U, U3, y)
    for a, b in zip(results["two"], results["again"]):
        assert np.array_equal(a, b)  # bit-identical at a fixed thread count
    for a, b in zip(results["one"], results["two"]):
        close(a, b)


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_concurrent_calls_from_python_threads():
    """Several Python threads running kernels at once (joblib's threading backend) get the
    sequential results; the threading layer must allow it (omp/tbb, not workqueue)."""
    from concurrent.futures import ThreadPoolExecutor

    star = Star(12)
    U = star.U()
    y = (star.rng.random(N) < 0.5).astype(float)
    with threads.threads(2):
        expected = compiled.logistic_pass(star.plan, U, y)
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda _: compiled.logistic_pass(star.plan, U, y), range(8)))
    for g in got:
        assert g.loss == expected.loss and np.array_equal(g.tables, expected.tables)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_usable_false_in_a_child_forked_after_omp():
    from numba import threading_layer

    star = Star(13)
    compiled.logistic_pass(star.plan, star.U(), np.zeros(N))
    pid = os.fork()
    if pid == 0:  # the child must not launch a parallel kernel; it only reports
        expected = threading_layer() != "omp"
        os._exit(0 if compiled.usable() == expected else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert compiled.usable()


@pytest.mark.parametrize("d_fact", [1, 2, 3])
@pytest.mark.parametrize("m", [None, 2])
def test_narrow_fact_block(m, d_fact):
    """A fact block narrower than WIDE has loops of its own: one column, or 2-3 values per row
    read from the flat block (the last chunk of a block shorter than CHUNK included)."""
    star = Star(15, d_fact=d_fact)
    U = star.U(m)
    shape = () if m is None else (m,)
    xf, xc = star.rng.standard_normal((d_fact,) + shape), star.rng.standard_normal((6,) + shape)
    close(star.plan.scores(U, xf, xc), star.scores(U, xf, xc, 0.0))
    Y = star.rng.standard_normal((N,) + shape)
    close(star.plan.transposed(Y).fact, star.F.T @ Y)
    got = compiled.gramvec_pass(star.plan, U, star.sw, xf, xc)
    w = (star.sw * star.scores(U, xf, xc, 0.0).T).T
    close(got.fact, star.F.T @ w)


def test_snowflake_fold_around_a_pass():
    """A table c whose indicator factors through a host's (I_c = I_h·F, rules.folds) stays out of
    the plan: U_h += g(U_c, F) before the pass, B_c = s(B_h, F) after, as with c in the plan."""
    rng = np.random.default_rng(16)
    host_rows = rng.integers(-1, 40, N)
    factor = Indicator(rng.integers(-1, 6, 40), 6)  # each host row's coarse row (or none)
    coarse_rows = np.where(host_rows >= 0, factor.rows[np.maximum(host_rows, 0)], -1)
    host, coarse = Indicator(host_rows, 40), Indicator(coarse_rows, 6)
    U_h, U_c = rng.standard_normal(40), rng.standard_normal(6)
    y = (rng.random(N) < 0.5).astype(float)
    both = compiled.PassPlan([host, coarse])
    U = both.buffer()
    both.table(U, 0)[...], both.table(U, 1)[...] = U_h, U_c
    expected = compiled.logistic_pass(both, U, y)
    folded = compiled.PassPlan([host])
    V = folded.buffer()
    folded.table(V, 0)[...] = U_h
    compiled.gather_add(folded.table(V, 0), U_c, factor)
    got = compiled.logistic_pass(folded, V, y)
    close(got.loss, expected.loss)
    close(got.tables, expected.tables[:40])
    close(compiled.segment_sum(got.tables, factor), expected.tables[40:])


def test_plan_checks():
    star = Star(14)
    with pytest.raises(ValueError, match="identity"):
        compiled.PassPlan([Indicator(None, N)])
    with pytest.raises(ValueError, match="disagree"):
        compiled.PassPlan(star.indicators, fact=np.ones((N + 1, 2)))
    with pytest.raises(ValueError, match="rows"):
        star.plan.scores(np.zeros(5))
    only_fact = compiled.PassPlan(fact=star.F)
    close(only_fact.scores(only_fact.buffer(), np.ones(4)), star.F.sum(axis=1))


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_segment_sum_large_partials_reduced_in_parallel():
    """Partials over SERIAL_REDUCE values are reduced by all threads (output rows split)."""
    rng = np.random.default_rng(18)
    rows = rng.integers(-1, 70_000, 80_000)
    Y = rng.standard_normal((80_000, 2))
    with threads.threads(2):
        close(compiled.segment_sum(Y, Indicator(rows, 70_000)), segment(Y, rows, 70_000))


def test_the_backend_parameter_picks_the_cpu_kernels(backend):
    """The operator suite's "numpy" runs really use the NumPy kernels, "cpu" the compiled ones."""
    from ilargi.backend import backend_of

    expected = {"cpu": "ilargi.backend.compiled", "numpy": "ilargi.backend.cpu"}
    if backend in expected:
        assert backend_of(np.zeros(1)).__name__ == expected[backend]


@pytest.mark.parametrize("weighted", [False, True])
def test_one_hot_gram_and_column_sums_over_row_chunks(monkeypatch, weighted):
    """The NumPy kernels count one-hot rows a chunk at a time (no n-long temporaries): chunk
    edges, a row of another width in a later chunk, and CSR column sums without a ones vector."""
    monkeypatch.setattr(cpu, "CHUNK_ROWS", 7)
    rng = np.random.default_rng(3)
    n, k = 40, 3
    columns = np.stack(
        [rng.integers(0, 2, n), 2 + rng.integers(0, 3, n), 5 + rng.integers(0, 4, n)], 1
    )
    S = sp.csr_array((np.ones(n * k), columns.ravel(), np.arange(0, n * k + 1, k)), shape=(n, 9))
    c = rng.uniform(0.5, 2.0, n) if weighted else None
    dense = S.toarray()
    expected = dense.T @ (dense if c is None else c[:, None] * dense)
    close(cpu.weighted_gram(S, c), expected)
    assert cpu._entries_per_row(S) == k
    ragged = dense.copy()  # rows 20 and 30 (the third and fifth chunks) of 2 and 4 entries
    ragged[20, columns[20, 2]] = 0.0
    ragged[30, 8 if columns[30, 2] != 8 else 5] = 1.0
    ragged = sp.csr_array(ragged)
    assert ragged.nnz == n * k and cpu._entries_per_row(ragged) == 0
    R = ragged.toarray()
    close(cpu.weighted_gram(ragged, c), R.T @ (R if c is None else c[:, None] * R))
    close(cpu.column_sums(S), dense.sum(axis=0))
    assert cpu.column_sums(S.astype(np.float32)).dtype == np.float32


@pytest.mark.parametrize("pairs", [1, 3, 13])
def test_lbfgs_direction_is_the_two_loop_recursion(pairs):
    """The fused passes give -H·g of the NumPy recursion at 1 and 2 threads, over a history that
    has wrapped around its circular buffer (13 pairs in 10 slots); short vectors are left to NumPy."""
    from ilargi.models._solvers import _History

    two_loop = cpu.two_loop
    rng = np.random.default_rng(pairs)
    d = compiled.SMALL_DIRECTION + 7
    history = _History(10, d)
    for _ in range(pairs):
        s = rng.standard_normal(d)
        history.push(s, s + 0.3 * rng.standard_normal(d))
    g = rng.standard_normal(d)
    order = [(history.newest - k) % history.memory for k in range(history.size)]
    expected = two_loop(history.s, history.y, history.rho, order, g)
    for k in (1, 2):
        with threads.threads(k):
            close(compiled.lbfgs_direction(history.s, history.y, history.rho, order, g), expected)
            close(history.direction(g), expected)
    assert (
        compiled.lbfgs_direction(
            history.s[:, :100], history.y[:, :100], history.rho, order, g[:100]
        )
        is None
    )
    assert compiled.lbfgs_direction(history.s, history.y, history.rho, [], g) is None


def join_parts(sparse, n=N, dtype=np.float64, seed=0):
    """Parts of an n × 12 table: a fact block (identity rows), a table with absent rows whose
    columns interleave the fact's, and a union of two tables on the same columns (disjoint rows);
    ``sparse``: True, False, or "mixed" (the fact block dense, the others CSR)."""
    from ilargi.metadata.parts import make_parts

    rng = np.random.default_rng(seed)
    left = rng.random(n) < 0.6
    sources = [
        rng.standard_normal((n, 3)),
        rng.standard_normal((40, 4)),
        rng.standard_normal((7, 5)),
        rng.standard_normal((9, 5)),
    ]
    sources = [np.where(rng.random(S.shape) < 0.5, S, 0.0).astype(dtype) for S in sources]
    if sparse:
        first = 1 if sparse == "mixed" else 0
        sources[first:] = [sp.csr_array(S) for S in sources[first:]]
    rows = [
        None,
        rng.integers(-1, 40, n),
        np.where(left, rng.integers(0, 7, n), -1),
        np.where(left, -1, rng.integers(0, 9, n)),
    ]
    cols = [[0, 5, 2], [9, 1, 6, 3], [4, 7, 8, 10, 11], [4, 7, 8, 10, 11]]
    return make_parts(sources, rows, cols, (n, 12))


@pytest.mark.parametrize("n", [1, N])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("part_major", [False, True])
def test_materialize_writes_the_joined_table_of_the_numpy_kernels(
    nthreads, n, dtype, part_major, monkeypatch
):
    """Dense (from dense and CSR sources) and CSR (from CSR sources, or a dense fact block with a
    NaN beside them): the same table as cpu's, the CSR's rows sorted by column where the parts'
    columns interleave, written row by row and part by part."""
    monkeypatch.setattr(compiled, "PART_MAJOR_PARTS", 1 if part_major else 99)
    for sparse in (False, True, "mixed"):
        parts = join_parts(sparse, n, dtype)
        if sparse == "mixed":
            parts[0].source[n // 2, 1] = np.nan
        expected = cpu.materialize_dense(parts, n, 12, dtype)
        dense = compiled.materialize_dense(parts, n, 12, dtype)
        assert dense.dtype == dtype and np.array_equal(dense, expected, equal_nan=True)
        if sparse:
            csr = compiled.materialize_sparse(parts, n, 12)
            reference = cpu.materialize_sparse(parts, n, 12)  # rows sorted, one entry a column
            assert csr.shape == (n, 12) and csr.has_sorted_indices and csr.dtype == dtype
            assert csr.indices.dtype == np.int32
            assert np.array_equal(csr.toarray(), expected, equal_nan=True)
            for array in ("indptr", "indices", "data"):
                assert np.array_equal(
                    getattr(csr, array), getattr(reference, array), equal_nan=True
                )


@pytest.mark.parametrize("shape", [(200_003, 9), (70_000, 40), (300, 90_000), (0, 5)])
@pytest.mark.parametrize("m", [1, 3, 8])
def test_csr_products_with_operands_of_several_columns(nthreads, shape, m):
    """S·X of a float64 CSR and a dense X (rows in parallel, each in entry order) is SciPy's
    csr_matvecs' bits; Sᵀ·Y (row blocks into partials; one column: the 1-D route) equals SciPy's;
    int operands are read as float64, out= is filled, a wrong shape keeps SciPy's error."""
    S = (
        sp.random_array(shape, density=0.05, format="csr", random_state=7)
        if shape[0]
        else sp.csr_array(shape)
    )
    rng = np.random.default_rng(7)
    X, Y = rng.standard_normal((shape[1], m)), rng.standard_normal((shape[0], m))
    got = compiled.product(S, X)
    assert got.shape == (shape[0], m) and np.array_equal(got, S @ X)
    out = np.full((shape[0], m), np.nan)
    assert compiled.product(S, X, out=out) is out and np.array_equal(out, S @ X)
    got = compiled.transposed_product(S, Y)
    assert got.shape == (shape[1], m) and got.dtype == np.float64
    close(got, S.T @ Y)
    ints = np.arange(shape[0] * m).reshape(shape[0], m) % 5
    close(compiled.transposed_product(S, ints), S.T @ ints.astype(float))
    with pytest.raises(ValueError):
        compiled.product(S, np.ones((shape[1] + 1, m)))


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_gram_in_blocks_of_rows_on_threads(nthreads, weighted):
    """A wide sparse S's Gram, its rows in blocks on Python threads (at two threads), equals
    SciPy's Sᵀ·diag(c)·S, as CSC like SciPy's."""
    S = sp.random_array((40_000, 300), density=0.02, format="csr", random_state=8)
    assert S.nnz >= compiled.SMALL_CSR
    c = np.random.default_rng(8).random(S.shape[0]) if weighted else None
    got = compiled.weighted_gram(S, c)
    expected = S.T @ (S if c is None else sp.diags_array(c) @ S)
    assert sp.issparse(got) and got.shape == (300, 300)
    close(got.toarray(), expected.toarray())


def test_sort_rows_sorts_in_place_by_blocks_of_rows(nthreads, monkeypatch):
    """sort_rows sorts each row of a CSR in place (blocks of rows sorted through views)."""
    from ilargi.backend.compiled.primitives import sort_rows
    from tests.backend.test_accumulator import unsorted_rows

    monkeypatch.setattr(compiled, "SMALL_CSR", 0)
    S = sp.random_array((500, 60), density=0.2, format="csr", random_state=9)
    expected = S.toarray()
    S = unsorted_rows(S, np.random.default_rng(9))
    indices = S.indices
    assert sort_rows(S) is S and S.indices is indices
    assert all(np.all(np.diff(S.indices[S.indptr[i] : S.indptr[i + 1]]) > 0) for i in range(500))
    assert np.array_equal(S.toarray(), expected)
