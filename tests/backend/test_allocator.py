"""glibc's allocator settled at import: a process's temporaries below NumPy's huge-page size are
reused without page faults from its first iteration on; the environment can leave it alone."""

import os
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's allocator only",
)

# Faults of 100 rounds of an iteration's temporaries (three of 2 MiB, each written in full) after
# ilargi's import: freed together, they leave more free at the heap's top than glibc's own trim
# threshold after its first such block, so unsettled every round faults them in again.
FAULTS = """
import resource, sys
import numpy as np
import ilargi
from ilargi.backend.allocator import settle_allocator
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    blocks = [np.ones(1 << 18) for _ in range(3)]
    del blocks
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(settle_allocator(), faults)
"""


def _run(**environment):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ILARGI_MALLOC_TUNING", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    }
    out = subprocess.run(
        [sys.executable, "-c", FAULTS],
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[0] == "True", int(out[1])


@glibc
def test_a_temporary_is_reused_without_faulting_its_pages_again():
    settled, faults = _run()
    untouched, faults_untouched = _run(ILARGI_MALLOC_TUNING="0")
    assert settled and not untouched
    # three 2 MiB blocks are 1,536 pages: faulted once and reused, against every round unsettled
    assert faults < 10 * 1536 < faults_untouched


@glibc
def test_the_environments_own_malloc_tunables_are_left_alone():
    settled, _ = _run(MALLOC_MMAP_THRESHOLD_="131072")
    assert not settled


def test_settling_is_once_per_process():
    from ilargi.backend.allocator import settle_allocator

    assert settle_allocator() == settle_allocator()
