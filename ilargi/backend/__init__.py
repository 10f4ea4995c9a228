"""The backend seam: array code takes its kernel module from its arrays.

Everything in :mod:`ilargi.rewriter` is written against the NumPy/SciPy API and asks
:func:`backend_of` for the module that matches the arrays it was given. The kernels whose fast
form differs between backends live in one module per backend: :mod:`.cpu` (NumPy/SciPy) and
the package :mod:`.gpu` (CuPy/cupyx, imported only when a CuPy array shows up). What a backend
must give, and what it may give, is written down in :mod:`.contract`; optional kernels are
looked up with :func:`optional`.
"""
import sys

from . import cpu
from .contract import OPTIONAL, REQUIRED, Backend, optional

__all__ = ["Backend", "OPTIONAL", "REQUIRED", "backend_for_device", "backend_of", "cpu",
           "namespace_of", "optional"]


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
    """The kernel module for these arrays: :mod:`.gpu` if any is a CuPy array, else :mod:`.cpu`.

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
    return cpu


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
        :mod:`.cpu` or :mod:`.gpu` (importing CuPy).

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
        return cpu
    if device in ("gpu", "cuda"):
        return _gpu()
    raise ValueError(f"unknown device {device!r}; use 'cpu' or 'gpu'")
