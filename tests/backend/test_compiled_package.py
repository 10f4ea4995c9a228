"""The package ilargi.backend.compiled as a backend module: every name of the contract is a real
attribute (no module ``__getattr__`` filling gaps, so ``dir()``, IDEs and Sphinx see them all), and
its size cut-offs live on the package alone, read at call time, so that setting one there
(``compiled.SMALL = 0``, as build.warm_up and tests/conftest.py do) takes effect."""

import ast
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import compiled, cpu, threads
from ilargi.backend.contract import OPTIONAL, REQUIRED, Backend
from ilargi.metadata import Indicator

PACKAGE = Path(compiled.__file__).parent
MODULES = sorted(
    path
    for path in PACKAGE.glob("*.py")
    if path.name not in ("__init__.py", "kernels.py", "build.py")
)
CUT_OFFS = (
    "BLAS_SPLIT",
    "CROSS_ROWS",
    "ENTRY_BY_ENTRY",
    "GRAM_WIDE",
    "PARTIALS_BYTES",
    "PARTIALS_RATIO",
    "PART_MAJOR_PARTS",
    "PRODUCT_WIDE",
    "SMALL",
    "SMALL_CSR",
    "SMALL_DIRECTION",
    "TRANSPOSED_ENTRIES",
    "TRANSPOSED_WIDE",
)


def test_every_required_name_is_an_attribute_listed_by_dir():
    assert "__getattr__" not in vars(compiled)
    names = dir(compiled)
    assert [name for name in REQUIRED if name not in names] == []
    assert isinstance(compiled, Backend)
    given = {
        "NARROW",
        "PassPlan",
        "direct_cross",
        "gram_pushes",
        "gramvec_pass",
        "kmeans_pass",
        "lbfgs_direction",
        "logistic_pass",
        "one_pool",
        "pushed_sums",
        "softmax_pass",
        # gradient-boosted trees
        "best_thresholds",
        "bin_histograms",
        "categorical_splits",
        "nan_thresholds",
        "rebuild_bins",
        "column_histograms",
        "leaf_pass",
        "leaf_sums",
        "partition_rows",
        "sparse_histograms",
        "compact_rows",
        "inverse_index",
        "split_by_keys",
        "split_rows",
        "subtract_held",
        "subtract_ranges",
        "add_by_label",
        "residuals",
        "add_by_label_residuals",
        "sum_float64",
        "affine_column",
        "bin_column",
        "gather_codes",
        "joint_codes",
        "dense_columns",
    }
    assert {name for name in OPTIONAL if name in names} == given
    assert [name for name in compiled.__all__ if not hasattr(compiled, name)] == []
    assert len(set(compiled.__all__)) == len(compiled.__all__)


def test_the_kernels_it_does_not_compile_are_the_numpy_ones():
    for name in ("counts", "cooccurrence", "scale_rows", "select_rows", "NARROW"):
        assert getattr(compiled, name) is getattr(cpu, name)
    assert issubclass(compiled.BlockAccumulator, cpu.BlockAccumulator)
    assert compiled.name == "cpu" and compiled.xp is np


def _module_level_names(path):
    names = set()
    for node in ast.parse(path.read_text()).body:
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, (ast.AnnAssign, ast.AugAssign))
            else []
        )
        for target in targets:
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_the_cut_offs_are_defined_on_the_package_only_and_read_from_it():
    assert set(CUT_OFFS) <= _module_level_names(PACKAGE / "__init__.py")
    read = set()
    for path in MODULES:
        tree = ast.parse(path.read_text())
        assert not set(CUT_OFFS) & _module_level_names(path), path.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id in CUT_OFFS:
                pytest.fail(
                    f"{path.name}:{node.lineno} reads {node.id} as a global, not compiled.{node.id}"
                )
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "compiled"
                and node.attr in CUT_OFFS
            ):
                read.add(node.attr)
    assert read == set(CUT_OFFS)


def _spy(monkeypatch, module, name):
    calls = []
    kernel = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(1) or kernel(*args))
    return calls


def test_setting_small_on_the_package_takes_effect(monkeypatch):
    """A source under SMALL values goes to BLAS; with compiled.SMALL = 0, to the compiled S·x."""
    S = np.random.default_rng(0).standard_normal((50, 3))
    x = np.arange(3.0)
    calls = _spy(monkeypatch, compiled.products, "product_kernel")
    assert S.size < compiled.SMALL
    np.testing.assert_allclose(compiled.product(S, x), S @ x)
    assert calls == []
    monkeypatch.setattr(compiled, "SMALL", 0)
    np.testing.assert_allclose(compiled.product(S, x), S @ x)
    assert calls == [1]


def test_setting_small_csr_on_the_package_takes_effect(monkeypatch):
    """A CSR under SMALL_CSR entries is multiplied by one thread; with compiled.SMALL_CSR = 0, in
    row blocks."""
    S = sp.random(40, 6, density=0.5, format="csr", random_state=0)
    x = np.arange(6.0)
    calls = _spy(monkeypatch, compiled.products, "csr_product_kernel")
    np.testing.assert_allclose(compiled.product(S, x), S @ x)
    assert calls == []
    monkeypatch.setattr(compiled, "SMALL_CSR", 0)
    np.testing.assert_allclose(compiled.product(S, x), S @ x)
    assert calls == [1]


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_setting_transposed_entries_on_the_package_takes_effect(monkeypatch):
    """A CSR's Sᵀ·Y of several columns runs in row blocks only from TRANSPOSED_ENTRIES entries per
    partial row: 70,000 entries over 2 × 2,000 partial rows (17.5 each) are blocked at 16, summed
    by one thread at 18; the same values either way."""
    S = sp.random_array((70_000, 2_000), density=0.0005, format="csr", random_state=2)
    S = sp.csr_array((np.ones(S.nnz), S.indices, S.indptr), shape=S.shape)
    Y = np.random.default_rng(2).integers(-3, 4, (70_000, 4)).astype(float)
    assert S.nnz >= compiled.SMALL_CSR
    blocked = _spy(monkeypatch, compiled.products, "csr_transposed_matrix_kernel")
    expected = S.T @ Y
    with threads.threads(2):
        assert np.array_equal(compiled.transposed_product(S, Y), expected)
        monkeypatch.setattr(compiled, "TRANSPOSED_ENTRIES", 18)
        assert np.array_equal(compiled.transposed_product(S, Y), expected)
    assert blocked == [1]


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_setting_partials_ratio_on_the_package_takes_effect(monkeypatch):
    """compiled.PARTIALS_RATIO = 0 sends a segment-sum to the buckets route."""
    rows = np.random.default_rng(1).integers(-1, 30, 1000)
    Y = np.ones(1000)
    expected = np.bincount(rows[rows >= 0], minlength=30).astype(float)
    partials = _spy(monkeypatch, compiled.primitives, "partials_kernel")
    buckets = _spy(monkeypatch, compiled.primitives, "buckets_kernel")
    with threads.threads(2):
        monkeypatch.setattr(compiled, "PARTIALS_RATIO", 1e9)
        np.testing.assert_allclose(compiled.segment_sum(Y, Indicator(rows, 30)), expected)
        monkeypatch.setattr(compiled, "PARTIALS_RATIO", 0.0)
        np.testing.assert_allclose(compiled.segment_sum(Y, Indicator(rows, 30)), expected)
    assert (partials, buckets) == ([1], [1])
