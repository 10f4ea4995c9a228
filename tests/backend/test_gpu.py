"""What only the GPU backend has: the device round trip, its kernel variants (the ``gpu_*``
settings of ``ilargi.config_context``), the stacked passes on wide shapes, clear out-of-memory
errors, and the CUDA sources (every launched kernel defined; compiled with nvcc where a CUDA
toolkit is installed).

The operators themselves are specified once, in tests/rewriter/, and run there on the GPU too (the
``backend`` parameter, tests/backends.py). Tests marked ``gpu`` need CuPy and a CUDA device
(tests/conftest.py skips them cleanly otherwise); ``benchmarks/gpu_check.py`` runs them on a GPU
machine.

Each flag a test toggles is read by the code path it calls, and the test checks that the path was
taken (a recording wrapper around the module function, looked up by attribute at call time):
``gpu_segment_sum`` by ``segment_sum``, called part by part by the rules once ``gpu_stacked`` is
off (the stacked passes segment-sum with their own pieces); ``gpu_fused_gramvec`` by ``gramvec``;
``gpu_stacked`` by ``fused_lmm``/``fused_tmm``/``fused_colsums``/``fused_rowsums``
(``rules._stacked``).
"""

import contextlib
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ilargi import config_context
from tests.backends import to_host
from tests.strategies import assert_close, cases, dense_operand, property_settings, wide_star

gpu = pytest.mark.gpu
SEEDS = st.integers(0, 2**32 - 1)
EXAMPLES = 12  # each example compiles nothing new after the first: keep the device run short
REPO = Path(__file__).resolve().parents[2]
CUDA_SOURCE = REPO / "ilargi" / "backend" / "cuda" / "ilargi.cu"


def _cupy():
    import cupy

    return cupy


@contextlib.contextmanager
def flags(**values):
    """The GPU settings (``gpu_segment_sum``, ``gpu_stacked``, ``gpu_fused_gramvec``, read when
    each kernel runs, see ilargi.backend.gpu.flags) for the block; yields the backend."""
    from ilargi.backend import gpu as kernels

    with config_context(**values):
        yield kernels


@contextlib.contextmanager
def recording(*names):
    """Wrap functions of ilargi.backend.gpu for the block; yields the list of (name, returned
    something other than None) of every call, in order."""
    from ilargi.backend import gpu as kernels

    calls, saved = [], {name: getattr(kernels, name) for name in names}

    def wrap(name, function):
        def recorded(*args, **kwargs):
            result = function(*args, **kwargs)
            calls.append((name, result is not None))
            return result

        return recorded

    try:
        for name, function in saved.items():
            setattr(kernels, name, wrap(name, function))
        yield calls
    finally:
        for name, function in saved.items():
            setattr(kernels, name, function)


@gpu
@property_settings(EXAMPLES)
@given(case=cases())
def test_round_trip_is_exact(case):
    cpu = case.build()
    nm = cpu.to("gpu")
    assert nm.device == "gpu" and nm.to("gpu") is nm
    back = nm.to("cpu")
    assert back.device == "cpu" and back.shape == cpu.shape
    for before, after in zip(cpu.parts, back.parts):
        assert np.array_equal(before.cols, after.cols)
        assert (before.indicator.rows is None) == (after.indicator.rows is None)
        if before.indicator.rows is not None:
            assert np.array_equal(before.indicator.rows, after.indicator.rows)
        source_before, source_after = before.source, after.source
        assert sp.issparse(source_before) == sp.issparse(source_after)
        if sp.issparse(source_before):
            source_before, source_after = source_before.toarray(), source_after.toarray()
        assert np.array_equal(source_before, source_after)
    assert np.array_equal(np.asarray(back), np.asarray(cpu))
    assert np.array_equal(np.asarray(nm), np.asarray(cpu))


def _segment_sum_reference(Y, rows, n_source):
    out = np.zeros((n_source,) + Y.shape[1:])
    present = rows >= 0
    np.add.at(out, rows[present], Y[present])
    return out


@gpu
@pytest.mark.parametrize("method", ["pieces", "atomic", "csr"])
@property_settings(EXAMPLES)
@given(case=cases(transpose=False), seed=SEEDS)
def test_segment_sum_variants(method, case, seed):
    """Every gpu_segment_sum mode computes s(Y, rows) = Iᵀ·Y: kernels.segment_sum on each indicator
    of the matrix against np.add.at, and the operators that call it part by part (gpu_stacked off:
    Tᵀ·Y through rules.tmm, snowflake folds included; a weighted crossprod's s(w, rows_p))."""
    cp = _cupy()
    nm, expected = case.build().to("gpu"), case.expected
    n = expected.shape[0]
    Y = dense_operand(seed, (n, 2))
    w = dense_operand(seed + 1, (n,)) + 0.5
    with flags(gpu_segment_sum=method) as kernels:
        for part in nm.parts:
            ind = part.indicator
            if ind.is_identity:
                continue
            for operand in (Y, Y[:, 0]):
                reference = _segment_sum_reference(operand, to_host(ind.rows), ind.n_source)
                assert_close(
                    kernels.segment_sum(cp.asarray(operand), ind),
                    reference,
                    what=f"{method} segment_sum",
                    backend="gpu",
                )
        with flags(gpu_stacked=False), recording("segment_sum") as calls:
            assert_close(
                nm.T @ cp.asarray(Y), expected.T @ Y, what=f"{method} T^T Y", backend="gpu"
            )
            assert_close(
                nm.T @ cp.asarray(Y[:, 0]),
                expected.T @ Y[:, 0],
                what=f"{method} T^T y",
                backend="gpu",
            )
            assert_close(
                nm.crossprod(cp.asarray(w)),
                expected.T @ (w[:, None] * expected),
                what=f"{method} crossprod(w)",
                backend="gpu",
            )
        # Tᵀ·Y: once per table (at least one) for each of the two products; crossprod(w): once per part.
        assert len(calls) >= 2 + len(nm.parts), f"segment_sum not called part by part: {calls}"


@gpu
@pytest.mark.parametrize("fused", [True, False])
@property_settings(EXAMPLES)
@given(
    case=cases(transpose=False),
    with_v=st.booleans(),
    with_z=st.booleans(),
    alpha=st.sampled_from([1.0, -0.5]),
    beta=st.sampled_from([0.0, 2.0]),
    seed=SEEDS,
)
def test_gramvec_fused_pass_and_chain(fused, case, with_v, with_z, alpha, beta, seed):
    """gpu_fused_gramvec on: α·Tᵀ(v⊙(T·y)) + β·z is the one fused stacked pass (it applies to a 1-D
    y on T itself, as here); off: the operator chain. Both equal the materialized table."""
    cp = _cupy()
    nm, expected = case.build().to("gpu"), case.expected
    rows, cols = expected.shape
    rng = np.random.default_rng(seed)
    y, v, z = rng.uniform(-1, 1, cols), rng.uniform(-1, 2, rows), rng.uniform(-1, 1, cols)
    with flags(gpu_fused_gramvec=fused, gpu_stacked=True), recording("gramvec") as calls:
        out = nm.gramvec(
            cp.asarray(y),
            v=cp.asarray(v) if with_v else None,
            alpha=alpha,
            beta=beta,
            z=cp.asarray(z) if with_z else None,
        )
    assert calls == [("gramvec", fused)], f"fused pass taken: {calls}, gpu_fused_gramvec={fused}"
    reference = alpha * (expected.T @ ((v if with_v else 1.0) * (expected @ y)))
    if with_z:
        reference = reference + beta * z
    assert out.shape == (cols,)
    assert_close(out, reference, what=f"gramvec fused={fused}", backend="gpu")


STACKED_PASSES = ("fused_lmm", "fused_tmm", "fused_colsums", "fused_rowsums")


@gpu
@pytest.mark.parametrize("fact_width", [5, 40, 64])
@pytest.mark.parametrize("stacked", [True, False])
def test_stacked_passes_on_wide_shapes(fact_width, stacked):
    """The stacked passes (gpu_stacked on) and the part-by-part rules (off) on a star built to take
    every branch of the stacked kernels (see strategies.wide_star)."""
    cp = _cupy()
    cpu, T0 = wide_star(fact_width, np.float64)
    rng = np.random.default_rng(1)
    a, b = rng.uniform(0.5, 2.0, T0.shape[1]), rng.uniform(-1, 1, T0.shape[1])
    with flags(gpu_stacked=stacked), recording(*STACKED_PASSES) as calls:
        for nm, T in ((cpu.to("gpu"), T0), ((cpu * a + b).to("gpu"), T0 * a + b)):
            n, d = T.shape
            x, X3 = rng.standard_normal(d), rng.standard_normal((d, 3))
            y, Y3, v = rng.standard_normal(n), rng.standard_normal((n, 3)), rng.random(n)
            checks = [
                (nm @ cp.asarray(x), T @ x, "T x"),
                (nm @ cp.asarray(X3), T @ X3, "T X"),
                (cp.asarray(y) @ nm, y @ T, "y T"),
                (nm.T @ cp.asarray(Y3), T.T @ Y3, "T^T Y"),
                (nm.sum(axis=0), T.sum(axis=0), "colSums"),
                (nm.sum(axis=1), T.sum(axis=1), "rowSums"),
                (nm.crossprod(), T.T @ T, "crossprod"),
                (nm.crossprod(cp.asarray(v)), T.T @ (v[:, None] * T), "crossprod(w)"),
                (
                    nm.gramvec(cp.asarray(x), v=cp.asarray(v), alpha=0.5),
                    0.5 * T.T @ (v * (T @ x)),
                    "gramvec",
                ),
            ]
            for result, reference, what in checks:
                assert_close(result, reference, what=f"{what}, stacked={stacked}", backend="gpu")
    assert {name for name, _ in calls} >= {"fused_lmm", "fused_tmm", "fused_colsums"}, calls
    assert all(taken == stacked for _, taken in calls), (
        f"stacked passes taken: {calls}, gpu_stacked={stacked}"
    )


# ---------------------------------------------------------------------------------------------
# Out of memory: a clear error naming the operation, before anything is allocated.


def _free_bytes():
    from ilargi.backend import gpu as kernels

    return kernels.free_memory()


@gpu
def test_materialize_beyond_device_memory_raises_clearly():
    from ilargi import NormalizedMatrix
    from ilargi.backend.gpu import DeviceMemoryError

    n = 4_000_000
    d = int(2 * _free_bytes() / (8 * n)) + 1
    nm = NormalizedMatrix.from_parts(
        [np.ones((1, d))], [np.zeros(n, dtype=np.int64)], [np.arange(d)], (n, d)
    ).to("gpu")
    with pytest.raises(DeviceMemoryError, match="materializing a dense"):
        nm.materialize()
    assert issubclass(DeviceMemoryError, MemoryError)


@gpu
def test_crossprod_and_tcrossprod_beyond_device_memory_raise_clearly():
    from ilargi import NormalizedMatrix
    from ilargi.backend.gpu import DeviceMemoryError

    side = int(np.sqrt(2 * _free_bytes() / 8)) + 1
    wide = NormalizedMatrix.from_parts(
        [np.ones((1, side))], [np.zeros(2, dtype=np.int64)], [np.arange(side)], (2, side)
    ).to("gpu")
    with pytest.raises(DeviceMemoryError, match="crossprod"):
        wide.crossprod()
    tall = NormalizedMatrix.from_parts(
        [np.ones((1, 2))], [np.zeros(side, dtype=np.int64)], [np.arange(2)], (side, 2)
    ).to("gpu")
    with pytest.raises(DeviceMemoryError, match="tcrossprod"):
        tall.tcrossprod(max_bytes=10**18)


# ---------------------------------------------------------------------------------------------
# The CUDA sources: what Python launches is defined there, and it compiles.


def _launched_kernels():
    """Kernel names the Python code launches ("ilargi_..." string literals), in any module of ilargi
    (the GPU backend, the graphed steps; wherever a split puts them)."""
    names = set()
    for module in sorted((REPO / "ilargi").rglob("*.py")):
        names |= set(re.findall(r'"(ilargi_\w+)"', module.read_text()))
    return names


def test_every_launched_kernel_is_defined_and_used():
    defined = set(re.findall(r"__global__\s+void\s+(ilargi_\w+)\s*\(", CUDA_SOURCE.read_text()))
    launched = _launched_kernels()
    assert launched, "no kernel launch found in ilargi/"
    assert launched <= defined, (
        f"launched but not in {CUDA_SOURCE.name}: {sorted(launched - defined)}"
    )
    assert defined <= launched, f"defined but never launched: {sorted(defined - launched)}"


@pytest.mark.parametrize("real", ["float", "double"])
def test_cuda_sources_compile(real, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("GPU test skipped: no CUDA toolkit (nvcc) to compile-check the kernels")
    result = subprocess.run(
        [
            nvcc,
            "--ptx",
            "-arch=sm_90",
            f"-DREAL={real}",
            "-o",
            str(tmp_path / "ilargi.ptx"),
            str(CUDA_SOURCE),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    ptx = (tmp_path / "ilargi.ptx").read_text()
    launched = _launched_kernels()
    assert launched and all(f".entry {name}(" in ptx for name in launched), launched
