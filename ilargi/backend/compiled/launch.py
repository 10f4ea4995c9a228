"""What every launch of the compiled kernels needs: the thread count, fork safety, scratch, blocks.

:func:`thread_count` is called before every parallel launch: it applies the thread count (the
number of row blocks B, :mod:`ilargi.backend.threads`) to this Python thread's Numba and refuses
to launch in a forked child where the OpenMP layer would kill it (:func:`usable`, see the
package docstring). The rest is shared by the drivers of :mod:`.primitives`, :mod:`.products`,
:mod:`.passes`, :mod:`.materialize` and :mod:`.solvers`: per-thread scratch, whether a segment-sum
takes block partials or buckets (:func:`use_partials`, reading the package's cut-offs at call
time), row blocks balanced by entries, and the empty arrays that stand for an unused operand.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .. import compiled, threads

EMPTY_F = np.empty((0, 0))
EMPTY_I = np.empty(0, dtype=np.intp)
EMPTY_V = np.empty(0)


# ---------------------------------------------------------------------------------------------
# Fork safety (see the package docstring).

_launched_in = None  # pid of the process whose parallel kernels started the OpenMP threads


def _forked():
    global _launched_in
    if _launched_in is None:
        _launched_in = os.getpid()
    return _launched_in != os.getpid()


def usable():
    """False in a forked child whose parent already ran parallel kernels on GNU OpenMP."""
    if _launched_in is None or _launched_in == os.getpid():
        return True
    from numba import threading_layer

    try:
        return threading_layer() != "omp"
    except ValueError:  # no parallel launch yet in this process
        return True


def one_pool():
    """The context a whole operator or fit runs in: BLAS held at one thread, so that its calls
    (on the calling thread, or one per row block on the kernels' threads) never wake OpenBLAS's
    own pool between the compiled kernels' launches (see :mod:`ilargi.backend.threads`)."""
    return threads.blas_held_on_demand()


def thread_count():
    """The thread count (= blocks) for the next launch, applied to this Python thread's Numba."""
    if _forked() and not usable():
        raise RuntimeError(
            "compiled kernels cannot run in a process forked after its parent used "
            "the OpenMP threading layer; use the 'spawn' or 'forkserver' start "
            "method or the NumPy backend"
        )
    return threads.apply()


_SCRATCH = threading.local()


def scratch(shape):
    """A per-thread float64 buffer for block partials (zeroed by the kernels): a fresh one in
    every iteration would be page-faulted in each time."""
    buffer = getattr(_SCRATCH, "buffer", None)
    if buffer is None or buffer.shape != shape:
        buffer = _SCRATCH.buffer = np.empty(shape)
    return buffer


def use_partials(nb, n_out, n, groups=1, width=1):
    """Block partials (else buckets) for segment-sums of n rows (``width`` columns) into ``groups``
    tables of n_out stacked rows, with nb blocks."""
    size = nb * (n_out + 1)
    return nb == 1 or (
        size <= compiled.PARTIALS_RATIO * groups * n and 8 * size * width <= compiled.PARTIALS_BYTES
    )


def block_bounds(indptr, nb):
    """Row ranges (nb + 1 bounds) of nb blocks of a CSR (the buckets route's Iᵀ, a source) holding
    about equal numbers of entries."""
    n_out = indptr.shape[0] - 1
    bounds = np.searchsorted(indptr, np.arange(nb + 1) * (int(indptr[-1]) // nb), side="left")
    bounds[0], bounds[-1] = 0, n_out  # trailing empty output rows belong to the last block
    return np.maximum.accumulate(np.minimum(bounds, n_out)).astype(np.int64)


def csr_blocks(S):
    """Row blocks of a CSR S for the threads, about equal in entries (S stacked from tables of
    different densities would load one thread with most of them if split by rows)."""
    return block_bounds(S.indptr, min(thread_count(), max(S.shape[0], 1)))


def c_float(a):
    """a as a C-ordered float64 array, copied only where it is not one."""
    return np.ascontiguousarray(a, dtype=np.float64)


def up4(k):
    """k rounded up to a multiple of 4: the Gram kernels work in 4 × 4 tiles."""
    return (k + 3) // 4 * 4


# Block partials that a kernel adds into entry by entry (a CSR's Sᵀ·y) are a cache line apart:
# two threads adding into one line (the last columns of a block's partial and the first of the
# next block's) take turns holding it. Hamlet Walmart's Tᵀ·y (column 0 in every row) ran slower
# at two threads than at one before.
LINE_VALUES = 8


def padded_partials(nb, d, m=None):
    """Uninitialized partials of nb blocks of d [× m] float64 values, each block's followed by
    at least a cache line of padding (the kernels zero whole blocks); sum ``parts[:, :d]``."""
    width = () if m is None else (m,)
    return np.empty((nb, d + -(-LINE_VALUES // (m or 1))) + width)


def grad_parts(nb, d, width):
    """Block partials of Fᵀ·r for a dense block of d columns and an r of ``width``
    (nb × d [× m])."""
    return np.empty((nb, d) + width)


def grad_sum(parts):
    """Fᵀ·r (d [× m]) from its block partials, summed in block order."""
    return np.add.reduce(parts, axis=0)


# A pass's operands where it has none: no entry rows of a CSR fact block, no rows of a join part
# (the identity), no fact block (dense block, CSR indptr, indices, values, entry rows).
NO_ROWS = np.empty(0, np.int32)
NO_ROWS64 = np.empty(0, np.int64)
NO_FACT = (EMPTY_F, np.empty(0, np.int64), np.empty(0, np.int64), EMPTY_V, NO_ROWS)


# ---------------------------------------------------------------------------------------------
# Python threads for work that releases the GIL outside the compiled kernels (SciPy's sparse
# products, one thread each): one executor per process (a forked child's would have no threads).

_executors: dict[int, ThreadPoolExecutor] = {}


def run_blocks(func, ranges):
    """[func(lo, hi) for (lo, hi) in ranges], the first range on the calling thread and each
    other on a Python thread of its own; for work that releases the GIL (SciPy's sparse
    products), where no compiled kernel runs meanwhile."""
    if len(ranges) <= 1:
        return [func(lo, hi) for lo, hi in ranges]
    pid, workers = os.getpid(), len(ranges) - 1
    pool = _executors.get(pid)
    if pool is None or pool._max_workers < workers:
        pool = _executors[pid] = ThreadPoolExecutor(workers, thread_name_prefix="ilargi-blocks")
    rest = [pool.submit(func, lo, hi) for lo, hi in ranges[1:]]
    first = func(*ranges[0])
    return [first] + [future.result() for future in rest]
