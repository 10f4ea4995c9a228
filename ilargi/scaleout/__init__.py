"""Scale-out on Dask: the same NormalizedMatrix, operators and estimators over partitions of rows.

A user's fact table outgrows one machine long before its dimension tables do. Here the fact table
and every index vector are split by target rows into partitions, the dimension sources are placed
once on every worker, and each operator runs the in-memory matrix's own kernels on every partition:
products and row sums give row-chunked Dask arrays, reductions (Tᵀ·Y, moments, crossprod, gramvec,
the fused loss + gradient of one training iteration, k-means' cluster sums) give d-sized partials
combined by one tree reduction. The estimators of :mod:`ilargi.models` run unchanged on the result,
one distributed pass per iteration.

* :func:`from_normalized` (``nm.to_dask(chunks)``): an in-memory matrix split into partitions;
* ``Table.from_parquet(path, chunks=...)`` (:class:`ChunkedTable`): a fact table read by the
  workers from Parquet, merged with dimension tables (broadcast) or big ones read per partition
  by key range; ``to_matrix`` gives a :class:`DaskNormalizedMatrix` and a Dask target.

Dask (``pip install ilargi[dask]``) runs it: on the current ``distributed.Client`` if there is
one, Dask's default scheduler otherwise; a lost worker's tasks are recomputed from their lineage.
"""

import uuid

import dask  # noqa: F401  (the optional extra this package needs; its absence is said at import)
import numpy as np

from . import graph
from .graph import Shared, current_client
from .matrix import MAX_GATHER_BYTES, DaskNormalizedMatrix, GatherRefused
from .options import persist_choice, row_bounds
from .pieces import split

__all__ = [
    "ChunkedTable",
    "DaskNormalizedMatrix",
    "GatherRefused",
    "MAX_GATHER_BYTES",
    "from_normalized",
    "row_bounds",
]


def from_normalized(nm, chunks, persist=True):
    """An in-memory NormalizedMatrix split into Dask partitions of rows (``nm.to_dask``).

    With a ``distributed.Client``, every partition's piece (fact rows, index vectors) is sent to
    the workers once, keeping its lineage (a lost worker's pieces are sent again), and the
    dimension sources are broadcast on first use.

    Parameters
    ----------
    nm : NormalizedMatrix
    chunks : int or sequence of int
        Rows per partition, or each partition's rows (integers: a float such as 1000.0 is
        refused, see :mod:`ilargi.scaleout.options`).
    persist : bool, default True
        Also build and keep every partition's matrix on the workers.

    Returns
    -------
    DaskNormalizedMatrix

    Raises
    ------
    TypeError
        For ``chunks`` that are not whole numbers of rows.
    ValueError
        For a count below 1, sizes that do not sum to the rows, or a ``persist`` that is not a
        bool.
    """
    from dask import delayed

    persist = persist_choice(persist, disk=False)
    if nm.transposed:
        return from_normalized(nm.T, chunks, persist).T
    n = nm.shape[0]
    bounds = row_bounds(n, chunks)
    layout, dims, pieces = split(nm, bounds)
    token = uuid.uuid4().hex
    sources = [delayed(piece, name=f"ilargi-piece-{token}-{i}") for i, piece in enumerate(pieces)]
    if current_client() is not None:
        sources = graph.persist(sources)
    out = DaskNormalizedMatrix(
        layout,
        Shared(dims),
        sources,
        np.diff(bounds),
        dtype=nm.dtype,
        nonfinite=nm.nonfinite(),
        origin="to_dask",
    )
    return out.persist() if persist else out


def __getattr__(name):
    if name == "ChunkedTable":
        from .tables import ChunkedTable

        return ChunkedTable
    raise AttributeError(f"module 'ilargi.scaleout' has no attribute {name!r}")
