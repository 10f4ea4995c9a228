"""The CPU backend's BlockAccumulator: the d × d sum of blocks at (rows, cols), dense or sparse,
equal to the sum of the blocks placed one by one; the sparse result canonical (sorted indices, no
duplicates) on every path: blocks in disjoint cells (crossprod's), cells shared, columns
interleaved, a row repeated in one block, dense and empty blocks."""

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi.backend import cpu


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
    if layout == "mixed":  # dense, empty and repeated-row blocks
        return [
            (np.array([1, 4]), np.array([0, 2, 7]), rng.standard_normal((2, 3))),
            (np.array([5]), np.array([3]), sp.csr_array((1, 1))),
            (np.array([2, 2, 9]), np.array([1, 8]), sp.csr_array(rng.standard_normal((3, 2)))),
            (np.array([2]), np.array([1]), np.array([[1.5]])),
        ]
    raise ValueError(layout)


@pytest.mark.parametrize("layout", ["parts", "shared", "mixed"])
@pytest.mark.parametrize("sparse", [True, False])
def test_the_sum_of_the_blocks_placed_one_by_one(layout, sparse):
    rng = np.random.default_rng(0)
    d = 20
    blocks = _blocks(rng, d, layout)
    acc = cpu.BlockAccumulator(d, sparse)
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


def test_an_empty_sparse_accumulator_is_an_empty_csr():
    out = cpu.BlockAccumulator(4, True).result()
    assert out.format == "csr" and out.shape == (4, 4) and out.nnz == 0
