"""A boosting round's scores on the compiled kernels (:mod:`.kernels`), with the same bytes as the
NumPy twins in :mod:`ilargi.backend.cpu_trees` at any thread count (one row's work a value)."""

from .kernels import add_by_label_residuals_kernel
from .launch import thread_count


def add_by_label_residuals(score, values, labels, y, out):
    """score[i] += values[labels[i]], then out = score - y; as
    :func:`ilargi.backend.cpu.add_by_label_residuals`."""
    thread_count()
    add_by_label_residuals_kernel(score, values, labels, y, out)
