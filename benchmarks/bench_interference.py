"""Thread interference at every core: one plan's call right after another's, against each alone.

    python benchmarks/bench_interference.py

On a machine without spare cores, after a parallel call OpenBLAS's idle threads spin for ~0.1 s
and GNU OpenMP's (the compiled kernels') for tens of milliseconds; a parallel call of the other
pool meanwhile waits for a core (ilargi.rewriter.pool). This times gramvec and Tᵀ·y on a
100,000-row star at every core, each call in a block of its own calls and then alternating call
by call with another: the factorized operator with the materialized one (ilargi's kernels on the
joined table, the same thread pool), and with NumPy's own product on the joined table (BLAS's
pool, as in a user's loop that mixes the two). Each environment runs in a fresh process: the
default, ``OMP_WAIT_POLICY=passive`` (OpenMP's idle threads sleep at once),
``GOMP_SPINCOUNT=20000`` (they spin ~1 ms), ``OPENBLAS_THREAD_TIMEOUT=4`` (OpenBLAS's sleep at
once) and the last two together. Medians of 41 calls (p90 / median in brackets).
"""

import os
import statistics
import subprocess
import sys
import time

import _timing  # noqa: F401  (the compiled kernels, in this process and the ones it starts)

ENVIRONMENTS = {
    "default": {},
    "OMP_WAIT_POLICY=passive": {"OMP_WAIT_POLICY": "passive"},
    "GOMP_SPINCOUNT=20000": {"GOMP_SPINCOUNT": "20000"},
    "OPENBLAS_THREAD_TIMEOUT=4": {"OPENBLAS_THREAD_TIMEOUT": "4"},
    "GOMP_SPINCOUNT=20000, OPENBLAS_THREAD_TIMEOUT=4": {
        "GOMP_SPINCOUNT": "20000",
        "OPENBLAS_THREAD_TIMEOUT": "4",
    },
}
CALLS = 41
# "a | b": a's time when its calls alternate with b's.
COLUMNS = [
    "factorized alone",
    "materialized alone",
    "NumPy alone",
    "factorized | materialized",
    "materialized | factorized",
    "factorized | NumPy",
    "NumPy | factorized",
]


def _stats(times):
    times = sorted(times)
    median = statistics.median(times)
    return f"{median * 1e3:.2f} ({times[int(0.9 * (len(times) - 1))] / median:.1f})"


def _seconds(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _alone(fn):
    time.sleep(0.3)
    fn(), fn()
    return [_seconds(fn) for _ in range(CALLS)]


def _alternating(first, second):
    time.sleep(0.3)
    first(), second()
    times = ([], [])
    for _ in range(CALLS):
        times[0].append(_seconds(first))
        times[1].append(_seconds(second))
    return times


def measure():
    """Print one table row per operator: the COLUMNS, in ms (p90 / median)."""
    import numpy as np

    from ilargi.datasets import make_star
    from ilargi.rewriter import materialized

    nm, _ = make_star(
        100_000, tuple_ratio=5, feature_ratio=2, n_dims=2, d_fact=8, target=None, random_state=0
    )
    T = nm.materialize()
    rng = np.random.default_rng(0)
    x, y, v = (
        rng.standard_normal(nm.shape[1]),
        rng.standard_normal(nm.shape[0]),
        rng.random(nm.shape[0]),
    )
    operators = {
        "gramvec": (
            lambda: nm.gramvec(x, v),
            lambda: materialized.gramvec(T, x, v),
            lambda: T.T @ (v * (T @ x)),
        ),
        "Tᵀ·y": (lambda: nm.T @ y, lambda: materialized.tmm(T, y), lambda: T.T @ y),
    }
    for name, (fact, mat, numpy) in operators.items():
        cells = [_stats(_alone(fn)) for fn in (fact, mat, numpy)]
        for first, second in ((fact, mat), (fact, numpy)):
            cells += [_stats(t) for t in _alternating(first, second)]
        print(name + "\t" + "\t".join(cells), flush=True)


def main():
    print(
        f"| environment ({os.cpu_count()} cores) | operator | "
        + " | ".join(COLUMNS)
        + " |\n"
        + "|---" * (len(COLUMNS) + 2)
        + "|"
    )
    for name, extra in ENVIRONMENTS.items():
        done = subprocess.run(
            [sys.executable, __file__, "--measure"],
            env={**os.environ, **extra},
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stdout.strip().splitlines():
            operator, *cells = line.split("\t")
            print(
                f"| {name} | {operator} | " + " | ".join(f"{c} ms" for c in cells) + " |",
                flush=True,
            )


if __name__ == "__main__":
    measure() if sys.argv[1:] == ["--measure"] else main()
