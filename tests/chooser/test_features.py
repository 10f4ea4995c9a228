"""Chooser features against hand-computed values, from metadata only; workload parsing."""

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi import NormalizedMatrix
from ilargi.chooser.features import extract
from ilargi.chooser.workload import Workload, workload_of
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge


@pytest.fixture
def tiny():
    """T (4 × 6) = [fact S (4×1 dense) | R1 (2×3 CSR) | R2 (3×2 dense)].

    R1 rows [0, 0, 0, 1]: counts [3, 1], row nnz [2, 1] -> 3·2 + 1·1 = 7 entries in T.
    R2 rows [2, -1, 2, 0]: counts [1, 0, 2], one absent target row, 3 present rows · 2 columns.
    """
    S = np.ones((4, 1))
    R1 = sp.csr_matrix(np.array([[1.0, 0, 2], [0, 3, 0]]))
    R2 = np.arange(1.0, 7.0).reshape(3, 2)
    return NormalizedMatrix.from_parts(
        [S, R1, R2],
        [None, np.array([0, 0, 0, 1]), np.array([2, -1, 2, 0])],
        [[0], [1, 2, 3], [4, 5]],
        (4, 6),
    )


def test_data_features_by_hand(tiny, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("features must not materialize the join")

    monkeypatch.setattr(NormalizedMatrix, "materialize", refuse)
    monkeypatch.setattr(NormalizedMatrix, "toarray", refuse)
    f = extract(tiny, Workload("lmm", 2))
    expected = {
        "n": 4,
        "d": 6,
        "n_parts": 3,
        "n_fact_parts": 1,
        "n_dims": 2,
        "d_fact": 1,
        "dim_rows": 5,
        "dim_cols": 5,
        "dim_rows_max": 3,
        "stored_fact": 4,
        "stored_dims": 3 + 6,
        "stored": 13,
        "nnz_t": 4 + 7 + 6,
        "tuple_ratio": 4 / 5,
        "feature_ratio": 5 / 1,
        "tr_min": 4 / 3,
        "tr_max": 2.0,
        "fr_min": 2.0,
        "fr_max": 3.0,
        "density_fact": 1.0,
        "density_dims": 9 / 12,
        "density_t": 17 / 24,
        "redundancy": 17 / 13,
        "fanout_max": 3.0,
        "fanout_mean": (4 + 3) / (2 + 2),
        "fanout_cv": 0.5,  # R1: std([3, 1]) / mean 2; R2: std([1, 2]) / 1.5 = 1/3
        "referenced_frac": 2 / 3,
        "absent_frac": 0.25,
        "absent_frac_mean": 0.25 / 3,
        "join_kind": "left",
        "sparse_frac": 3 / 13,
        "mat_sparse": 0,
        "has_shift": 0,
        "itemsize": 8,
        "workload": "lmm",
        "m": 2,
        "iterations": 1,
        # LMM, m = 2: 2·m multiply-adds per stored entry, factorized; per cell of the dense T.
        "flops_fact": 2 * 2 * 13,
        "flops_mat": 2 * 2 * 24,
        "flops_common": 0.0,
        "device": "cpu",
    }
    for name, value in expected.items():
        assert f[name] == pytest.approx(value), name
    colsums = extract(tiny, Workload("colsums"))
    assert colsums["flops_fact"] == 13 + 5  # every source entry, plus the counts of dim rows
    assert colsums["flops_mat"] == 24


def test_join_kinds_and_shift():
    R = np.ones((2, 2))
    union = NormalizedMatrix.from_parts(
        [R, R], [np.array([0, 1, -1, -1]), np.array([-1, -1, 0, 1])], [[0, 1], [0, 1]], (4, 2)
    )
    assert extract(union, Workload("lmm"))["join_kind"] == "union_outer"
    pairs = NormalizedMatrix.from_parts(
        [R, R], [np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1])], [[0, 1], [2, 3]], (4, 4)
    )
    f = extract(pairs, Workload("lmm"))
    assert f["join_kind"] == "no_fact" and f["tuple_ratio"] == 1.0
    shifted = extract(pairs + 1.0, Workload("lmm"))
    assert shifted["has_shift"] == 1 and shifted["mat_sparse"] == 0


def test_sparse_table_and_statistics_are_cached(tiny):
    sparse = NormalizedMatrix.from_parts(
        [sp.csr_matrix(np.eye(3)), sp.csr_matrix(np.array([[0.0, 1], [2, 0]]))],
        [None, np.array([1, 1, 0])],
        [[0, 1, 2], [3, 4]],
        (3, 5),
    )
    f = extract(sparse, Workload("crossprod"))
    assert f["mat_sparse"] == 1 and f["nnz_t"] == 3 + 3 and f["redundancy"] == 6 / 5
    indicator = tiny.parts[1].indicator
    extract(tiny, Workload("lmm"))
    cached = indicator.cached("chooser.fanout", lambda: pytest.fail("fan-out rebuilt"))
    assert cached == (2, 3.0, 0.5)


def test_model_workloads():
    shape = (1000, 20)
    assert workload_of(LogisticRegression(max_iter=20), shape) == Workload("logreg_lbfgs", 1, 20)
    assert workload_of(LogisticRegression(solver="gd", max_iter=7), shape) == Workload(
        "logreg_gd", 1, 7
    )
    assert workload_of(KMeans(n_clusters=7, max_iter=15, n_init=2), shape) == Workload(
        "kmeans", 7, 30
    )
    assert workload_of(GNMF(n_components=3, max_iter=9), shape) == Workload("gnmf", 3, 9)
    assert workload_of(LinearRegression(), shape) == Workload("linreg_cholesky", 1, 1)
    assert workload_of(Ridge(solver="cg", max_iter=12), shape) == Workload("linreg_cg", 1, 12)
    wide = workload_of(LinearRegression(max_iter=30), (100, 5000))
    assert wide == Workload("linreg_lsqr", 1, 30)
    assert workload_of("LMM", shape, m=8) == Workload("lmm", 8, 1)
    assert workload_of("colsums", shape, m=8) == Workload("colsums", 1, 1)


@pytest.mark.parametrize(
    "args, error",
    [
        (("lmmm",), ValueError),
        (("lmm",), ValueError),
        ((object(),), TypeError),
        ((LogisticRegression(),), ValueError),
    ],
)
def test_bad_workloads(args, error):
    m = 0 if args[0] == "lmm" else (3 if isinstance(args[0], LogisticRegression) else None)
    with pytest.raises(error):
        workload_of(args[0], (10, 3), m=m)


def test_unknown_estimator():
    from sklearn.linear_model import Lasso

    with pytest.raises(TypeError, match="Lasso"):
        workload_of(Lasso(), (10, 3))


def test_mat_sparse_feature_is_the_layout_materialize_builds():
    from ilargi.chooser.memory import layout

    n, levels = 1000, 500
    fk = np.arange(n) % levels
    nm = NormalizedMatrix.from_parts(
        [np.ones((n, 1)), sp.eye(levels, format="csr")],
        [None, fk],
        [[0], np.arange(1, levels + 1)],
        (n, levels + 1),
    )
    assert sp.issparse(nm.materialize()) and layout(nm).sparse
    assert extract(nm, Workload("lmm"))["mat_sparse"] == 1
    # dense where materialize() builds it dense: a shift fills its columns, or too few zeros
    assert not sp.issparse((nm + 1.0).materialize())
    assert extract(nm + 1.0, Workload("lmm"))["mat_sparse"] == 0
    narrow = NormalizedMatrix.from_parts(
        [np.ones((n, 1)), sp.eye(2, format="csr")], [None, np.arange(n) % 2], [[0], [1, 2]], (n, 3)
    )
    assert not sp.issparse(narrow.materialize()) and not layout(narrow).sparse
    assert extract(narrow, Workload("lmm"))["mat_sparse"] == 0


def test_last_level_cache_is_the_largest_data_cache_the_os_reports(tmp_path):
    from ilargi.chooser.features import _last_level_cache_mib

    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "48K"),
            (1, "Instruction", "64K"),
            (2, "Unified", "2048K"),
            (3, "Unified", "32M"),
            (4, "Instruction", "9G"),
        ]
    ):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert _last_level_cache_mib.__wrapped__(tmp_path) == 32.0
    (tmp_path / "index3" / "size").write_text("491520K\n")
    assert _last_level_cache_mib.__wrapped__(tmp_path) == 480.0
    assert _last_level_cache_mib.__wrapped__(tmp_path / "absent") == 0.0  # no sysfs: unknown
    assert (
        extract(
            NormalizedMatrix.from_parts([np.ones((2, 2))], [None], [[0, 1]], (2, 2)),
            Workload("lmm"),
        )["llc_mib"]
        >= 0.0
    )
