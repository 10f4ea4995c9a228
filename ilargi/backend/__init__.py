"""The backend seam: array code takes its module from its arrays.

Everything in :mod:`ilargi.rewriter` is written against the NumPy/SciPy API and asks
:func:`backend_of` for the module that matches the arrays it was given. The few kernels whose
fast form differs between backends (gather, segment-sum, the fused gram-vector pattern and the
sparse helpers) live in one module per backend: :mod:`.cpu` (NumPy/SciPy) and :mod:`.gpu`
(CuPy/cupyx, imported only when a CuPy array shows up).
"""
import sys

from . import cpu


def _is_cupy(x):
    # Never import cupy just to look: if it is not loaded, x cannot be a CuPy array.
    if "cupy" not in sys.modules:
        return False
    cls = type(x)
    return cls.__module__.startswith(("cupy", "cupyx"))


def backend_of(*arrays):
    """The kernel module (``cpu`` or ``gpu``) for these arrays; None entries are ignored."""
    for x in arrays:
        if x is not None and _is_cupy(x):
            from . import gpu
            return gpu
    return cpu


def namespace_of(*arrays):
    """The array module (numpy or cupy) for these arrays."""
    return backend_of(*arrays).xp


def backend_for_device(device):
    """The kernel module for a device name: 'cpu' or 'gpu' (also 'cuda')."""
    if device == "cpu":
        return cpu
    if device in ("gpu", "cuda"):
        from . import gpu
        return gpu
    raise ValueError(f"unknown device {device!r}; use 'cpu' or 'gpu'")
