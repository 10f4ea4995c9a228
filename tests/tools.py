"""Skips for the tests that run a command-line tool of an optional extra (CI installs them all)."""

import shutil
import sys
from pathlib import Path

import pytest


def found(tool):
    """Whether ``tool`` is on PATH or beside this Python, where :mod:`ilargi.datasets` looks."""
    return bool(shutil.which(tool) or shutil.which(tool, path=str(Path(sys.executable).parent)))


TPCHGEN = "needs the tpchgen-cli tool (pip install 'ilargi[datasets]')"
needs_tpchgen = pytest.mark.skipif(not found("tpchgen-cli"), reason=TPCHGEN)
