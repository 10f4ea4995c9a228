"""The compiled leaf pass with kept buffers (``scratch``): only the rows a leaf reaches are
zeroed and listed, and every leaf's sums and histograms are still the same bytes as those of
new buffers and of the NumPy pass."""

import numpy as np
import pytest

import ilargi
from ilargi.backend import cpu, cpu_kernels

compiled = pytest.importorskip("ilargi.backend.compiled")


def _tables(rng, n, sizes):
    keys = np.stack([rng.integers(-1, size, n) for size in sizes]).astype(np.int32)
    return np.asfortranarray(keys)


@pytest.mark.parametrize("threads", [1, 2])
def test_leaves_in_turn_with_kept_buffers_equal_new_buffers_and_numpy(threads):
    rng = np.random.default_rng(3)
    n, sizes = 30_000, [5, 4000, 20_000]
    R = _tables(rng, n, sizes)
    codes = rng.integers(0, 6, (n, 2)).astype(np.uint8)
    g = rng.standard_normal(n).astype(np.float32)
    h = rng.random(n).astype(np.float32)
    scratch: dict = {}
    with cpu_kernels("compiled"), ilargi.threads(threads):
        # big leaves (two blocks), small ones (a few rows of big tables), one row, and a
        # second layout of tables in between (its own buffers)
        for m, sel in [
            (n, [0, 1, 2]),
            (300, [0, 1, 2]),
            (20_000, [2]),
            (1, [0, 1, 2]),
            (7000, [0, 1, 2]),
            (50, [2]),
            (29_000, [0, 1, 2]),
            (2, [0, 1, 2]),
        ]:
            idx = np.sort(rng.choice(n, m, replace=False)).astype(np.intp)
            n_outs = [sizes[t] + 1 for t in sel]
            got, hist = compiled.leaf_pass(R, sel, n_outs, codes, idx, g, h, 6, None, True, scratch)
            fresh, fresh_hist = compiled.leaf_pass(R, sel, n_outs, codes, idx, g, h, 6)
            ref, ref_hist = cpu.leaf_pass(R, sel, n_outs, codes, idx, g, h, 6)
            for a, b, c in zip(got, fresh, ref):
                assert a.tobytes() == b.tobytes()
                np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)
            assert hist.tobytes() == fresh_hist.tobytes()
            stacked = np.concatenate(got)
            held = scratch["held"]
            if 16 * m * len(sel) < stacked.shape[0]:  # a small leaf lists the rows it reaches
                assert np.array_equal(held, np.flatnonzero(stacked[:, 2]))  # each, once
            else:
                assert held is None
