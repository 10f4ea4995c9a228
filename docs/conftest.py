"""Collection of the guide's doctests (``pytest --doctest-glob="*.rst" docs``, see ``.ci/run``).

Every ``>>>`` block of the hand-written pages runs; the Python files of this folder (``conf.py``,
the gallery and the figure scripts, which the Sphinx build runs) and everything the build writes
are left out.
"""
collect_ignore_glob = ["*.py", "_build/*", "api/generated/*", "auto_gallery/*", "auto_examples/*"]


import pytest


@pytest.fixture(autouse=True)
def _private_folders(tmp_path_factory, monkeypatch):
    """The guide's calibration measures the host and trains a model: neither may land in the
    user's ~/.cache, which every later decision reads."""
    monkeypatch.setenv("ILARGI_HOST_DIR", str(tmp_path_factory.getbasetemp() / "host"))
