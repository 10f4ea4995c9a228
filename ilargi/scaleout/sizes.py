"""How big a partition is, for Dask's scheduler: ``dask.sizeof`` of a partition's matrix and piece.

The scheduler decides where tasks run from the sizes of their inputs; without these it would take
a partition's matrix for a 100-byte object (``sys.getsizeof``) and move it to an idle worker as if
it were free (work stealing), sending its fact rows and the dimension sources with it. Registered
when the tasks' module is imported, in the client and in every worker.
"""

import numpy as np
import scipy.sparse as sp
from dask.sizeof import sizeof

from ilargi.rewriter import NormalizedMatrix

from .pieces import Piece


def array_bytes(a):
    """Bytes of a NumPy array or SciPy sparse matrix (0 for anything else)."""
    if isinstance(a, np.ndarray):
        return int(a.nbytes)
    if sp.issparse(a):
        return sum(
            int(getattr(a, name).nbytes)
            for name in ("data", "indices", "indptr", "row", "col")
            if hasattr(a, name)
        )
    return 0


def matrix_bytes(nm):
    """The arrays a NormalizedMatrix holds: every part's source, index vector and mapping."""
    total = 0
    for part in nm.parts:
        total += array_bytes(part.source) + array_bytes(np.asarray(part.cols))
        rows = getattr(part.indicator, "rows", None)
        total += array_bytes(rows) if rows is not None else 0
    return total + 8 * 2 * nm.shape[1]  # the affine state


@sizeof.register(NormalizedMatrix)
def _sizeof_matrix(nm):
    return matrix_bytes(nm)


@sizeof.register(Piece)
def _sizeof_piece(piece):
    return piece.nbytes
