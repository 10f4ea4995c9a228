"""glibc's allocator settled at import: a process's temporaries under 32 MiB are reused without
page faults after their first iteration; the environment can leave it alone."""

import os
import platform
import subprocess
import sys

import pytest

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's allocator only",
)

# Faults of 100 rounds, after a first, of an iteration's temporaries (``count`` blocks of ``values`` float64s, each
# written in full; by default three of 2 MiB) after ilargi's import: freed together, three of 2 MiB
# leave more free at the heap's top than glibc's own trim threshold after its first such block,
# so unsettled every round faults them in again.
FAULTS = """
import resource, sys
import numpy as np
import ilargi
from ilargi.backend.allocator import settle_allocator
values, count = int(sys.argv[1]), int(sys.argv[2])
blocks = [np.ones(values) for _ in range(count)]  # the first round: faulted in either way
del blocks
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(100):
    blocks = [np.ones(values) for _ in range(count)]
    del blocks
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(settle_allocator(), faults)
"""


def _run(values=1 << 18, count=3, **environment):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ILARGI_MALLOC_TUNING", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES")
    }
    out = subprocess.run(
        [sys.executable, "-c", FAULTS, str(values), str(count)],
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
    # three 2 MiB blocks are 1,536 pages: reused, against faulted in every round unsettled
    assert faults < 10 * 1536 < faults_untouched


@glibc
def test_a_block_above_numpys_huge_page_size_is_reused_too():
    """An 8 MiB block (an operator's result) is reused from the heap, not mapped afresh a round:
    with glibc's threshold fixed at 4 MiB (the environment's own setting) every round faults it
    in again, in huge pages or not (at least its four 2 MiB pages)."""
    settled, faults = _run(1 << 20, 1)
    _, faults_mapped = _run(1 << 20, 1, MALLOC_MMAP_THRESHOLD_=str(4 << 20))
    assert settled
    assert faults < 100 <= 4 * 100 <= faults_mapped


@glibc
def test_the_environments_own_malloc_tunables_are_left_alone():
    settled, _ = _run(MALLOC_MMAP_THRESHOLD_="131072")
    assert not settled


def test_settling_is_once_per_process():
    from ilargi.backend.allocator import settle_allocator

    assert settle_allocator() == settle_allocator()
