"""Collection rules for the doctests of ``ilargi/`` (``--doctest-modules``, see pyproject.toml).

A module that imports an optional dependency at its top (CuPy for the GPU backend and the CUDA-graph
steps, Numba for the compiled CPU backend) cannot be imported without it, nor can a GPU module run
its examples without a GPU: such modules are left out of collection then. The tests of ``tests/``
skip themselves (see tests/conftest.py).
"""

import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path

import pytest

# The tests run the compiled kernels where they ask for the CPU backend, compiled on first use, not
# the NumPy kernels that "auto" runs until a background build is done (the tiers have tests of
# their own, tests/backend/test_build.py): what a test exercises must not depend on timing.
os.environ.setdefault("ILARGI_KERNELS", "compiled")

PACKAGE = Path(__file__).resolve().parent / "ilargi"
# A top-level import of an optional dependency: "import cupy", "from cupyx.scipy import sparse", ...
TOP_LEVEL_IMPORT = re.compile(
    r"^(?:import|from)\s+(cupy|cupyx|numba|dask|distributed)\b", re.MULTILINE
)


@pytest.fixture(autouse=True, scope="session")
def _doctest_names(doctest_namespace):
    """``np`` and ``NormalizedMatrix`` in every example, as in the globals of
    ilargi/rewriter/normalized.py: the examples of its mixin modules (products, reductions,
    elementwise, selection) and of ilargi/rewriter/training.py build their matrix with
    ``NormalizedMatrix.from_parts`` too, which those modules cannot import at their top
    (normalized.py imports them)."""
    import numpy as np

    from ilargi import NormalizedMatrix

    doctest_namespace.update(np=np, NormalizedMatrix=NormalizedMatrix)


def pytest_collection_modifyitems(config, items):
    """Skip the doctests that need the optional ``dask`` extra (``NormalizedMatrix.to_dask``)
    where it is not installed."""
    if _usable("dask") and _usable("distributed"):
        return
    skip = pytest.mark.skip(reason="needs the optional dask extra (pip install ilargi[dask])")
    for item in items:
        if item.name.endswith(".to_dask"):
            item.add_marker(skip)


@lru_cache(maxsize=None)
def _usable(dependency):
    if dependency in ("cupy", "cupyx"):
        try:
            import cupy

            return cupy.cuda.runtime.getDeviceCount() > 0
        except Exception:  # no CuPy, or a CUDA library or driver that fails to load
            return False
    return importlib.util.find_spec(dependency) is not None


def _needs(path):
    """The optional dependencies importing this module needs: its own top-level imports and those
    of the packages above it (importing ilargi/backend/gpu/flags.py runs gpu/__init__.py first)."""
    files = [path] + [
        folder / "__init__.py"
        for folder in path.parents
        if folder == PACKAGE or PACKAGE in folder.parents
    ]
    return {
        dependency
        for file in files
        if file.is_file()
        for dependency in TOP_LEVEL_IMPORT.findall(file.read_text(encoding="utf-8"))
    }


def pytest_ignore_collect(collection_path, config):
    """Leave out a module of ilargi/ whose top-level optional import is not usable here."""
    path = Path(collection_path).resolve()
    if path.suffix != ".py" or PACKAGE not in path.parents:
        return None
    return True if any(not _usable(dependency) for dependency in _needs(path)) else None
