"""Shared timing helpers for the benchmarks: median of repeats after warm-up, side by side.

Importing this module makes the process run ilargi's compiled CPU kernels (compiled on first use
where this environment has not built them yet), not the NumPy kernels that ``ILARGI_KERNELS=auto``
runs until a background build is done: a benchmark times the kernels it names, whatever the state
of the cache (``bench_cold.py`` measures the first contact itself).
"""

import os
import statistics
import time

os.environ.setdefault("ILARGI_KERNELS", "compiled")


def median_time(fn, repeats=5, warmup=1, sync=None):
    """Median wall time of ``fn()`` in seconds over ``repeats`` runs after ``warmup`` runs.

    ``sync`` (e.g. a GPU stream synchronize) runs after each call, inside the timed region.
    """
    return statistics.median(block_times(fn, repeats, warmup, sync))


def block_times(fn, repeats=5, warmup=1, sync=None):
    """The wall times of ``repeats`` runs of ``fn()`` in a row, after ``warmup`` untimed runs."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
    return times


def markdown_table(header, rows):
    """A GitHub markdown table of ``rows`` (lists of cells) under ``header``."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)
