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
            one_block = min(threads, m // 1024, 4 * m // stacked.shape[0]) <= 1
            if one_block:  # a leaf of one block lists the rows it reaches
                assert np.array_equal(held, np.flatnonzero(stacked[:, 2]))  # each, once
            else:
                assert held is None


@pytest.mark.parametrize("threads", [1, 2])
def test_what_the_pass_prefetches_changes_no_byte(threads, monkeypatch):
    # the cut-offs choose which lines a leaf's rows prefetch (none extra; the default; every
    # line of every leaf and every table's rows of sums): every leaf's sums and histograms the
    # same bytes, the root (no list) included
    rng = np.random.default_rng(5)
    n, sizes = 40_000, [3, 9000, 30_000]
    R = _tables(rng, n, sizes)
    codes = rng.integers(0, 200, (n, 7)).astype(np.uint8)  # rows of 7 bytes straddle lines
    g = rng.standard_normal(n).astype(np.float32)
    h = np.broadcast_to(np.float32(1.0), (1,))
    n_outs = [size + 1 for size in sizes]
    leaves = [None] + [
        np.sort(rng.choice(n, m, replace=False)).astype(np.intp) for m in (30_000, 4000, 40)
    ]
    results = []
    with cpu_kernels("compiled"), ilargi.threads(threads):
        for sparse_leaf, far_sums in [(0, 1 << 62), (8, 8192), (n + 1, 1)]:
            monkeypatch.setattr(compiled, "SPARSE_LEAF", sparse_leaf)
            monkeypatch.setattr(compiled, "FAR_SUMS", far_sums)
            passes = [
                compiled.leaf_pass(R, [0, 1, 2], n_outs, codes, idx, g, h, 200, None, False)
                for idx in leaves
            ]
            results.append(
                [b"".join(s.tobytes() for s in sums) + hist.tobytes() for sums, hist in passes]
            )
    assert results[0] == results[1] == results[2]


def test_the_pass_by_row_over_the_held_rows_alone_gives_the_same_bytes():
    from ilargi.rewriter.histograms import BinnedMatrix
    from tests.rewriter.test_histograms import _one_hot_star

    nm, rng = _one_hot_star(1, n=5000, dims=((50, 90), (700, 760)))
    n = nm.shape[0]
    binned = BinnedMatrix.from_matrix(nm)
    g, h = rng.standard_normal(n).astype(np.float32), rng.random(n).astype(np.float32)
    columns, by_row = binned._sparse_layout
    R, position = binned._keys()
    sel = [position[t] for t in binned.sparse]
    n_outs = [binned.tables[t].n_rows for t in binned.sparse]
    scratch: dict = {}
    with cpu_kernels("compiled"):
        for m in (3, 20, 1, 11):  # small leaves (at most 23 rows here): their rows are listed
            idx = np.sort(rng.choice(n, m, replace=False)).astype(np.intp)
            sums, _ = compiled.leaf_pass(R, sel, n_outs, None, idx, g, h, 1, None, True, scratch)
            stacked, held = np.concatenate(sums), scratch["held"]
            assert held is not None and np.array_equal(held, np.flatnonzero(stacked[:, 2]))
            totals = np.array([g[idx].sum(dtype=np.float64), h[idx].sum(dtype=np.float64), m])
            every = np.ones(len(sel), bool)
            ours, theirs = np.zeros((2, binned.total_bins, 3))
            compiled.sparse_histograms(columns, by_row, stacked, totals, ours, m, every, True, held)
            compiled.sparse_histograms(columns, by_row, stacked, totals, theirs, m, every)
            assert ours.tobytes() == theirs.tobytes()


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_leaf_values_added_by_label_are_numpys(dtype):
    """A tree's leaf values added to every row's score by its leaf's label: the compiled kernel
    and the NumPy blocks give the same bytes (one addition a row), on more rows than a block."""
    rng = np.random.default_rng(5)
    n = 600_000
    labels = rng.integers(0, 31, n).astype(dtype)
    values = rng.standard_normal(31)
    start = rng.standard_normal(n)
    ours, theirs = start.copy(), start.copy()
    compiled.add_by_label(ours, values, labels)
    cpu.add_by_label(theirs, values, labels)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(theirs, start + values[labels])


def test_squared_errors_residuals_are_numpys():
    """score - y in double, rounded to single precision: the compiled kernel and NumPy's
    subtract into a float32 array give the same bytes (values near float32's rounding ties)."""
    rng = np.random.default_rng(6)
    n = 300_001
    score = rng.standard_normal(n) * 1e3 + np.float64(np.float32(0.1)) * 2.0**-30
    y = (rng.standard_normal(n) * 1e3).astype(np.float32)
    ours, theirs = np.empty(n, np.float32), np.empty(n, np.float32)
    compiled.residuals(score, y, ours)
    cpu.residuals(score, y, theirs)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(theirs, (score - y.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("every", [False, True])
@pytest.mark.parametrize("list_type", [np.int32, np.intp])
def test_a_split_of_a_large_leaf_in_blocks_is_numpys(every, list_type):
    """A leaf of many rows splits in one block a thread, then the blocks' moved and kept rows
    are moved down their lists, one list a thread: the same lists and labels as NumPy's split,
    stale rows (another label) dropped."""
    rng = np.random.default_rng(8)
    n = 300_000
    codes = rng.integers(0, 9, (n, 1)).astype(np.uint8)
    labels = np.where(rng.random(n) < 0.1, 3, 0).astype(np.uint8)  # 3: rows that moved before
    if every:
        labels[:] = 0
    lst = np.arange(n, dtype=list_type) if every else np.sort(rng.choice(n, 200_000, False))
    lst = lst.astype(list_type)
    results = []
    for kernels in (compiled, cpu):
        ours_lst = rng.integers(0, n, lst.size).astype(list_type) if every else lst.copy()
        ours_labels, out = labels.copy(), np.empty(lst.size + 1, dtype=list_type)
        with ilargi.threads(2):
            moved, kept = kernels.split_rows(
                ours_lst, ours_labels, 0, 1, codes, None, 0, 4, True, out, every
            )
        results.append((out[:moved].copy(), ours_lst[:kept].copy(), ours_labels))
    for ours, theirs in zip(*results):
        np.testing.assert_array_equal(ours, theirs)
    assert results[0][0].size > 50_000 and results[0][1].size > 50_000
