"""One operator specification on every backend (as PyLops runs one test file on NumPy and CuPy).

A test takes the ``backend`` fixture (tests/conftest.py: ``"cpu"``, the default CPU backend of
compiled kernels; ``"numpy"``, the same matrices on the NumPy/SciPy kernels (the hook in
tests/conftest.py runs the test inside ``ilargi.backend.cpu_kernels("numpy")``); and ``"gpu"``
marked ``gpu``, skipped cleanly without CuPy or a device), moves its NormalizedMatrix and operands there with
:func:`on_backend` and compares with the materialized CPU table. :func:`assert_on_device` checks that
a result lives where its inputs do, so a silent CPU fallback of a GPU operator fails;
``strategies.assert_close(..., backend=backend)`` calls it before comparing values.
"""

import numbers
import sys

import numpy as np
import scipy.sparse as sp

BACKENDS = ("cpu", "numpy", "gpu")
DEVICE = {"cpu": "cpu", "numpy": "cpu", "gpu": "gpu"}


def _cupy():
    import cupy
    import cupyx.scipy.sparse

    return cupy, cupyx.scipy.sparse


def is_device_array(x):
    """Whether x is a CuPy array or a cupyx sparse matrix (without importing CuPy to look)."""
    if "cupy" not in sys.modules:
        return False
    cupy, csp = _cupy()
    return isinstance(x, cupy.ndarray) or csp.issparse(x)


def is_sparse(x):
    """scipy.sparse or cupyx.scipy.sparse."""
    if sp.issparse(x):
        return True
    return is_device_array(x) and not isinstance(x, _cupy()[0].ndarray)


def is_normalized(x):
    return hasattr(x, "parts") and hasattr(x, "materialize")


def on_backend(x, backend):
    """x on ``backend``: a NormalizedMatrix through ``nm.to(backend)``, a NumPy array as a device
    array on the GPU; everything else (None, scalars, slices, lists) as it is."""
    if backend != "gpu" or x is None:
        return x
    if is_normalized(x):
        return x.to(backend)
    if isinstance(x, np.ndarray):
        return _cupy()[0].asarray(x)
    return x


def to_host(x):
    """A NumPy array (SciPy sparse matrix) of a result of either backend; a NormalizedMatrix is
    materialized first. Host values pass through."""
    if is_normalized(x):
        x = x.materialize()
    if is_device_array(x):
        cupy, csp = _cupy()
        return x.get() if csp.issparse(x) else cupy.asnumpy(x)
    return x


def _host_value(x):
    return (
        isinstance(x, (np.ndarray, np.generic, numbers.Number)) or sp.issparse(x)
    ) and not is_device_array(x)


def assert_on_device(result, backend, what=""):
    """``result`` lives on ``backend``: on the GPU a CuPy array (0-d for a scalar reduction), a
    cupyx sparse matrix, or a NormalizedMatrix whose sources, index vectors and affine state are
    all on the device; on the CPU a NumPy/SciPy value or a NormalizedMatrix on the CPU."""
    label = f"{what}: " if what else ""
    if is_normalized(result):
        assert result.device == DEVICE[backend], (
            f"{label}NormalizedMatrix on {result.device}, not {DEVICE[backend]}"
        )
        arrays = [(f"source of part {p.name!r}", p.source) for p in result.parts]
        arrays += [(f"index vector of part {p.name!r}", p.indicator.rows) for p in result.parts]
        arrays += [("scale", result.scale), ("shift", result.shift)]
        for name, array in arrays:
            if array is not None:
                assert_on_device(array, backend, f"{what} {name}".strip())
        return
    if backend == "gpu":
        assert is_device_array(result), (
            f"{label}a {type(result).__module__}.{type(result).__name__} on the host, not a CuPy "
            "array on the device (a CPU fallback?)"
        )
    else:
        assert _host_value(result), (
            f"{label}a {type(result).__name__} where a NumPy result was expected"
        )
