"""Collection rules for the doctests of ``ilargi/`` (``--doctest-modules``, see pyproject.toml).

Modules that import CuPy at the top cannot even be imported without it, nor run their examples
without a GPU: they are left out of collection then. Tests of ``tests/`` have their own conftest.
"""


def _gpu_usable():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, or a CUDA library or driver that fails to load
        return False


# Paths relative to this folder; GPU-only modules import CuPy at the top.
GPU_ONLY = ["ilargi/backend/gpu*", "ilargi/models/_graphed.py"]

collect_ignore_glob = [] if _gpu_usable() else list(GPU_ONLY)
