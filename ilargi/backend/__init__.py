"""The backend seam: array code takes its kernel module from its arrays.

Everything in :mod:`ilargi.rewriter` is written against the NumPy/SciPy API and asks
:func:`backend_of` for the module that matches the arrays it was given. The kernels whose fast
form differs between backends live in one module per backend: :mod:`.cpu` (NumPy/SciPy) and
the package :mod:`.gpu` (CuPy/cupyx, imported only when a CuPy array shows up). What a backend
must give, and what it may give, is written down in :mod:`.contract`; optional kernels are
looked up with :func:`optional`.

On the CPU the backend is :mod:`.compiled` (Numba, parallel): its own kernels for the passes over
the target rows, :mod:`.cpu`'s for the rest. The NumPy/SciPy kernels of :mod:`.cpu` serve alone
where the compiled ones cannot run (a process forked after its parent ran them on the OpenMP
threading layer), and when asked: ``ILARGI_KERNELS=numpy`` or :func:`cpu_kernels`.
"""
import os
import sys
from contextlib import contextmanager

from . import cpu
from .contract import OPTIONAL, REQUIRED, Backend, optional

__all__ = ["Backend", "OPTIONAL", "REQUIRED", "backend_for_device", "backend_of", "cpu",
           "cpu_kernels", "namespace_of", "optional"]

CPU_KERNELS = ("compiled", "numpy")
_cpu_kernels = os.environ.get("ILARGI_KERNELS", "compiled")
if _cpu_kernels not in CPU_KERNELS:
    raise ValueError(f"ILARGI_KERNELS must be one of {CPU_KERNELS}, got {_cpu_kernels!r}")


_compiled = None  # the module, once imported


def _cpu():
    """The CPU backend now: compiled unless NumPy kernels are asked for or the compiled ones
    cannot run in this process."""
    global _compiled
    if _cpu_kernels == "compiled":
        if _compiled is None:  # lazy: importing Numba costs time a GPU-only process need not pay
            from . import compiled  # (an import statement costs ~2 us at every call)
            _compiled = compiled
        if _compiled.usable():
            return _compiled
    return cpu


@contextmanager
def cpu_kernels(kind):
    """Run the block with the CPU kernels ``kind``: "compiled" (the default) or "numpy".

    Matrices pick their backend at each call, so the setting applies to every operator and
    estimator run inside the block (benchmarks compare the two; tests run both).

    Examples
    --------
    >>> import numpy as np
    >>> with cpu_kernels("numpy"):
    ...     backend_of(np.zeros(3)).__name__
    'ilargi.backend.cpu'
    """
    global _cpu_kernels
    if kind not in CPU_KERNELS:
        raise ValueError(f"kind must be one of {CPU_KERNELS}, got {kind!r}")
    previous, _cpu_kernels = _cpu_kernels, kind
    try:
        yield
    finally:
        _cpu_kernels = previous


def _is_cupy(x):
    # Never import cupy just to look: if it is not loaded, x cannot be a CuPy array.
    if "cupy" not in sys.modules:
        return False
    cls = type(x)
    return cls.__module__.startswith(("cupy", "cupyx"))


def _gpu():
    from . import gpu  # lazy: CuPy is optional and slow to import
    return gpu


def backend_of(*arrays):
    """The kernel module for these arrays: :mod:`.gpu` if any is a CuPy array, else the CPU
    backend (:mod:`.compiled`, or :mod:`.cpu`; see the module docstring).

    Parameters
    ----------
    *arrays : array, sparse matrix or None
        Dense or sparse arrays of either backend; None entries are ignored.

    Returns
    -------
    module
        A module satisfying :class:`~ilargi.backend.contract.Backend`.

    Examples
    --------
    >>> import numpy as np
    >>> backend_of(np.zeros(3), None).name
    'cpu'
    >>> backend_of().name
    'cpu'
    """
    for x in arrays:
        if x is not None and _is_cupy(x):
            return _gpu()
    return _cpu()


def namespace_of(*arrays):
    """The array module (numpy or cupy) for these arrays.

    Parameters
    ----------
    *arrays : array, sparse matrix or None
        As for :func:`backend_of`.

    Returns
    -------
    module
        ``numpy`` or ``cupy``.

    Examples
    --------
    >>> import numpy as np
    >>> namespace_of(np.zeros(3)) is np
    True
    """
    return backend_of(*arrays).xp


def backend_for_device(device):
    """The kernel module for a device name.

    Parameters
    ----------
    device : {"cpu", "gpu", "cuda"}
        "cuda" is a synonym of "gpu".

    Returns
    -------
    module
        The CPU backend or :mod:`.gpu` (importing CuPy).

    Raises
    ------
    ValueError
        For any other device name.

    Examples
    --------
    >>> backend_for_device("cpu").name
    'cpu'
    >>> backend_for_device("tpu")
    Traceback (most recent call last):
        ...
    ValueError: unknown device 'tpu'; use 'cpu' or 'gpu'
    """
    if device == "cpu":
        return _cpu()
    if device in ("gpu", "cuda"):
        return _gpu()
    raise ValueError(f"unknown device {device!r}; use 'cpu' or 'gpu'")
