"""Fits on a table (the materialized plan, or a NumPy/SciPy array) run ilargi's kernels.

A table on the CPU is trained on as a NormalizedMatrix of one part, the table itself
(``_ops.one_part``), when the fit has more than one thread and the table enough values
(``_ops.fit_matrix``): every product and fused pass of the fit then takes the compiled kernels at
``ilargi.threads``. Each product is checked against SciPy/NumPy on random tables (empty rows, a
row of many entries, duplicate entries, a Fortran-ordered dense table), at one thread and at two,
large enough for the parallel routes, and on the NumPy/SciPy kernels ("numpy"); each estimator's
fit against the same fit run on SciPy's products, which only the products tell apart.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone

import ilargi
import ilargi.models._base as base
from ilargi import NormalizedMatrix
from ilargi.backend import backend_of, cpu_kernels, links
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge
from ilargi.models._ops import PARALLEL_VALUES, fit_matrix, kernels, one_part, table
from ilargi.rewriter import training

N, D = 30_000, 40  # ~240k stored entries: above the compiled CSR kernels' one-thread cut-off


def random_csr(n=N, d=D, density=0.2, seed=0, duplicates=False):
    """A CSR with empty rows (every 7th), one row of many entries, and optionally duplicates."""
    rng = np.random.default_rng(seed)
    T = sp.random(
        n,
        d,
        density=density,
        format="csr",
        random_state=rng,
        data_rvs=lambda k: rng.standard_normal(k),
    )
    T = sp.csr_matrix(T.multiply(np.arange(n)[:, None] % 7 != 0))  # every 7th row empty
    T = sp.lil_matrix(T)
    T[1, :] = rng.standard_normal(d)  # one full row
    T = sp.csr_matrix(T)
    if duplicates:  # each stored row's first entry stored twice: SciPy adds them up
        lengths = np.diff(T.indptr)
        first = T.indptr[:-1][lengths > 0]
        keep = np.sort(np.concatenate([np.arange(T.nnz), first]))
        indptr = np.concatenate([[0], np.cumsum(lengths + (lengths > 0))])
        T = sp.csr_matrix((T.data[keep], T.indices[keep], indptr), shape=T.shape)
        assert not T.has_canonical_format
    return T


TABLES = {
    "csr": lambda: random_csr(),
    "csr-duplicates": lambda: random_csr(seed=1, duplicates=True),
    "dense": lambda: np.random.default_rng(2).standard_normal((N, D)),
    "dense-fortran": lambda: np.asfortranarray(np.random.default_rng(3).standard_normal((N, D))),
    "small-csr": lambda: random_csr(n=50, d=7, seed=4),
}
KERNELS = ["compiled", "numpy"]


def reference(T):
    """T as SciPy canonical CSR or a dense array: the products to compare with."""
    return sp.csr_matrix(T, copy=True) if sp.issparse(T) else np.array(T)


def close(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = max(float(np.abs(expected).max()), 1.0)
    assert actual.shape == expected.shape
    assert float(np.abs(actual - expected).max()) <= 1e-12 * scale * np.sqrt(N)


@pytest.mark.parametrize("kind", list(TABLES))
@pytest.mark.parametrize("k", [1, 2])
@pytest.mark.parametrize("kind_of_kernels", KERNELS)
def test_products_of_a_fit_matrix_equal_scipys(kind, k, kind_of_kernels):
    T = TABLES[kind]()
    ref = reference(T)
    n, d = T.shape
    rng = np.random.default_rng(5)
    w, W = rng.standard_normal(d), rng.standard_normal((d, 5))
    r, R = rng.standard_normal(n), rng.standard_normal((n, 5))
    v = rng.random(n)
    with cpu_kernels(kind_of_kernels), ilargi.threads(k):
        M = one_part(T)
        assert isinstance(M, NormalizedMatrix) and M.shape == T.shape
        close(M @ w, ref @ w)
        close(M @ W, ref @ W)
        close(M.dot(w, out=np.empty(n)), ref @ w)
        close(M.T @ r, ref.T @ r)
        close(M.T @ R, ref.T @ R)
        squares = ref.multiply(ref) if sp.issparse(ref) else ref * ref
        close(M.sum_of_squares(axis=1), np.asarray(squares.sum(axis=1)).ravel())
        close(M.sum_of_squares(), squares.sum())
        close(M.mean(axis=0), np.asarray(ref.mean(axis=0)).ravel())
        close(M.gramvec(w, v, 0.5, 2.0, w), 0.5 * (ref.T @ (v * (ref @ w))) + 2.0 * w)
        y = (rng.random(n) < 0.4).astype(float)
        link = backend_of(y).BinaryLink(y, v)
        loss, grad, total = training.loss_gradient(M, 0.1 * w, 0.3, link)
        z = ref @ (0.1 * w) + 0.3
        p = 1.0 / (1.0 + np.exp(-z))
        close(loss, float((v * (np.logaddexp(0.0, z) - y * z)).sum()))
        close(grad, ref.T @ (v * (p - y)))
        close(total, float((v * (p - y)).sum()))
        centers = np.asarray(ref[:4].toarray() if sp.issparse(ref) else ref[:4]) + 0.1
        x_sq = (
            np.asarray(ref.multiply(ref).sum(axis=1)).ravel()
            if sp.issparse(ref)
            else (ref * ref).sum(axis=1)
        )
        labels, _, counts, sums = training.assign(M, centers, x_sq, links.rounding(centers))
        distances = x_sq[:, None] - 2 * (ref @ centers.T) + (centers**2).sum(axis=1)
        assert np.array_equal(labels, distances.argmin(axis=1))
        one_hot = (labels[:, None] == np.arange(4)).astype(float)
        close(counts, one_hot.sum(axis=0))
        close(sums, (ref.T @ one_hot).T)


def test_a_fit_matrix_runs_the_compiled_kernels_where_there_are_threads_to_use():
    T = random_csr(seed=6, duplicates=True)
    before = (T.data.copy(), T.indices.copy(), T.indptr.copy())
    with ilargi.threads(2):
        M = fit_matrix(T)
        assert isinstance(M, NormalizedMatrix)
        if backend_of(np.zeros(1)).__name__ == "ilargi.backend.compiled":
            assert kernels(M).__name__ == "ilargi.backend.compiled"
        assert table(M).has_canonical_format  # duplicates summed in a copy
        assert all(np.array_equal(a, b) for a, b in zip(before, (T.data, T.indices, T.indptr)))
        dense = np.random.default_rng(7).standard_normal((PARALLEL_VALUES // 4, 4))
        assert table(fit_matrix(dense)) is dense  # C-ordered float64: not copied
        small = dense[:100]
        assert fit_matrix(small) is small  # one thread in the kernels too: SciPy's and BLAS's
        for other in (
            "a string",
            NormalizedMatrix.from_parts(
                [small, small[:4]],
                [None, np.arange(100) % 4],
                [[0, 1, 2, 3], [4, 5, 6, 7]],
                (100, 8),
            ),
        ):
            assert fit_matrix(other) is other
    with ilargi.threads(1):
        assert fit_matrix(T) is T  # a sparse table: SciPy's products on one thread
        assert table(fit_matrix(dense)) is dense  # a dense one: the compiled kernels still


def test_table_is_only_the_whole_table():
    dense = np.random.default_rng(8).standard_normal((20, 3))
    whole = NormalizedMatrix.from_parts([dense], [None], [[0, 1, 2]], (20, 3))
    assert table(whole) is whole.parts[0].source
    for view in (
        whole * 2.0 + 1.0,
        whole.T,
        whole[::2],
        NormalizedMatrix.from_parts([dense], [np.arange(20)[::-1]], [[0, 1, 2]], (20, 3)),
    ):
        assert table(view) is view
    reordered = whole[:, [1, 0, 2]]  # a new source whose columns are the view's, in order
    assert np.array_equal(np.asarray(table(reordered)), reordered.toarray())
    assert table(dense) is dense


def scipy_products(monkeypatch):
    """Fits as before issue 41: the estimators on the plain table (SciPy's products, BLAS)."""
    monkeypatch.setattr(base, "fit_matrix", lambda X: X)


def estimators():
    return [
        (LogisticRegression(solver="gd", max_iter=15), "logistic"),
        (LogisticRegression(solver="lbfgs", max_iter=15, tol=0.0), "logistic"),
        (LogisticRegression(solver="newton-cg", max_iter=4, tol=0.0), "logistic"),
        (LogisticRegression(solver="gd", max_iter=10), "multinomial"),
        (LogisticRegression(solver="newton-cg", max_iter=3, tol=0.0), "multinomial"),
        (Ridge(alpha=1.0, solver="lsqr", max_iter=15), "regression"),
        (Ridge(alpha=1.0, solver="cg", max_iter=15), "regression"),
        (LinearRegression(), "regression"),
        (KMeans(4, max_iter=10, tol=0.0, random_state=0), None),
        (GNMF(3, max_iter=15, tol=0.0, random_state=0), None),
    ]


def fitted(model, X, target):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fixed iteration counts: not converged
        model.fit(abs(X) if isinstance(model, GNMF) else X, *(() if target is None else (target,)))
    if isinstance(model, KMeans):
        return model.cluster_centers_, model.labels_
    if isinstance(model, GNMF):
        return model.components_, model.loss_history_
    return model.coef_, model.intercept_


@pytest.mark.parametrize("kind", ["csr", "dense"])
@pytest.mark.parametrize("index", range(len(estimators())))
def test_fits_on_a_table_equal_the_fits_on_scipys_products(kind, index, monkeypatch):
    T = TABLES[kind]()[:12_000]  # above PARALLEL_VALUES: fitted as one part at two threads
    rng = np.random.default_rng(9)
    scores = np.asarray(T @ rng.standard_normal(T.shape[1])).ravel()
    targets = {
        "logistic": (scores > 0).astype(float),
        "regression": scores + rng.standard_normal(12_000),
        "multinomial": np.digitize(scores, np.quantile(scores, [0.3, 0.7])),
        None: None,
    }
    model, target = estimators()[index]
    with ilargi.threads(2):
        assert isinstance(fit_matrix(T), NormalizedMatrix)
        ours = fitted(clone(model).set_params(plan="materialized"), T, targets[target])
        scipy_products(monkeypatch)
        expected = fitted(clone(model).set_params(plan="materialized"), T, targets[target])
    for a, b in zip(ours, expected):
        a, b = np.asarray(a, float), np.asarray(b, float)
        assert float(np.abs(a - b).max()) <= 1e-9 * max(float(np.abs(b).max()), 1.0)


def test_the_materialized_plan_of_a_whole_table_matrix_builds_no_join(monkeypatch):
    dense = np.random.default_rng(10).standard_normal((200, 4))
    whole = NormalizedMatrix.from_parts([dense], [None], [[0, 1, 2, 3]], (200, 4))
    y = (dense[:, 0] > 0).astype(float)

    def refuse(self):
        raise AssertionError("materialized a matrix that is its table already")

    monkeypatch.setattr(NormalizedMatrix, "materialize", refuse)
    for plan in ("materialized", "auto"):
        model = LogisticRegression(plan=plan).fit(whole, y)
        assert model.plan_ == "materialized"
        assert np.allclose(model.coef_, LogisticRegression().fit(dense, y).coef_, rtol=1e-12)


@pytest.mark.parametrize("plan", ["factorized", "materialized"])
def test_least_squares_on_a_read_only_target(plan):
    from ilargi.datasets import make_star

    X, y = make_star(600, tuple_ratio=10, d_fact=3, random_state=0)
    y = np.array(y)
    y.flags.writeable = False
    expected = LinearRegression().fit(X.materialize(), np.array(y)).coef_
    for model in (LinearRegression(plan=plan), Ridge(alpha=0.0, solver="cg", plan=plan)):
        assert np.allclose(model.fit(X, y).coef_, expected, rtol=1e-6)
