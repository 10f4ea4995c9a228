"""A BinnedMatrix's codes on the compiled kernels (:mod:`.kernels`): a column's values, each
value's bin, the codes
read per target row gathered, the fact codes joint and by column. Each gives the same bytes as
its NumPy twin in :mod:`ilargi.backend.cpu_trees`, at any thread count (every output byte is
written by one row's own work)."""

import numpy as np

from .kernels import (
    affine_column_kernel,
    bin_column_kernel,
    gather_codes_kernel,
    joint_codes_kernel,
)
from .launch import thread_count

_NO_ROWS = np.empty(0, dtype=np.intp)


def _writable(a, dtype):
    """a as a C-ordered, writable array of dtype: the one specialization the kernels are built
    for (a read-only array is another Numba type)."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.flags.writeable else a.copy()


def affine_column(column, a, b, out):
    """out = column·a + b; as :func:`ilargi.backend.cpu.affine_column`."""
    if not column.flags.writeable:  # a read-only source: another Numba type, left to NumPy
        np.multiply(column, a, out=out)
        out += b
        return
    thread_count()
    affine_column_kernel(column, float(a), float(b), out)


def bin_column(values, bounds, codes, column):
    """codes[:, column] = the bin of each value; as :func:`ilargi.backend.cpu.bin_column`."""
    thread_count()
    bin_column_kernel(
        _writable(values, np.float64), _writable(bounds, np.float64), codes, int(column)
    )


def gather_codes(out, at, codes, rows):
    """out[i, at:at + k] = codes[rows[i] + 1] (or codes[i]); as
    :func:`ilargi.backend.cpu.gather_codes`."""
    thread_count()
    every = rows is None
    gather_codes_kernel(
        out,
        int(at),
        _writable(codes, np.uint8),
        _NO_ROWS if every else _writable(rows, np.intp),
        every,
    )


def joint_codes(codes, groups, bins):
    """(joint, by_column); as :func:`ilargi.backend.cpu.joint_codes`."""
    n, k = codes.shape
    members = np.array([c for group in groups for c in group], dtype=np.intp)
    starts = np.zeros(len(groups) + 1, dtype=np.intp)
    np.cumsum([len(group) for group in groups], out=starts[1:])
    joint = np.empty((n, len(groups)), dtype=np.uint8)
    by_column = np.empty((n, k), dtype=np.uint8, order="F")
    thread_count()
    joint_codes_kernel(
        _writable(codes, np.uint8),
        by_column,
        joint,
        members,
        starts,
        np.asarray(bins, dtype=np.intp)[members],
    )
    return joint, by_column
