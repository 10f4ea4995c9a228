"""Sparse products on *pieces*: the engine behind the GPU's segment sums and stacked products.

A CSR row longer than PIECE entries is cut into pieces, a group of lanes per piece
(``ilargi_csr_mm``), so a 45-row dimension taken by 400k rows spreads over the GPU like a uniform
one.
"""

import cupy as cp
import numpy as np

from .device import INT32_LIMIT, contiguous, dummy, fill_zero, launch

PIECE = 128  # most entries of a CSR row one lane group sums; longer rows are cut into pieces


class Pieces:
    """A CSR matrix with rows cut into pieces of at most PIECE entries, as ilargi_csr_mm reads it.

    Built from ``indptr`` (int64, one row per output row ``out_rows[r]``), ``indices`` and
    ``data`` (None: every entry is 1). A row longer than PIECE becomes several pieces that add
    into its output row atomically; otherwise each output row is written by one piece (plain
    stores, deterministic). ``group``: lanes per piece, a power of two ≤ 32 at least the mean
    piece length and an eighth of the longest, so short rows do not idle a warp and no lane
    walks more than 8 entries of a piece (the kernel's time is its longest lane's chain of loads).
    """

    def __init__(self, indptr, indices, data, out_rows):
        n_rows = int(indptr.size) - 1
        nnz = int(indptr[-1]) if n_rows > 0 else 0
        if nnz > INT32_LIMIT:
            raise ValueError(
                f"a stacked sparse product holds {nnz} entries, above the int32 "
                "indices of the GPU kernels"
            )
        per_row = cp.maximum(1, -(-cp.diff(indptr) // PIECE))
        ends = cp.cumsum(per_row)
        self.n_pieces = int(ends[-1]) if n_rows > 0 else 0
        self.atomic = self.n_pieces > n_rows
        if self.atomic:
            row = cp.searchsorted(ends, cp.arange(self.n_pieces), side="right")
            starts = indptr[row] + (cp.arange(self.n_pieces) - (ends - per_row)[row]) * PIECE
            indptr = cp.concatenate([starts, indptr[-1:]])
            out_rows = out_rows[row]
        longest = int(cp.diff(indptr).max()) if self.n_pieces else 0
        lanes = max(nnz / max(self.n_pieces, 1), longest / 8, 1.0)
        self.group = int(min(32, 2 ** int(np.ceil(np.log2(lanes)))))
        self.indptr = cp.ascontiguousarray(indptr, dtype=cp.int32)
        self.indices = cp.ascontiguousarray(indices, dtype=cp.int32)
        self.data = None if data is None else contiguous(data)
        self.real = np.dtype(np.float64) if data is None else self.data.dtype
        self.out_rows = cp.ascontiguousarray(out_rows, dtype=cp.int32)

    def run(self, X, m, out, accumulate=False, weight=None, labels=None):
        """out[out_rows] (=, or += with ``accumulate``) this · (diag(weight) X): X rows × m float64.

        ``labels``: X is the one-hot matrix of these int32 labels (m columns), not read.
        """
        if self.atomic and not accumulate:
            fill_zero(out)
        if self.n_pieces == 0:
            return out
        mode = 2 if self.atomic else int(bool(accumulate))
        # With m columns, the m pairs of a piece already spread it over lanes (reading each entry's
        # row of X in one transaction): fewer lanes per pair.
        group = max(1, self.group >> (int(m).bit_length() - 1))
        args = (
            self.indptr,
            self.indices,
            dummy(self.real) if self.data is None else self.data,
            np.int32(self.data is not None),
            dummy(np.float64) if weight is None else weight,
            np.int32(weight is not None),
            dummy(np.float64) if X is None else X,
            dummy(np.int32) if labels is None else labels,
            np.int32(labels is not None),
            np.int32(m),
            np.int32(self.n_pieces),
            self.out_rows,
            np.int32(group),
            np.int32(mode),
            out,
        )
        launch("ilargi_csr_mm", self.real, self.n_pieces * m * group, args)
        return out


def pieces_from_entries(rows, cols, data, n_rows, out_rows):
    """Pieces of the matrix with entries (rows, cols, data) in any order; row r writes out_rows[r]."""
    order = cp.argsort(rows)
    indptr = cp.zeros(n_rows + 1, dtype=cp.int64)
    if rows.size:
        indptr[1:] = cp.cumsum(cp.bincount(rows, minlength=n_rows))
    return Pieces(indptr, cols[order], data[order], out_rows)
