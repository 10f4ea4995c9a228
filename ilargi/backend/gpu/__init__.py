"""The CuPy backend: the GPU twin of :mod:`ilargi.backend.cpu`, plus stacked passes.

This package is the backend module the rules receive from :func:`ilargi.backend.backend_of`; it
gives every kernel of :class:`ilargi.backend.contract.Backend` and the stacked optional ones.
It is imported only when a CuPy array shows up (CuPy is an optional dependency). Its modules,
low to high:

* :mod:`.flags` -- switches between alternative kernels (settings of :func:`ilargi.get_config`);
* :mod:`.device` -- compiling and launching the kernels of ``cuda/ilargi.cu``, device memory
  checks (:class:`DeviceMemoryError`), small device constants;
* :mod:`.pieces` -- the :class:`Pieces` engine, sparse products with long rows cut into pieces;
* :mod:`.arrays` -- host/device conversions, CSR helpers, structures derived from indicators;
* :mod:`.primitives` -- one function per kernel of the CPU backend (gather, segment sum, ...);
* :mod:`.stacked` -- the stacked passes over all parts (:class:`RowPlan`, ``fused_*``,
  :func:`gramvec`);
* :mod:`.graphs` -- training steps captured as CUDA graphs (logistic GD, k-means Lloyd), on parts
  and the affine state; imported on its own (``from ilargi.backend.gpu import graphs``).
"""

import cupy as cp

from ..links import BinaryLink, MultinomialLink  # the links run on CuPy arrays as they are
from . import flags
from .arrays import (
    absent_positions,
    as_csr,
    asnumpy,
    bucket_rows,
    csr,
    is_sparse,
    move_array,
    move_source,
    rows32,
    safe_rows,
    segments,
    to_dense,
)
from .device import (
    DeviceMemoryError,
    check_memory,
    fill_zero,
    free_memory,
    kernel,
    launch,
    real_dtype,
)
from .pieces import Pieces
from .primitives import (
    BlockAccumulator,
    column_min_max,
    column_sums,
    cooccurrence,
    counts,
    gather,
    gather_add,
    map_source,
    materialize_dense,
    materialize_sparse,
    product,
    row_min,
    row_sums,
    scale_columns,
    scale_rows,
    segment_sum,
    select_columns,
    select_rows,
    square_excess,
    transposed_product,
    weighted_gram,
    zero_rows,
)
from .stacked import (
    RowPlan,
    fused_colsums,
    fused_cross_block,
    fused_lmm,
    fused_rowsums,
    fused_tmm,
    gramvec,
    row_plan,
)

xp = cp
name = "gpu"

__all__ = [
    "BinaryLink",
    "BlockAccumulator",
    "DeviceMemoryError",
    "MultinomialLink",
    "Pieces",
    "RowPlan",
    "absent_positions",
    "as_csr",
    "asnumpy",
    "bucket_rows",
    "check_memory",
    "column_min_max",
    "column_sums",
    "cooccurrence",
    "counts",
    "csr",
    "fill_zero",
    "flags",
    "free_memory",
    "fused_colsums",
    "fused_cross_block",
    "fused_lmm",
    "fused_rowsums",
    "fused_tmm",
    "gather",
    "gather_add",
    "gramvec",
    "is_sparse",
    "kernel",
    "launch",
    "map_source",
    "materialize_dense",
    "materialize_sparse",
    "move_array",
    "move_source",
    "name",
    "product",
    "real_dtype",
    "row_min",
    "row_plan",
    "row_sums",
    "rows32",
    "safe_rows",
    "scale_columns",
    "scale_rows",
    "segment_sum",
    "segments",
    "select_columns",
    "select_rows",
    "square_excess",
    "to_dense",
    "transposed_product",
    "weighted_gram",
    "xp",
    "zero_rows",
]
