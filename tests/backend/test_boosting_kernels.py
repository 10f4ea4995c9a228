"""A boosting round's leaf values added and the next gradients made in one pass: the compiled
kernel gives the bytes of the NumPy twin and of the two passes it replaces."""

import numpy as np
import pytest

import ilargi
from ilargi.backend import cpu

compiled = pytest.importorskip("ilargi.backend.compiled")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_leaf_values_and_residuals_in_one_pass_are_the_two_passes(threads, dtype):
    rng = np.random.default_rng(11)
    n = 600_001
    labels = rng.integers(0, 31, n).astype(dtype)
    values = rng.standard_normal(31) * 1e-3
    start = rng.standard_normal(n) * 1e3 + np.float64(np.float32(0.1)) * 2.0**-30
    y = (rng.standard_normal(n) * 1e3).astype(np.float32)
    ours, theirs, two = start.copy(), start.copy(), start.copy()
    g_ours, g_theirs, g_two = (np.empty(n, np.float32) for _ in range(3))
    with ilargi.threads(threads):
        total = compiled.add_by_label_residuals(ours, values, labels, y, g_ours)
    assert cpu.add_by_label_residuals(theirs, values, labels, y, g_theirs) == total
    # the next tree's Σg, made in the same pass: np.sum's bits
    assert np.float64(total).tobytes() == np.sum(g_ours, dtype=np.float64).tobytes()
    compiled.add_by_label(two, values, labels)
    compiled.residuals(two, y, g_two)
    for score, g in ((theirs, g_theirs), (two, g_two)):
        np.testing.assert_array_equal(ours, score)
        np.testing.assert_array_equal(g_ours, g)


def test_a_regressors_rounds_fused_or_not_grow_the_same_trees(monkeypatch):
    """The squared error's fused round against add_by_label and residuals apart: the same model
    text, and the fused pass taken every round after the first."""
    from ilargi.models import gbdt_objectives

    rng = np.random.default_rng(12)
    X = rng.standard_normal((3000, 4))
    y = X @ [1.0, -2.0, 0.5, 0.0] + rng.standard_normal(3000)
    calls = []
    fused = gbdt_objectives.L2.add_by_label

    def counted(self, score, values, labels):
        calls.append(1)
        return fused(self, score, values, labels)

    model = ilargi.GradientBoostingRegressor(n_estimators=12, plan="factorized")
    monkeypatch.setattr(gbdt_objectives.L2, "add_by_label", counted)
    text = model.fit(X, y).model_to_string()
    assert len(calls) == 12
    monkeypatch.setattr(gbdt_objectives.L2, "add_by_label", lambda *args: False)
    assert model.fit(X, y).model_to_string() == text


@pytest.mark.parametrize("threads", [1, 2])
def test_the_parallel_gradient_sum_has_numpys_bits(threads):
    """A tree's Σg in double: NumPy's buffers of 8192 values, each summed pairwise, added in
    order; summed in parallel, the same bits at every length (buffer edges, pairwise halves,
    the tails under 8), for values of many magnitudes and for negative zeros."""
    rng = np.random.default_rng(13)
    lengths = [0, 1, 7, 9, 127, 129, 8191, 8193, 65535, 65536, 65537, 70_001, 1_000_003]
    for n in lengths:
        spread = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 9, n)
        for a in (spread.astype(np.float32), -np.zeros(n, np.float32)):
            want = np.sum(a, dtype=np.float64)
            with ilargi.threads(threads):
                got = compiled.sum_float64(a)
            assert np.float64(got).tobytes() == want.tobytes(), n
            assert cpu.sum_float64(a) == want


def test_the_sum_kernel_is_numpys_sum_for_any_buffer():
    """The kernel itself (which sum_float64 calls on long vectors at several threads), at
    buffer sizes other than NumPy's default: np.setbufsize changes NumPy's buffers alike."""
    from ilargi.backend.compiled.kernels import buffered_sum_kernel

    rng = np.random.default_rng(14)
    a = (rng.standard_normal(100_003) * 1e4).astype(np.float32)
    for block in (16, 1008, 8192, 50_000):
        old = np.setbufsize(block)
        try:
            want = np.sum(a, dtype=np.float64)
        finally:
            np.setbufsize(old)
        got = buffered_sum_kernel(a, block, np.empty(-(-a.size // block)))
        assert np.float64(got).tobytes() == want.tobytes(), block
