"""glibc's allocator set, once per process, so that an iteration's temporaries are not faulted in
afresh every time.

glibc serves each allocation of at least ``M_MMAP_THRESHOLD`` (128 KiB at the start) with its own
``mmap`` and unmaps it when it is freed, so a temporary of that size (a gradient, a gathered
block, the output of a sparse product) is faulted in page by page again at every iteration. glibc
raises the threshold to the size of each mapped block it frees, and the heap's trim threshold to
twice that, so a warm process reuses most of its temporaries from the heap; the first fit of a
process runs mostly before that (Hamlet Yelp's five-class logistic fit on the NumPy kernels: see
benchmarks/RESULTS.md, "The first fit in a fresh environment").

:func:`settle_allocator` sets the mmap threshold up front to 4 MiB, where NumPy starts to ask for
transparent huge pages (``madvise``): a block that large still gets a fresh mapping, which the
kernel can back with huge pages (a few faults, and fewer TLB misses in the gathers over it, which
a reused heap block of small pages would not give), and every smaller one is reused from the
heap. Up to 64 MiB free at the top of the heap stays in the process (the trim threshold), more
than an iteration's smaller temporaries, so they are not handed back to the system and faulted
in again by the next iteration. It leaves the allocator alone off glibc, where the environment
sets glibc's malloc tunables itself (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``GLIBC_TUNABLES``), and with ``ILARGI_MALLOC_TUNING=0``.
"""

import ctypes
import os
import platform
import sys

__all__ = ["settle_allocator"]

# glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# NumPy's threshold for madvise(MADV_HUGEPAGE) on an array's data (numpy/_core/src/multiarray/alloc.c)
MMAP_THRESHOLD = 4 * 2**20
TRIM_THRESHOLD = 64 * 2**20

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
