"""Collection of the guide's doctests (``pytest --doctest-glob="*.rst" docs``, see ``.ci/run``).

Every ``>>>`` block of the hand-written pages runs; the Python files of this folder (``conf.py``,
the gallery and the figure scripts, which the Sphinx build runs) and everything the build writes
are left out.
"""

import sys
from pathlib import Path

import pytest

collect_ignore_glob = ["*.py", "_build/*", "api/generated/*", "auto_gallery/*", "auto_examples/*"]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package: tests/hosts.py


@pytest.fixture(autouse=True)
def _private_folders(tmp_path_factory):
    """The guide's calibration measures the host and trains a model: neither may land in the
    user's ~/.cache, which every later decision reads. Whatever a page sets with ``set_config``
    is undone after it."""
    from ilargi import config_context

    with config_context(host_dir=tmp_path_factory.getbasetemp() / "host"):
        yield


@pytest.fixture(autouse=True)
def _trained_host(monkeypatch):
    """The guide's examples show the shipped model deciding: the host inside its training range
    (a machine beyond it, or one loaded while it is probed, gets the analytic rule, as the guide
    says further on)."""
    from tests.hosts import pin_trained_host

    pin_trained_host(monkeypatch)
