"""First contact: the demo and a first fit in a fresh environment, against the same in a built one.

    python benchmarks/bench_cold.py                 # the demo, and Hamlet Yelp's logistic fits
    python benchmarks/bench_cold.py --repeats 3     # each environment state timed 3 times

Each measurement runs in a fresh process with the default kernels (``ILARGI_KERNELS=auto``) and a
private Numba cache folder (``NUMBA_CACHE_DIR``), in one of two states:

* **cold** -- an empty cache: nothing of ilargi's kernels is compiled (a new clone, container or
  CI runner). The process runs the NumPy kernels and starts the background build of the compiled
  ones.
* **warm** -- the same folder once that build has finished: the process loads the compiled
  kernels from the cache (the load is part of its first call).

For each: the demo (``python -m ilargi``: its fit times and the ratio it prints), and on Hamlet Yelp
the first ``LogisticRegression(plan="factorized").fit`` of the process and a second fit in the same
process (the *steady* fit: kernels loaded, the matrix's index structures built), on the binary
target of the project's benchmarks (stars >= 4) and on the five classes of the dataset. A cold
repeat starts from a new empty folder; the warm ones reuse the folder its build filled. Ratios are
of medians over the repeats, run side by side (cold, then warm, per repeat).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import markdown_table

DEFAULT_DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
FIT = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
start = time.perf_counter()
import numpy as np
import ilargi
from ilargi import LogisticRegression  # imports scikit-learn: a script's import, not its fit
from ilargi.datasets import load_hamlet
X, y = load_hamlet(sys.argv[1])
target = {"binary": (y >= 4).astype(float), "5 classes": y}[sys.argv[2]]
loaded = time.perf_counter()
times = []
for _ in range(2):
    begin = time.perf_counter()
    LogisticRegression(plan="factorized").fit(X, target)
    times.append(time.perf_counter() - begin)
print(json.dumps({"first": times[0], "steady": times[1], "load": loaded - start,
                  "kernels": ilargi.kernel_status().running}))
"""


def python(cache, *argv):
    """The stdout of ``python *argv`` in a fresh process with the default kernels and this cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), ILARGI_KERNELS="auto")
    return subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, check=True
    ).stdout


def wait_for_build(cache, timeout=900):
    """Until the background build that the cold process started has written its marker."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(Path(cache).rglob("ilargi-kernels-*.ready")):
            return
        if any(Path(cache).rglob("ilargi-kernels-*.failed")):
            raise RuntimeError(f"the background build failed: {cache}")
        time.sleep(1.0)
    raise TimeoutError(f"no build finished in {timeout} s")


def demo(cache):
    out = python(cache, "-m", "ilargi")
    fact, mat = (
        float(re.search(rf"^{plan}\s+([0-9.]+)", out, re.M).group(1))
        for plan in ("factorized", "materialized")
    )
    kernels = "compiled" if "kernels: compiled" in out else "numpy"
    return {"factorized": fact, "materialized": mat, "kernels": kernels}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--only",
        choices=["demo", "binary", "5 classes"],
        action="append",
        help="measure only these (repeatable; default: all)",
    )
    parser.add_argument(
        "--datasets", type=Path, default=Path(os.environ.get("ILARGI_DATASETS", DEFAULT_DATASETS))
    )
    args = parser.parse_args(argv)
    yelp = args.datasets / "hamlet" / "Yelp"
    only = set(args.only or ("demo", "binary", "5 classes"))
    results = {"demo": {"cold": [], "warm": []}}
    targets = tuple(t for t in ("binary", "5 classes") if t in only) if yelp.exists() else ()
    for target in targets:
        results[target] = {"cold": [], "warm": []}
    for repeat in range(args.repeats):
        if "demo" in only:
            with tempfile.TemporaryDirectory() as cache:
                results["demo"]["cold"].append(demo(cache))
                wait_for_build(cache)
                results["demo"]["warm"].append(demo(cache))
        for target in targets:
            with tempfile.TemporaryDirectory() as cache:
                results[target]["cold"].append(
                    json.loads(python(cache, "-c", FIT, str(yelp), target))
                )
                wait_for_build(cache)
                results[target]["warm"].append(
                    json.loads(python(cache, "-c", FIT, str(yelp), target))
                )
        print(f"repeat {repeat + 1} of {args.repeats} done", file=sys.stderr, flush=True)

    med = statistics.median
    rows = []
    for state in ("cold", "warm") if "demo" in only else ():
        runs = results["demo"][state]
        ratios = [r["materialized"] / r["factorized"] for r in runs]
        rows.append(
            [
                state,
                ", ".join(sorted({r["kernels"] for r in runs})),
                f"{med(r['factorized'] for r in runs):.3f}",
                f"{med(r['materialized'] for r in runs):.3f}",
                f"{med(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
            ]
        )
    if rows:
        print("### The demo, `python -m ilargi` (first run of a fresh process)\n")
        print(
            markdown_table(
                [
                    "cache",
                    "kernels",
                    "factorized fit (s)",
                    "materialized fit (s)",
                    "factorized speed-up, median (range)",
                ],
                rows,
            )
        )
    if not targets:
        print(f"\nHamlet Yelp not found under {args.datasets}: fits skipped", file=sys.stderr)
        return
    rows = []
    for target in targets:
        cold, warm = results[target]["cold"], results[target]["warm"]
        first_cold, first_warm = med(r["first"] for r in cold), med(r["first"] for r in warm)
        steady = med(r["steady"] for r in warm)
        rows.append(
            [
                target,
                f"{first_cold:.3f} ({cold[0]['kernels']})",
                f"{first_warm:.3f} ({warm[0]['kernels']})",
                f"{steady:.3f}",
                f"{first_cold / first_warm:.2f}",
                f"{first_cold / steady:.2f}",
            ]
        )
    print('\n### Hamlet Yelp, `LogisticRegression(plan="factorized").fit`, default threads\n')
    print(
        markdown_table(
            [
                "target",
                "cold: first fit (s)",
                "warm: first fit (s)",
                "warm: steady fit (s)",
                "cold / warm first",
                "cold / steady",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
