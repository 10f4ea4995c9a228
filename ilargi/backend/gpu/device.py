"""Compiling and launching the CUDA kernels, device memory checks, and small device constants.

The kernels of ``ilargi/backend/cuda/ilargi.cu`` are compiled once per element type (REAL =
float or double) and read raw pointers: operands are made C-contiguous first and never carry
strides. Operations that would build an n × d or n × n dense table call :func:`check_memory`
first, so they raise :class:`DeviceMemoryError` naming the operation instead of a raw
out-of-memory error halfway through.
"""

import weakref
from pathlib import Path

import cupy as cp
import numpy as np

SOURCE_PATH = Path(__file__).resolve().parent.parent / "cuda" / "ilargi.cu"
INT32_LIMIT = 2**31 - 1  # the kernels index with int32
_BLOCK = 256  # threads per block of a grid-stride launch


class DeviceMemoryError(MemoryError):
    """A GPU operation needs more device memory than is free (raised before it allocates)."""


def free_memory():
    """Bytes a new allocation can use: free device memory plus blocks cached by CuPy's pool."""
    free, _ = cp.cuda.Device().mem_info
    return int(free) + int(cp.get_default_memory_pool().free_bytes())


def check_memory(nbytes, what):
    """Raise DeviceMemoryError if ``what`` needs more than the free device memory."""
    available = free_memory()
    if nbytes > available:
        raise DeviceMemoryError(
            f"{what} needs {nbytes / 2**30:.2f} GiB of GPU memory, but only "
            f"{available / 2**30:.2f} GiB is free; use the factorized operators, a row "
            "selection, or the CPU (nm.to('cpu'))"
        )


# ---------------------------------------------------------------------------------------------
# Compiling and launching.

_MODULES: dict = {}
_FUNCTIONS: dict = {}
_DEVICE: dict = {}


def real_dtype(dtype):
    """The kernel element type for an array dtype: float32 stays, everything else is float64."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(np.float64)


def kernel(function, dtype=np.float64):
    """The compiled kernel ``function`` of cuda/ilargi.cu for REAL = float32 or float64."""
    real = real_dtype(dtype)
    found = _FUNCTIONS.get((real, function))
    if found is None:
        module = _MODULES.get(real)
        if module is None:
            ctype = "float" if real == np.float32 else "double"
            module = _MODULES[real] = cp.RawModule(
                code=f"#define REAL {ctype}\n" + SOURCE_PATH.read_text()
            )
        found = _FUNCTIONS[(real, function)] = module.get_function(function)
    return found


def sm_count():
    """Streaming multiprocessors of the current device (read once)."""
    if "sm" not in _DEVICE:
        _DEVICE["sm"] = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    return _DEVICE["sm"]


def launch(function, dtype, work, args, blocks=None, threads=_BLOCK, shared=0):
    """Run a kernel: a grid-stride one over ``work`` items (none for no work), or ``blocks``."""
    if blocks is None:
        if work <= 0:
            return
        # Enough blocks to fill every SM (2048 threads each), never more than the work needs.
        blocks = max(1, min(-(-work // threads), sm_count() * (2048 // threads)))
    kernel(function, dtype)((int(blocks),), (int(threads),), args, shared_mem=int(shared))


# ---------------------------------------------------------------------------------------------
# Small device arrays the kernels read.


def dummy(dtype):
    """A one-element device array for pointer arguments a kernel does not read."""
    key = ("dummy", np.dtype(dtype))
    if key not in _DEVICE:
        _DEVICE[key] = cp.zeros(1, dtype=dtype)
    return _DEVICE[key]


def zero():
    """A device scalar 0 (never written): the c0 of passes without a shift."""
    key = ("zero", np.dtype(np.float64))
    if key not in _DEVICE:
        _DEVICE[key] = cp.zeros(1)
    return _DEVICE[key]


_ONES: dict = {}


def ones(size, dtype):
    """A device vector of ones (never written), the last few sizes cached."""
    key = (int(size), np.dtype(dtype))
    if key not in _ONES:
        if len(_ONES) >= 4:
            _ONES.pop(next(iter(_ONES)))
        _ONES[key] = cp.ones(int(size), dtype=dtype)
    return _ONES[key]


def fill_zero(x):
    """x[...] = 0 for a float64 device array, by one launch of ilargi_fill_zero."""
    launch("ilargi_fill_zero", np.float64, x.size, (x, np.int64(x.size)))


def contiguous(x, dtype=None):
    """x as a C-contiguous float32/float64 device array (kernels ignore strides)."""
    x = cp.asarray(x)
    return cp.ascontiguousarray(x, dtype=real_dtype(x.dtype if dtype is None else dtype))


def width(x):
    """Columns of a 1-D (one) or 2-D operand."""
    return 1 if x.ndim == 1 else int(x.shape[1])


_DEVICE_INDEX: dict = {}


def device_index(values):
    """An int32 device copy of a host index vector (a column mapping), cached while it lives."""
    if not isinstance(values, np.ndarray):
        return cp.asarray(values, dtype=cp.int32)
    key = id(values)
    entry = _DEVICE_INDEX.get(key)
    if entry is None or entry[0]() is not values:
        entry = (
            weakref.ref(values, lambda _, key=key: _DEVICE_INDEX.pop(key, None)),
            cp.asarray(values.astype(np.int32)),
        )
        _DEVICE_INDEX[key] = entry
    return entry[1]
