"""A boosting round's scores on the compiled kernels (:mod:`.kernels`), with the same bytes as the
NumPy twins in :mod:`ilargi.backend.cpu_trees` at any thread count (one row's work a value)."""

import numpy as np

from .kernels import add_by_label_residuals_kernel, buffered_sum_kernel
from .launch import thread_count


def add_by_label_residuals(score, values, labels, y, out):
    """score[i] += values[labels[i]], then out = score - y; returns Σout (the next tree's Σg,
    summed in NumPy's buffers as they are made); as
    :func:`ilargi.backend.cpu.add_by_label_residuals`."""
    block = np.getbufsize()
    partials = np.empty(-(-score.shape[0] // block))
    thread_count()
    return float(add_by_label_residuals_kernel(score, values, labels, y, out, block, partials))


def sum_float64(a):
    """np.sum(a, dtype=np.float64), the same bits, a float32 vector's buffers summed in parallel;
    as :func:`ilargi.backend.cpu.sum_float64`."""
    a = np.asarray(a)
    simple = a.dtype != np.float32 or a.ndim != 1 or not a.flags.c_contiguous
    # NumPy's: other values, few of them, or one thread (NumPy's vectorized pairwise sum is
    # faster than this kernel's on one core)
    if simple or a.size < (1 << 16) or thread_count() == 1:
        return float(np.sum(a, dtype=np.float64))
    block = np.getbufsize()
    return float(buffered_sum_kernel(a, block, np.empty(-(-a.shape[0] // block))))
