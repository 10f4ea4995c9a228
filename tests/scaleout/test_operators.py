"""Every operator of a Dask-backed matrix equals the in-memory matrix's (1e-8 relative), on a
LocalCluster of two worker processes: dense and one-hot sources, left-join NULL rows, a snowflake,
several chunkings (uneven last chunk, explicit sizes, one partition)."""

import dask.array as da
import numpy as np
import pytest

from ilargi.backend import links
from ilargi.backend.links import BinaryLink, MultinomialLink
from ilargi.rewriter import training
from ilargi.scaleout import DaskNormalizedMatrix, GatherRefused
from tests.scaleout.conftest import CHUNKINGS, SCENARIOS, assert_close, scenario

_CACHE = {}


@pytest.fixture(
    scope="module",
    params=[(s, c) for s in SCENARIOS for c in CHUNKINGS],
    ids=lambda p: f"{p[0]}-{p[1]}",
)
def case(request, client):
    """(in-memory X, Dask D, y) of one scenario and chunking, built once per module."""
    name, chunks = request.param
    X, y = scenario(name)
    D = X.to_dask(chunks=chunks if isinstance(chunks, int) else list(chunks))
    return X, D, y


@pytest.fixture(scope="module")
def snowflake(client):
    X, y = scenario("snowflake")
    return X, X.to_dask(chunks=100), y


def _rng(seed=0):
    return np.random.default_rng(seed)


def test_layout(case):
    X, D, _ = case
    assert isinstance(D, DaskNormalizedMatrix)
    assert D.shape == X.shape and D.columns == X.columns
    assert sum(D.chunks[0]) == X.shape[0] and D.chunks[1] == (X.shape[1],)
    assert D.npartitions == len(D.chunks[0])
    assert D.persisted


def test_products(case):
    X, D, y = case
    n, d = X.shape
    w, W = _rng().normal(size=d), _rng(1).normal(size=(d, 3))
    out = D @ w
    assert isinstance(out, da.Array) and out.chunks[0] == D.chunks[0]
    assert_close(out.compute(), X @ w, what="T·w")
    assert_close((D @ W).compute(), X @ W, what="T·W")
    assert_close(D.dot(w).compute(), X @ w, what="dot")
    Y = _rng(2).normal(size=(n, 2))
    assert_close(D.T @ y, X.T @ y, what="Tᵀ·y")
    assert_close(D.T @ Y, X.T @ Y, what="Tᵀ·Y")
    assert_close(D.T @ da.from_array(Y, chunks=(37, 2)), X.T @ Y, what="Tᵀ·Y (Dask, other chunks)")
    assert_close(y @ D, y @ X, what="y·T")
    assert_close(Y.T @ D, Y.T @ X, what="Yᵀ·T")
    assert_close((W.T @ D.T).compute(), W.T @ X.T, what="Wᵀ·Tᵀ")


def test_reductions(case):
    X, D, _ = case
    for axis in (0, None):
        assert_close(D.sum(axis=axis), X.sum(axis=axis), what=f"sum {axis}")
        assert_close(D.mean(axis=axis), X.mean(axis=axis), what=f"mean {axis}")
        assert_close(D.var(axis=axis), X.var(axis=axis), what=f"var {axis}")
        assert_close(D.var(axis=axis, ddof=1), X.var(axis=axis, ddof=1), what=f"var ddof {axis}")
        assert_close(D.sum_of_squares(axis=axis), X.sum_of_squares(axis=axis), what=f"sq {axis}")
        assert_close(D.min(axis=axis), X.min(axis=axis), what=f"min {axis}")
        assert_close(D.max(axis=axis), X.max(axis=axis), what=f"max {axis}")
    assert_close(D.std(axis=0), X.std(axis=0), what="std")
    for name in ("sum", "mean", "var", "sum_of_squares", "min", "max"):
        rows = getattr(D, name)(axis=1)
        assert isinstance(rows, da.Array) and rows.chunks[0] == D.chunks[0]
        assert_close(rows.compute(), getattr(X, name)(axis=1), what=f"{name} along rows")
    assert_close(D.T.sum(axis=1), X.T.sum(axis=1), what="Tᵀ row sums")


def test_crossprod_and_gramvec(case):
    X, D, y = case
    n, d = X.shape
    assert_close(D.crossprod(), X.crossprod(), what="TᵀT")
    w = _rng(3).uniform(0.5, 2.0, n)
    assert_close(D.crossprod(w), X.crossprod(w), what="TᵀWT")
    assert_close(D.crossprod(D.align(w)), X.crossprod(w), what="TᵀWT (Dask w)")
    v, z = _rng(4).normal(size=d), _rng(5).normal(size=d)
    assert_close(D.gramvec(v), X.gramvec(v), what="gramvec")
    assert_close(D.gramvec(v, w, 0.5, 2.0, z), X.gramvec(v, w, 0.5, 2.0, z), what="gramvec v z")


def test_loss_gradient(case):
    X, D, y = case
    n, d = X.shape
    labels = (y > np.median(y)).astype(float)
    coef = _rng(6).normal(size=d) * 0.1
    sw = _rng(7).uniform(0.5, 2.0, n)
    for weights in (None, sw):
        expected = training.loss_gradient(X, coef, 0.3, BinaryLink(labels, weights))
        got = D.loss_gradient(coef, 0.3, BinaryLink(labels, weights))
        assert_close(got[0], expected[0], what="loss")
        assert_close(got[1], expected[1], what="gradient")
        assert_close(got[2], expected[2], what="Σ r")
    codes = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    coef3 = _rng(8).normal(size=(d, 3)) * 0.1
    expected = training.loss_gradient(X, coef3, np.zeros(3), MultinomialLink(codes, 3))
    got = D.loss_gradient(coef3, np.zeros(3), MultinomialLink(codes, 3))
    for a, b, what in zip(got, expected, ("loss", "gradient", "Σ r")):
        assert_close(a, b, what=f"softmax {what}")


def test_assign(case):
    X, D, _ = case
    centers = X[[0, 5, 17]].toarray()
    rounding = links.rounding(centers)
    x_sq = X.sum_of_squares(axis=1)
    labels, closest, counts, sums = training.assign(X, centers, x_sq, rounding)
    got = D.assign(centers, D.sum_of_squares(axis=1), rounding)
    assert isinstance(got[0], da.Array) and isinstance(got[1], da.Array)
    np.testing.assert_array_equal(got[0].compute(), labels)
    assert_close(got[1].compute(), closest, what="closest")
    np.testing.assert_array_equal(got[2], counts)
    assert_close(got[3], sums, what="cluster sums")


def test_affine_and_elementwise(snowflake):
    X, D, y = snowflake
    d = X.shape[1]
    w = _rng(9).normal(size=d)
    mean, std = D.mean(axis=0), D.std(axis=0)
    Z, Zm = (D - mean) / std, (X - X.mean(axis=0)) / X.std(axis=0)
    assert isinstance(Z, DaskNormalizedMatrix)
    assert_close((Z @ w).compute(), Zm @ w, what="standardized T·w")
    assert_close(Z.T @ y, Zm.T @ y, what="standardized Tᵀ·y")
    assert_close(Z.crossprod(), Zm.crossprod(), what="standardized TᵀT")
    assert_close(Z.var(axis=0), Zm.var(axis=0), what="standardized var")
    for D2, X2, what in (
        (2.0 * D + 1.0, 2.0 * X + 1.0, "2T+1"),
        (-D, -X, "-T"),
        (np.log1p(abs(D)), np.log1p(abs(X)), "log1p|T|"),
        (D**2, X**2, "T²"),
        (np.exp(-D.T).T, np.exp(-X), "exp(-Tᵀ)ᵀ"),
    ):
        assert_close((D2 @ w).compute(), X2 @ w, what=what)
        assert_close(D2.sum(axis=0), X2.sum(axis=0), what=what + " column sums")
    assert_close((D.T * w[:, None]).T.sum(axis=0), (X * w).sum(axis=0), what="per column of Tᵀ")


def test_row_selection(snowflake):
    X, D, y = snowflake
    n, d = X.shape
    w = _rng(10).normal(size=d)
    rng = _rng(11)
    sorted_idx = np.sort(rng.choice(n, 120, replace=False))
    unsorted_idx = rng.integers(-n, n, 150)  # repeats and negative indices
    mask = rng.uniform(size=n) < 0.4
    for key, what in (
        (sorted_idx, "sorted"),
        (unsorted_idx, "unsorted"),
        (mask, "mask"),
        (slice(3, 250, 4), "slice"),
        (slice(None, None, -3), "reversed"),
        (list(sorted_idx[:5]), "list"),
    ):
        S, Sm = D[key], X[key]
        assert isinstance(S, DaskNormalizedMatrix) and S.shape == Sm.shape, what
        assert_close((S @ w).compute(), Sm @ w, what=f"{what} T·w")
        assert_close(S.T @ y[: S.shape[0]], Sm.T @ y[: S.shape[0]], what=f"{what} Tᵀ·y")
        assert_close(S.var(axis=0), Sm.var(axis=0), what=f"{what} var")
    S = D[D.align(mask)]
    assert_close(S.T @ y[mask], X[mask].T @ y[mask], what="Dask mask")
    assert_close(
        D[sorted_idx][5:40].sum(axis=0),
        X[sorted_idx][5:40].sum(axis=0),
        what="selection of a selection",
    )
    assert_close(D[7], X[7], what="one row")
    assert_close(
        (D[sorted_idx] - 1.0).sum(axis=0),
        (X[sorted_idx] - 1.0).sum(axis=0),
        what="selection then affine",
    )


def test_column_selection(snowflake):
    X, D, y = snowflake
    keep = [5, 0, 11, 3]
    S, Sm = D[:, keep], X[:, keep]
    assert S.shape == Sm.shape and S.columns == Sm.columns
    assert_close(S.T @ y, Sm.T @ y, what="columns Tᵀ·y")
    assert_close(S.crossprod(), Sm.crossprod(), what="columns TᵀT")
    assert_close(D[10:60, keep].sum(axis=0), X[10:60, keep].sum(axis=0), what="rows and columns")
    column = D[:, 2]
    assert isinstance(column, da.Array)
    assert_close(column.compute(), X[:, 2], what="one column")


def test_compute_and_materialize(snowflake):
    X, D, _ = snowflake
    back = D.compute()
    assert type(back).__name__ == "NormalizedMatrix"
    assert_close(back.toarray(), X.toarray(), what="compute()")
    assert_close(D.toarray(), X.toarray(), what="toarray()")
    assert_close(np.asarray(D), X.toarray(), what="np.asarray")
    assert_close(D.to_dask_array().compute(), X.toarray(), what="to_dask_array()")
    assert_close(D[::10].materialize(), X[::10].materialize(), what="materialize() of a few rows")
    assert_close((D * 2.0).compute().toarray(), (X * 2.0).toarray(), what="compute() after ops")
    assert D.nonfinite() == (False, False)
    assert np.log1p(abs(D)).nonfinite() == (False, False)
    Xd, _ = scenario("dense")
    assert np.log(Xd.to_dask(chunks=100) - 1e9).nonfinite() == (True, False)


def test_gathering_the_table_is_refused(snowflake):
    _, D, _ = snowflake
    with pytest.raises(GatherRefused, match="would gather the whole"):
        D.materialize(max_bytes=1000)
    with pytest.raises(GatherRefused, match="would gather the whole"):
        D.toarray(max_bytes=1000)
    with pytest.raises(GatherRefused, match="boolean"):
        D == 1.0  # noqa: B015
    with pytest.raises(GatherRefused):
        np.isnan(D)
    with pytest.raises(GatherRefused, match="n × n"):
        D.tcrossprod()
    with pytest.raises(TypeError, match="out="):
        D.dot(np.ones(D.shape[1]), out=np.empty(D.shape[0]))
    with pytest.raises(ValueError, match="rows"):
        D.T @ np.ones(5)
    with pytest.raises(ValueError, match="per column"):
        D + np.ones(3)


def test_without_persist_and_chunk_sizes(client):
    X, y = scenario("snowflake")
    D = X.to_dask(chunks=(10, 100, 147), persist=False)
    assert not D.persisted and D.chunks[0] == (10, 100, 147)
    assert_close(D.T @ y, X.T @ y, what="not persisted")
    assert D.persist().persisted
    T = X.T.to_dask(chunks=50)
    assert T.shape == X.T.shape and T.transposed
    assert_close(T @ y, X.T @ y, what="to_dask of a transposed view")
    with pytest.raises(ValueError, match="sum to"):
        X.to_dask(chunks=(10, 10))


@pytest.mark.parametrize(
    "edge",
    ["huge, cancelling", "huge, overflowing", "large mean, small spread", "subnormal"],
)
def test_reductions_at_the_edges_of_float64(client, edge):
    """sum, mean, var and std of a Dask-backed matrix equal the in-memory matrix's and NumPy's
    at the edges of float64: partition partials that overflow alone combine as the exact sum
    (finite where the cells' sum is), variances are NumPy's two-pass (inf, not NaN, for huge
    values), a large mean keeps its small variance's digits."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(3)
    n = 120
    fk = rng.integers(0, 6, n)
    fk[::7] = -1
    fact, dim = rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, (6, 2))
    if edge == "huge, cancelling":  # partitions' sums overflow; the whole column's do not
        fact[:, 0] = np.where(np.arange(n) < n // 2, 1.5e308, -1.5e308)
        fact[:, 1] *= 1e306
        dim = dim * 1.6e308
    elif edge == "huge, overflowing":
        fact, dim = np.abs(fact) * 1.7e308, dim * 1.7e308
    elif edge == "large mean, small spread":
        fact, dim = 1e8 + fact * 1e-3, -1e9 + dim * 1e-2
    else:
        fact, dim = fact * 1e-310, dim * 1e-308
    X = NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0, 1], [2, 3]], (n, 4))
    D = X.to_dask(chunks=25)
    table = X.toarray()
    with np.errstate(all="ignore"):
        for name in ("sum", "mean", "var", "std"):
            for axis in (None, 0, 1):
                got = getattr(D, name)(axis=axis)
                got = got.compute() if hasattr(got, "compute") else got
                expected = getattr(X, name)(axis=axis)
                # a variance's mean rounds by an ulp in either order of summation: δ² apart
                slack = (4 * np.finfo(float).eps * np.abs(table).max()) ** 2
                # a cancelling sum rounds within n·eps·Σ|x| in either order
                rounding = 4 * n * np.finfo(float).eps * n * np.abs(table).max()
                atol = {"var": slack, "std": np.sqrt(slack), "sum": rounding}.get(
                    name, rounding / n
                )
                np.testing.assert_allclose(
                    got, expected, rtol=1e-9, atol=atol, err_msg=f"{edge}: {name}(axis={axis})"
                )
        if edge == "huge, cancelling":
            assert np.isfinite(D.sum(axis=0)[:2]).all() and np.isfinite(D[:, :2].mean())
            np.testing.assert_allclose(D.sum(axis=0)[1], table[:, 1].sum(), rtol=1e-9)
            assert abs(D.sum(axis=0)[0]) <= 1e-12 * 1.5e308  # ±1.5e308 sixty times each
        if edge == "huge, overflowing":
            assert np.isinf(D.var(axis=0)).all() and not np.isnan(D.std()).any()
        if edge == "large mean, small spread":
            np.testing.assert_allclose(D.var(axis=0), table.var(axis=0), rtol=1e-9, atol=1e-12)
