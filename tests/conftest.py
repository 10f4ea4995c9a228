"""Shared test fixtures: the real-datasets folder, the GPU skip hook, and `tests/` on the import path."""
import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

# Test modules import helpers such as `from strategies import scenarios`; make that independent of
# pytest's import mode and of the directory pytest is started from.
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CuPy and an NVIDIA GPU (skipped cleanly otherwise)")


def _gpu_unavailable_reason():
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"cupy not importable ({type(exc).__name__})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({type(exc).__name__})"
    return None


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    reason = _gpu_unavailable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {reason}")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def datasets_dir():
    """The real normalized datasets (``../shared/datasets`` next to the checkout, or $ILARGI_DATASETS)."""
    folder = Path(os.environ.get("ILARGI_DATASETS", REPO_ROOT.parent / "shared" / "datasets"))
    if not folder.is_dir():
        pytest.skip(f"datasets folder {folder} not present")
    return folder
