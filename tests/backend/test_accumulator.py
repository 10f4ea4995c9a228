"""The CPU backend's BlockAccumulator: the d × d sum of blocks at (rows, cols), dense or sparse,
equal to the sum of the blocks placed one by one; the sparse result canonical (sorted indices, no
duplicates) on every path: blocks in disjoint cells (crossprod's), cells shared, columns
interleaved, a row repeated in one block, dense and empty blocks."""

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import compiled, cpu


def _blocks(rng, d, layout):
    """[(rows, cols, block)] of the layout asked for."""
    if layout == "parts":  # crossprod's: the parts' columns, each pair once
        bounds = [0, 3, 9, 10, 17, d]
        parts = [np.arange(a, b) for a, b in zip(bounds, bounds[1:])]
        parts[1] = rng.permutation(parts[1])  # a part whose columns are not in order
        return [
            (p, q, sp.random_array((p.size, q.size), density=0.4, random_state=rng).tocsr())
            for p in parts
            for q in parts
        ]
    if layout == "shared":  # cells added twice, columns interleaved
        return [
            (
                rng.choice(d, 6, replace=False),
                rng.choice(d, 5, replace=False),
                sp.random_array((6, 5), density=0.5, random_state=rng),
            )
            for _ in range(8)
        ]
    if layout == "transposed":  # crossprod's mirrored blocks (CSC) and unsorted SciPy products
        bounds = [0, 4, 11, 16, d]
        parts = [np.arange(a, b) for a, b in zip(bounds, bounds[1:])]
        out = []
        for i, p in enumerate(parts):
            for q in parts[i:]:
                block = sp.random_array((p.size, q.size), density=0.5, random_state=rng).tocsr()
                shuffled = unsorted_rows(block, rng)
                out.append((p, q, shuffled))
                if q is not p:
                    out.append((q, p, shuffled.T))
        return out
    if layout == "mixed":  # dense, empty and repeated-row blocks
        return [
            (np.array([1, 4]), np.array([0, 2, 7]), rng.standard_normal((2, 3))),
            (np.array([5]), np.array([3]), sp.csr_array((1, 1))),
            (np.array([2, 2, 9]), np.array([1, 8]), sp.csr_array(rng.standard_normal((3, 2)))),
            (np.array([2]), np.array([1]), np.array([[1.5]])),
        ]
    raise ValueError(layout)


def unsorted_rows(block, rng):
    """A CSR with the entries of each row of ``block`` in random order."""
    out = block.copy()
    for i in range(out.shape[0]):
        lo, hi = out.indptr[i], out.indptr[i + 1]
        order = rng.permutation(hi - lo)
        out.indices[lo:hi], out.data[lo:hi] = out.indices[lo:hi][order], out.data[lo:hi][order]
    out.has_sorted_indices = False
    return out


# The compiled accumulator on both of its routes: one thread for small blocks, or row blocks.
ACCUMULATORS = {
    "cpu": cpu.BlockAccumulator,
    "compiled": compiled.BlockAccumulator,
    "compiled, parallel": compiled.BlockAccumulator,
}


@pytest.mark.parametrize("layout", ["parts", "shared", "mixed", "transposed"])
@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("kind", ACCUMULATORS)
def test_the_sum_of_the_blocks_placed_one_by_one(layout, sparse, kind, monkeypatch):
    if kind == "compiled, parallel":
        monkeypatch.setattr(compiled, "SMALL_CSR", 0)
    rng = np.random.default_rng(0)
    d = 20
    blocks = _blocks(rng, d, layout)
    acc = ACCUMULATORS[kind](d, sparse)
    expected = np.zeros((d, d))
    for rows, cols, block in blocks:
        acc.add(rows, cols, block)
        dense = block.toarray() if sp.issparse(block) else block
        for i, r in enumerate(rows):
            expected[r, cols] += dense[i]
    out = acc.result()
    if sparse:
        assert sp.issparse(out) and out.format == "csr" and out.shape == (d, d)
        assert out.has_canonical_format
        out = out.toarray()
    np.testing.assert_allclose(out, expected, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("kind", ["cpu", "compiled"])
def test_an_empty_sparse_accumulator_is_an_empty_csr(kind):
    out = ACCUMULATORS[kind](4, True).result()
    assert out.format == "csr" and out.shape == (4, 4) and out.nnz == 0


def test_the_compiled_accumulator_leaves_the_callers_blocks_as_they_are():
    rng = np.random.default_rng(1)
    block = unsorted_rows(sp.random_array((5, 6), density=0.6, random_state=rng).tocsr(), rng)
    before = block.indices.copy(), block.data.copy()
    acc = compiled.BlockAccumulator(6, True)
    acc.add(np.arange(5), np.arange(6), block)
    acc.result()
    assert np.array_equal(block.indices, before[0]) and np.array_equal(block.data, before[1])
