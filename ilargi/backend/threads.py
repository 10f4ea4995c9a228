"""How many threads ilargi's compiled kernels (Numba) and BLAS (through threadpoolctl) use.

One process-wide number k covers both, so the factorized plan (Numba) and the materialized plan
(BLAS) are compared and run at the same thread count::

    set_num_threads(2)          # from now on
    with threads(1):            # inside the block only, then the previous number again
        ...

The default is every core this process may run on (its CPU affinity mask), capped by Numba's
``NUMBA_NUM_THREADS``: joblib's process workers (loky) set that variable to cores / n_jobs, so
k defaults to their share of the cores and n_jobs processes do not oversubscribe the machine.

Numba keeps its thread count per Python thread (a thread started later uses all of Numba's
threads again), so the compiled kernels call :func:`apply` before each launch: it sets the
calling thread's Numba count to k when they differ. Numba is imported on first use only, so
importing ilargi stays cheap for code that never runs a compiled kernel.

Setting k is process-wide, like threadpoolctl's limits: contexts opened concurrently by several
Python threads restore in the order they close, not per thread.
"""
import numbers
import os
import threading
from contextlib import contextmanager

__all__ = ["apply", "default_num_threads", "get_num_threads", "max_num_threads",
           "set_num_threads", "threads"]

_lock = threading.RLock()
_k = None          # None: the default (every core); else the number set
_blas = None       # the threadpoolctl limiter that set BLAS, kept alive while k is set


def _numba():
    import numba
    return numba


def max_num_threads():
    """The most threads Numba can run: its ``NUMBA_NUM_THREADS`` (fixed when numba is imported)."""
    return int(_numba().config.NUMBA_NUM_THREADS)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_num_threads():
    """Every core this process may use, at most :func:`max_num_threads`."""
    return max(1, min(_cores(), max_num_threads()))


def _check(k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"the number of threads must be a positive integer, got {k!r}")
    k = int(k)
    top = max_num_threads()
    if not 1 <= k <= top:
        raise ValueError(f"the number of threads must be in [1, {top}] (Numba's NUMBA_NUM_THREADS; "
                         f"set that environment variable before starting Python for more), got {k}")
    return k


def get_num_threads():
    """The number of threads the compiled kernels and BLAS use now."""
    k = _k
    return default_num_threads() if k is None else k


def _limit_blas(k):
    """BLAS limited to k threads until the next call (threadpoolctl; skipped if absent)."""
    global _blas
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return
    if _blas is not None:
        _blas.restore_original_limits()  # back to what BLAS had before ilargi touched it
        _blas = None
    _blas = threadpool_limits(limits=k, user_api="blas")


def set_num_threads(k=None):
    """Use k threads in the compiled kernels and in BLAS from now on; None: the default.

    Raises ValueError unless k is an integer in [1, NUMBA_NUM_THREADS].
    """
    global _k, _blas
    with _lock:
        if k is None:
            _k = None
            if _blas is not None:
                _blas.restore_original_limits()
                _blas = None
        else:
            _k = _check(k)
            _limit_blas(_k)
        apply()


@contextmanager
def threads(k):
    """Run the block with k threads (compiled kernels and BLAS), then restore the previous setting."""
    k = _check(k)
    with _lock:
        previous = _k
        set_num_threads(k)
    try:
        yield k
    finally:
        with _lock:
            set_num_threads(previous)


def apply():
    """Set the calling Python thread's Numba thread count to :func:`get_num_threads`; returns it.

    Called by every compiled kernel before its launch (a few microseconds), because Numba's count
    is per Python thread.
    """
    k = get_num_threads()
    numba = _numba()
    if numba.get_num_threads() != k:
        numba.set_num_threads(k)
    return k
