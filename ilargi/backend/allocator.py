"""glibc's allocator set, once per process, so that an iteration's temporaries are not faulted in
afresh every time.

glibc serves each allocation of at least ``M_MMAP_THRESHOLD`` (128 KiB at the start) with its own
``mmap`` and unmaps it when it is freed, so a temporary of that size (a gradient, a gathered
block, the output of a sparse product) is faulted in page by page again at every iteration. glibc
raises the threshold to the size of each mapped block it frees, and the heap's trim threshold to
twice that, so a warm process reuses most of its temporaries from the heap; the first fit of a
process runs mostly before that (Hamlet Yelp's five-class logistic fit on the NumPy kernels: see
benchmarks/RESULTS.md, "The first fit in a fresh environment").

:func:`settle_allocator` sets the mmap threshold up front to 32 MiB, the most glibc raises it to by
itself, so that every temporary smaller than that is reused from the heap: an operator's result of
a few MiB, mapped afresh at each call, was first touched inside a parallel kernel, and two threads
faulting in one fresh mapping at once (huge pages, which NumPy asks for from 4 MiB, zeroed or
compacted on the fault) made a call several times slower than on one thread
(``benchmarks/RESULTS.md``, the operators at the default thread count). Up to 16 MiB free at the
top of the heap stays in the process (the trim threshold), so that an iteration's smaller
temporaries are not handed back to the system and faulted in again by the next iteration; at 64 MiB
(glibc's rule of twice the mmap threshold) the TPC-H sf=1 GBDT fit from its files peaked 155 MiB
higher, at 16 MiB as high as with blocks of 4 MiB mapped afresh. It leaves the allocator alone off
glibc, where the environment sets glibc's malloc tunables itself (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, ``GLIBC_TUNABLES``), and with ``ILARGI_MALLOC_TUNING=0``.
"""

import ctypes
import os
import platform
import sys

__all__ = ["settle_allocator"]

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems (malloc/malloc.c)
MMAP_THRESHOLD = 32 * 2**20
TRIM_THRESHOLD = 16 * 2**20

_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
_settled = None  # this process's outcome, once tried


def settle_allocator():
    """Set glibc's mmap and trim thresholds (see the module's description), once per process.

    Returns
    -------
    bool
        Whether this process runs with them set by Ilargi (False off glibc, where the environment
        sets the allocator's tunables or turns this off with ``ILARGI_MALLOC_TUNING=0``).
    """
    global _settled
    if _settled is None:
        _settled = _settle()
    return _settled


def _settle():
    if (
        os.environ.get("ILARGI_MALLOC_TUNING", "1").strip() == "0"
        or any(name in os.environ for name in _ENVIRONMENT)
        or not sys.platform.startswith("linux")
        or platform.libc_ver()[0] != "glibc"
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
