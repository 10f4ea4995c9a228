"""Compiled, multi-core CPU kernels (Numba) for the factorized passes over the target rows.

The factorized work is gathers g(U, rows) and segment-sums s(Y, rows, n_p) over the n target rows
(``docs/design.rst``, "Performance principles"); NumPy runs each on one core and one operator at a
time. Here every pass is a ``prange`` over B static, contiguous row blocks (B = the thread count,
:mod:`.threads`):

* **Stacked tables** (:class:`PassPlan`, built once per matrix): the G gathered tables' per-row
  values live in one array U of ``total + 1`` rows (table g at ``offsets[g]``), and one (G, n)
  index array R says which row of U each target row takes, ``total`` (a zero *sink* row) where the
  table is absent. So a pass has no branch and no Python loop: Σ_g U[R[g, i]] gathers every table,
  B[R[g, i]] += r_i segment-sums into all of them (the sink row collects the absent rows' values).
* **Segment sums without atomics**: each block adds into a private partial (``partials``); the
  partials are then summed in block order. Where B partials would cost more than the pass (many
  threads, large tables: B·(n_out + 1) > PARTIALS_RATIO·G·n, or over PARTIALS_BYTES), the cached
  CSR of Iᵀ is used instead (``buckets``): output rows in parallel, the target rows of each in
  increasing order.
* **Fused passes** read each fact row once per training iteration: scores from the gathered
  tables, the fact block(s) and a constant; a link (logistic, softmax, linear weights for
  ``gramvec``, k-means assignment) gives the residual; its segment-sums into every table, the
  fact blocks' transposed products and the residual's sum come out of the same pass.
* **Determinism**: blocks depend only on (n, B) and partials are summed in block order, so a
  fixed thread count gives bit-identical results; other thread counts agree to rounding (the
  ``buckets`` route is bit-identical across thread counts too).

The per-row work sits in small serial ``@njit`` routines that the parallel drivers call per block:
Numba compiles a ``prange`` body into slower code than the same loop in a function of its own,
and a 1-D loop over rows vectorizes where a 2-D loop with an inner column loop of length 1 does
not, so each routine has a 1-D body (m = 1) and a 2-D body (pruned at compile time on ``ndim``).

The jitted code is in :mod:`.kernels` (one file, see there why); kernels are compiled on first use
and cached on disk (``cache=True``): in ``__pycache__`` next to ``kernels.py``, or, where the
package folder is read-only, in the user's cache folder (~/.cache/numba), or in
``NUMBA_CACHE_DIR`` if set. The OpenMP threading layer (GNU) kills a forked child that runs a
parallel kernel after its parent did; :func:`usable` says False in such a child, where callers use
the NumPy kernels of :mod:`.cpu`.

The Python side is split by topic, low to high; this package re-exports every name of the backend
(:class:`ilargi.backend.contract.Backend`), so that ``dir()``, IDEs and Sphinx see them:

* :mod:`.kernels` -- the jitted code; :mod:`.build` -- its background build and warm-up;
* :mod:`.launch` -- the thread count and fork safety before every launch, scratch, row blocks;
* :mod:`.primitives` -- gather, segment-sum, the pushes and cross blocks of crossprod;
* :mod:`.products` -- S·X, Sᵀ·Y, column sums, Grams and crossprod's fact pass (compiled or BLAS);
* :mod:`.passes` -- :class:`PassPlan` and the fused logistic, softmax, gramvec and k-means passes;
* :mod:`.materialize` -- the joined table, dense or CSR;
* :mod:`.solvers` -- the links of the materialized plan and L-BFGS's direction;
* :mod:`.trees` -- the histograms and row partitions of gradient-boosted trees;
* the kernels it does not compile are those of :mod:`ilargi.backend.cpu`, imported by name below.

The size cut-offs that choose between routes (``SMALL``, ``PARTIALS_RATIO``, ...) are attributes of
this package, defined below, and the modules read them from here at every call: setting one on the
package (as :func:`.build.warm_up` and the tests do, ``compiled.SMALL = 0``) takes effect.
"""

import numpy as np

from .. import cpu
from ..cpu import (
    NARROW,
    absent_positions,
    as_csr,
    asnumpy,
    bucket_rows,
    column_min_max,
    cooccurrence,
    counts,
    csr,
    is_sparse,
    map_source,
    move_array,
    move_source,
    row_min,
    safe_rows,
    scale_columns,
    scale_rows,
    select_columns,
    select_rows,
    to_dense,
    zero_rows,
)
from . import build
from .bins import affine_column, bin_column, gather_codes, joint_codes
from .boosting import add_by_label_residuals, sum_float64
from .kernels import CHUNK
from .launch import one_pool, usable
from .materialize import dense_columns, materialize_dense, materialize_sparse
from .passes import (
    Assignment,
    Pass,
    PassPlan,
    gramvec_pass,
    kmeans_pass,
    logistic_pass,
    softmax_pass,
)
from .primitives import (
    BlockAccumulator,
    direct_cross,
    gather,
    gather_add,
    pushed_sums,
    segment_sum,
    stacked_rows,
    transposed_order,
)
from .products import (
    column_sums,
    gram_pushes,
    product,
    row_sums,
    square_excess,
    transposed_product,
    weighted_gram,
)
from .solvers import BinaryLink, MultinomialLink, lbfgs_direction
from .trees import (
    add_by_label,
    best_thresholds,
    bin_histograms,
    categorical_splits,
    column_histograms,
    compact_rows,
    inverse_index,
    leaf_pass,
    leaf_sums,
    nan_thresholds,
    partition_rows,
    rebuild_bins,
    residuals,
    sparse_histograms,
    split_by_keys,
    split_rows,
    subtract_held,
    subtract_ranges,
)

# The backend seam hands this package out for NumPy arrays (ilargi.backend.backend_of): it is the
# CPU backend, and every kernel it does not compile is the NumPy/SciPy one of :mod:`..cpu`.
name = cpu.name
xp = np

# ---------------------------------------------------------------------------------------------
# The cut-offs, read at call time by the modules (``compiled.SMALL``): set them here, on the
# package.

# Block partials while B·(n_out + 1) <= PARTIALS_RATIO·G·n (and they fit in PARTIALS_BYTES), else
# buckets: per thread, zeroing and reducing the partials streams ~2·n_out values, while the pass
# adds G·n / B values at random places (several times dearer each), and the buckets route is a
# second random pass over the residuals.
PARTIALS_RATIO = 2.0
PARTIALS_BYTES = 1 << 28
CROSS_ROWS = 1 << 14  # pass rows per thread of direct_cross at least (a launch has its cost)

# A tree's leaf pass over fewer than 1 / SPARSE_LEAF of the target rows asks for every cache line
# a row reads (its rows share few lines: each misses); one over more asks for fewer (its rows
# share lines, and the requests cost). The rows of sums by key of a table of FAR_SUMS keys or
# more (three doubles each: beyond the second-level cache) are asked for too.
SPARSE_LEAF = 8
FAR_SUMS = 8192
# The rows of a leaf's sums that its sparse histograms add row by row (those it holds) are asked
# for this many rows ahead, their entries half as far (0: none).
SPARSE_ROWS_AHEAD = 8

# A CSR fact block of at most this many entries a row on average, rows of varying length, is read
# entry by entry (each entry's row kept, int32): a loop per row would mispredict its branch on
# most rows (several times slower on a fact block of a few entries a row).
ENTRY_BY_ENTRY = 2

# The widest operand (m) of the compiled S·X: one column. At m = 1 the products are memory-bound
# and the compiled ones win; from m = 4 BLAS's register blocking wins everywhere measured, even
# at one thread against two compiled ones.
PRODUCT_WIDE = 1
# The widest operand of the compiled Sᵀ·Y, whose rows of S are scaled into accumulator rows. Up to
# 8 columns it is about as fast as BLAS at one thread and scales where BLAS, held at one thread
# between compiled kernels, cannot; at 16 columns BLAS is faster at one thread.
TRANSPOSED_WIDE = 8
GRAM_WIDE = 128  # the widest source for the compiled Sᵀ·Y and the tiled Sᵀ·diag(c)·S
SMALL = 1 << 15  # sources with fewer values than this go to BLAS (a parallel launch costs more)

# A BLAS product of a tall source too wide for the compiled ones runs in row blocks, one per thread,
# each a BLAS call at one thread (held, see threads.blas_held) on a thread of the compiled
# kernels: OpenBLAS splits the output, a few hundred values here, so it does not scale on a tall,
# narrow product (on a pool of Python threads the blocks lose much of the gain right after a
# compiled kernel: its idle thread still holds a core). Blocks only from BLAS_SPLIT multiply-adds
# a block (each launch has its cost).
BLAS_SPLIT = 1 << 22

# A CSR with fewer entries than this is summed by one thread: a parallel launch costs more than
# the serial loop over so few entries.
SMALL_CSR = 1 << 16

# A CSR's Sᵀ·Y of several columns runs in row blocks only where S has at least this many entries
# per partial row (nb·d rows of m values, zeroed, summed and, above glibc's mmap threshold, faulted
# in afresh at each call): on Hamlet Yelp's stacked dimensions (6 entries per partial row at m = 8)
# two threads were several times slower than one (benchmarks/RESULTS.md, the operators' table).
TRANSPOSED_ENTRIES = 16

# Joins of at least this many parts are written part by part in tiles of rows: with many narrow
# parts (TPC-H's seven) tiles take about half the time of rows; with 2-4 parts (Hamlet, Santoku,
# synthetic stars) the row loop is as fast or faster.
PART_MAJOR_PARTS = 5

# Vectors shorter than this take the NumPy/BLAS two-loop recursion (a parallel launch costs more).
SMALL_DIRECTION = 1 << 15

__all__ = [
    # the backend contract (ilargi.backend.contract.Backend), compiled or NumPy/SciPy's
    "BinaryLink",
    "BlockAccumulator",
    "MultinomialLink",
    "as_csr",
    "asnumpy",
    "column_min_max",
    "column_sums",
    "cooccurrence",
    "counts",
    "gather",
    "gather_add",
    "is_sparse",
    "map_source",
    "materialize_dense",
    "materialize_sparse",
    "move_array",
    "move_source",
    "name",
    "product",
    "row_min",
    "row_sums",
    "scale_columns",
    "scale_rows",
    "segment_sum",
    "select_columns",
    "select_rows",
    "square_excess",
    "to_dense",
    "transposed_product",
    "weighted_gram",
    "xp",
    "zero_rows",
    # its optional kernels this backend gives
    "NARROW",
    "direct_cross",
    "gram_pushes",
    "gramvec_pass",
    "kmeans_pass",
    "lbfgs_direction",
    "logistic_pass",
    "one_pool",
    "PassPlan",
    "pushed_sums",
    "softmax_pass",
    "best_thresholds",
    "bin_histograms",
    "categorical_splits",
    "nan_thresholds",
    "rebuild_bins",
    "column_histograms",
    "leaf_pass",
    "leaf_sums",
    "partition_rows",
    "sparse_histograms",
    "compact_rows",
    "inverse_index",
    "split_by_keys",
    "split_rows",
    "subtract_held",
    "subtract_ranges",
    "add_by_label",
    "residuals",
    "add_by_label_residuals",
    "sum_float64",
    "affine_column",
    "bin_column",
    "gather_codes",
    "joint_codes",
    "dense_columns",
    # the rest of the CPU backend's helpers, the passes' results, fork safety
    "Assignment",
    "CHUNK",
    "Pass",
    "absent_positions",
    "bucket_rows",
    "csr",
    "safe_rows",
    "stacked_rows",
    "transposed_order",
    "usable",
    # the build of the kernels once per environment (ilargi.backend asks it whether they are ready)
    "build",
    # the cut-offs
    "BLAS_SPLIT",
    "CROSS_ROWS",
    "ENTRY_BY_ENTRY",
    "GRAM_WIDE",
    "PARTIALS_BYTES",
    "PARTIALS_RATIO",
    "PART_MAJOR_PARTS",
    "PRODUCT_WIDE",
    "SMALL",
    "SMALL_CSR",
    "TRANSPOSED_ENTRIES",
    "SMALL_DIRECTION",
    "TRANSPOSED_WIDE",
]
