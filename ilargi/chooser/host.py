"""The host's measured properties: probed in about a second, once per machine and thread count.

The chooser describes a CPU by what its plans' work runs at, not by a name: the factorized plan
is gathers, segment-sums and small products over the sources, the materialized plan streams the
joined table through BLAS or a CSR kernel, and both pay a fixed cost per call. :func:`probe`
measures, at the thread count the plans run at,

* ``bandwidth_gbs`` -- streaming read (a sum over a 128 MiB array, split among the threads), GB/s;
* ``gemm_gflops`` -- a 768 × 768 × 768 ``float64`` matrix product through BLAS, GFLOP/s;
* ``gather_gbs`` -- random rows of an 8-column table of 2^16 rows (4 MiB, a typical dimension)
  gathered with ``np.take``, split among the threads, GB/s of gathered values;
* ``call_us`` -- the fixed cost of one small NumPy call (a take and a matrix-vector product of a
  few elements), microseconds;

and records ``cores`` (the CPU affinity mask) and ``threads``. Only NumPy runs: a fresh
environment has no compiled kernels yet, and the probe must not wait for them. NumPy's take and
reductions release the GIL, so a pool of Python threads measures the parallel rates. Each rate is
the best of :data:`REPEATS` rounds (a noisy neighbour slows a round, never speeds it up).

The result is cached as JSON in :func:`host_folder` (the ``host_dir`` setting, default
``~/.cache/ilargi/host``), one file per machine and thread count, keyed by what identifies the
machine (CPU model, cores, memory, the NumPy and BLAS builds); ``probe(refresh=True)`` or
``python -m ilargi.calibration probe --refresh`` measures again.
"""

import hashlib
import json
import os
import platform
import re
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

import numpy as np

from ilargi._config import get_config, with_config
from ilargi.backend import compiling
from ilargi.backend import threads as thread_control

# Bumped whenever what is measured changes: a cache of another version is measured again.
PROBE_VERSION = 2  # 2: call_us from the fastest round (was the median)
RATES = ("bandwidth_gbs", "gemm_gflops", "gather_gbs", "call_us")
# The device features a probe gives the cost model (besides the device's name).
PROPERTIES = ("cores", "threads") + RATES
REPEATS = 5

STREAM_BYTES = 128 * 2**20
GEMM_SIZE = 768
GATHER_ROWS, GATHER_COLS, GATHERED = 2**16, 8, 2**20
CALLS = 400
CALL_ROUNDS = 15  # rounds of CALLS calls each; the fastest is kept


def host_folder():
    """The folder of cached probes.

    Returns
    -------
    pathlib.Path
        The ``host_dir`` setting (:func:`ilargi.get_config`, ``$ILARGI_HOST_DIR`` by default), or
        ``~/.cache/ilargi/host``.
    """
    folder = get_config()["host_dir"]
    return folder if folder is not None else Path.home() / ".cache" / "ilargi" / "host"


def cores():
    """The cores this process may run on (its CPU affinity mask).

    Returns
    -------
    int
    """
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


@lru_cache(maxsize=None)
def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib():
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30)
    except ImportError:
        return 0


@lru_cache(maxsize=1)
def _blas():
    """The BLAS NumPy calls, as threadpoolctl names it (or "unknown"); once per process, since
    threadpoolctl reads the process's whole memory map (milliseconds: most of a decision's time
    before this was kept)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    found = [
        f"{info.get('internal_api')} {info.get('version')}"
        for info in threadpool_info()
        if info.get("user_api") == "blas"
    ]
    return ", ".join(sorted(found)) or "unknown"


def machine():
    """What identifies this machine to the probe's cache.

    Returns
    -------
    dict
        CPU model, cores, memory (GiB), NumPy version and BLAS build.
    """
    return {
        "cpu": _cpu_model(),
        "cores": cores(),
        "memory_gib": _memory_gib(),
        "numpy": np.__version__,
        "blas": _blas(),
        "version": PROBE_VERSION,
    }


def cache_path(threads, folder=None):
    """The cache file of this machine's probe at ``threads`` threads.

    Parameters
    ----------
    threads : int
        The thread count.
    folder : path-like, optional
        Default :func:`host_folder`.

    Returns
    -------
    pathlib.Path
    """
    identity = machine()
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    slug = re.sub(r"[^a-z0-9]+", "-", identity["cpu"].lower()).strip("-")[:40] or "cpu"
    return Path(folder or host_folder()) / f"{slug}-{identity['cores']}c-{threads}t-{digest}.json"


def _best_rate(amount, run, repeats=REPEATS):
    """amount / (the fastest of ``repeats`` timed runs), after one untimed run."""
    run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return amount / max(best, 1e-9)


def _in_threads(pool, tasks):
    """A callable that runs every task once, in the pool's threads (inline for one task)."""
    if len(tasks) == 1:
        return tasks[0]
    tasks = [with_config(task) for task in tasks]  # the settings of the thread that probes
    return lambda: [future.result() for future in [pool.submit(task) for task in tasks]]


def _call_us(rng):
    """Microseconds of one small NumPy call (a take, a matrix-vector product), in the fastest of
    the rounds after a first untimed one, as the rates are: other work on the machine only adds
    to a round, and a median of a few rounds of a few hundred microseconds varied by half from
    one probe to the next on an idle virtual machine."""
    small, index, vector = rng.standard_normal((8, 4)), np.array([3, 1, 7, 0]), np.ones(4)

    def calls():
        for _ in range(CALLS):
            np.take(small, index, axis=0)
            small @ vector

    return 1e6 / _best_rate(2 * CALLS, calls, CALL_ROUNDS)


def measure(threads=None):
    """Measure this host's rates at a thread count (no cache: see :func:`probe`).

    Parameters
    ----------
    threads : int, optional
        Threads of BLAS and of the pool that splits the streams and gathers; default the count
        the plans run at now.

    Returns
    -------
    dict
        :data:`PROPERTIES`, and ``seconds`` the probe took.
    """
    k = thread_control.get_num_threads() if threads is None else int(threads)
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    stream = np.ones(STREAM_BYTES // 8)
    gather_source = rng.standard_normal((GATHER_ROWS, GATHER_COLS))
    index = rng.integers(0, GATHER_ROWS, GATHERED).astype(np.intp)
    chunks, pieces = np.array_split(stream, k), np.array_split(index, k)
    outs = [np.empty((piece.size, GATHER_COLS)) for piece in pieces]
    a, b = rng.standard_normal((GEMM_SIZE, GEMM_SIZE)), rng.standard_normal((GEMM_SIZE, GEMM_SIZE))
    with ThreadPoolExecutor(k) as pool, thread_control.threads(k):
        bandwidth = _best_rate(
            stream.nbytes, _in_threads(pool, [lambda c=c: np.add.reduce(c) for c in chunks])
        )
        gather = _best_rate(
            index.size * GATHER_COLS * 8,
            _in_threads(
                pool,
                [
                    lambda p=p, o=o: np.take(gather_source, p, axis=0, out=o, mode="clip")
                    for p, o in zip(pieces, outs)
                ],
            ),
        )
        gemm = _best_rate(2.0 * GEMM_SIZE**3, lambda: a @ b)
        call = _call_us(rng)
    return {
        "cores": cores(),
        "threads": k,
        "bandwidth_gbs": bandwidth / 1e9,
        "gemm_gflops": gemm / 1e9,
        "gather_gbs": gather / 1e9,
        "call_us": call,
        "seconds": time.perf_counter() - started,
    }


_MEMO: dict = {}


def _read(path):
    """A cached probe, or None if it is missing, unreadable or of another probe version."""
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(cached, dict)
        or cached.get("machine", {}).get("version") != PROBE_VERSION
        or any(not isinstance(cached.get(name), (int, float)) for name in PROPERTIES)
    ):
        return None
    return cached


def probe(threads=None, *, refresh=False, folder=None):
    """This host's properties at a thread count: read from the cache, or measured and cached.

    A probe taken while the compiled kernels build in the background (a fresh environment's
    first minute) serves this process only: the build holds a core, so the next process measures
    again rather than keep the slower rates for good.

    Parameters
    ----------
    threads : int, optional
        Default: the count the plans run at now (:func:`ilargi.get_num_threads`).
    refresh : bool, default=False
        Measure again and overwrite the cache.
    folder : path-like, optional
        The cache folder (default :func:`host_folder`).

    Returns
    -------
    dict
        :data:`PROPERTIES`, plus ``machine`` (what keys the cache), ``probed_at`` (UTC, ISO
        8601) and ``seconds`` (how long the measurement took).

    Examples
    --------
    >>> import tempfile
    >>> from ilargi.chooser.host import probe
    >>> host = probe(1, folder=tempfile.mkdtemp())  # measured once, then read from the cache
    >>> host["threads"], host["gemm_gflops"] > 0
    (1, True)
    """
    k = thread_control.get_num_threads() if threads is None else int(threads)
    path = cache_path(k, folder)
    if not refresh:
        cached = _MEMO.get(path) or _read(path)
        if cached is not None:
            _MEMO[path] = cached
            return cached
    result = {
        **measure(k),
        "machine": machine(),
        "probed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if compiling():  # a build holds a core: serve this process, measure again in the next
        _MEMO[path] = result
        return result
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(result, indent=1))
        scratch.replace(path)  # atomic: a concurrent reader sees the old file or the new one
    except OSError:  # a read-only home: the probe still serves this process
        pass
    _MEMO[path] = result
    return result


def clear_memo():
    """Forget the probes read in this process (the cache files stay)."""
    _MEMO.clear()
