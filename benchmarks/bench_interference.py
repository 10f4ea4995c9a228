"""Thread interference at every core: one plan's call right after the other's, against each alone.

    python benchmarks/bench_interference.py

At 2 threads on 2 cores, a compiled kernel launched right after a multi-threaded BLAS call waits
for a core that OpenBLAS's idle threads still spin on, and a BLAS call after a compiled kernel
waits for Numba's OpenMP workers. This times gramvec on a 20,000-row star, factorized and
materialized, each in a block of its own and then alternating call by call, in a fresh process
per environment: the default, ``OMP_WAIT_POLICY=passive`` (Numba's workers sleep),
``OPENBLAS_THREAD_TIMEOUT=4`` (OpenBLAS's idle threads sleep sooner) and both. Medians of 30 calls.
"""
import os
import statistics
import subprocess
import sys
import time

ENVIRONMENTS = {"default": {}, "OMP_WAIT_POLICY=passive": {"OMP_WAIT_POLICY": "passive"},
                "OPENBLAS_THREAD_TIMEOUT=4": {"OPENBLAS_THREAD_TIMEOUT": "4"},
                "both": {"OMP_WAIT_POLICY": "passive", "OPENBLAS_THREAD_TIMEOUT": "4"}}


def measure(calls=30):
    """Print 'blocks F, blocks M, alternating F, alternating M' in ms, at every core."""
    import numpy as np

    import ilargi
    from ilargi.datasets import make_star

    nm, _ = make_star(20_000, tuple_ratio=10, feature_ratio=2, n_dims=2, d_fact=10, target=None,
                      random_state=0)
    T = nm.materialize()
    rng = np.random.default_rng(0)
    x, v = rng.standard_normal(nm.shape[1]), rng.standard_normal(nm.shape[0])
    plans = (lambda: nm.gramvec(x, v), lambda: T.T @ (v * (T @ x)))

    def seconds(fn):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    with ilargi.threads(ilargi.get_num_threads()):
        for fn in plans * 2:
            fn()
        blocks = [[seconds(fn) for _ in range(calls)] for fn in plans]
        alternating = [[], []]
        for _ in range(calls):
            for which, fn in enumerate(plans):
                alternating[which].append(seconds(fn))
    print(" ".join(f"{1e3 * statistics.median(t):.2f}" for t in (*blocks, *alternating)))


def main():
    print(f"| environment ({os.cpu_count()} cores) | factorized, in a block | materialized, in a block "
          "| factorized, alternating | materialized, alternating |\n|---|---|---|---|---|")
    for name, extra in ENVIRONMENTS.items():
        done = subprocess.run([sys.executable, __file__, "--measure"], env={**os.environ, **extra},
                              capture_output=True, text=True, check=True)
        print(f"| {name} | " + " | ".join(f"{t} ms" for t in done.stdout.split()) + " |", flush=True)


if __name__ == "__main__":
    measure() if sys.argv[1:] == ["--measure"] else main()
