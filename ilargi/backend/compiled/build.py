"""Building the compiled kernels once per environment, off the critical path.

Numba compiles a kernel on its first call and caches the machine code on disk (``cache=True``, see
:mod:`.kernels`). A fresh environment (a new clone, container, CI runner or Dask worker host) would
pay that compile inside its first operator call or fit: tens of seconds, where the fit itself takes
a fraction of one. So the CPU backend runs in tiers (``ILARGI_KERNELS=auto``, the default, see
:mod:`ilargi.backend`): until the compiled kernels are built, the NumPy/SciPy kernels of
:mod:`..cpu` run, and one background process, started at the first call that wants the compiled
kernels, builds them into Numba's cache by calling each kernel on small inputs (:func:`warm_up`);
when it is done it writes a *ready marker* next to the cache, and from then on every process of
this environment uses the compiled kernels (loading them from the cache: milliseconds a kernel).

The marker's name is a digest of what makes Numba's cache valid: Numba's version, Python's, the
source of the kernels and of the warm-up, and the CPU target (name and features) the code is built
for. A change of any of them is a new name, so a stale marker is never found. The background
process runs at the lowest CPU priority, holds a lock so that concurrent processes start one
build between them, and records a failure (with its log) so that later processes do not retry a
build that cannot succeed.

``python -m ilargi compile`` (or :func:`build`) builds in the foreground instead, e.g. in a
container image, so that its first process already has them.

Processes that compile at once (the background build, a process with ``ILARGI_KERNELS=compiled``,
Dask workers of one host) share one cache. Numba's own cache is not safe for that (numba#4807):
each save reads the function's index, picks a data file name, writes the index, then the data,
so two processes saving two signatures of one function can leave the index pairing a signature
with the other's machine code, which the next process loads and crashes in. Every kernel's cache
therefore reads and writes under a file lock (:func:`lock_caches`).
"""

import fcntl
import functools
import hashlib
import importlib.metadata
import itertools
import os
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher

from .. import threads

__all__ = ["Status", "build", "lock_caches", "ready", "start_background_build", "status", "warm_up"]

# How often a process still on the NumPy kernels looks for the ready marker (one stat call).
RECHECK_SECONDS = 1.0

_lock = threading.Lock()
# This process's view: built (here or by a finished build), the build it started, its last look.
_state = {"ready": False, "started": False, "process": None, "checked": -float("inf")}


def _kernels():
    from . import kernels

    return kernels


def cache_folder():
    """The folder of Numba's cache of the kernels (``__pycache__`` next to them, the user's cache
    folder where that is read-only, or ``NUMBA_CACHE_DIR``), where the marker goes too."""
    return Path(_kernels().logistic_kernel._cache.cache_path)


def _fingerprint():
    """The digest that names the marker: what Numba's cache of these kernels is valid for."""
    from numba.core.registry import cpu_target

    digest = hashlib.sha256()
    for part in (
        importlib.metadata.version("numba"),
        sys.version,
        getattr(sys, "abiflags", ""),
        repr(cpu_target.target_context.codegen().magic_tuple()),
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    # every module of the package: a kernel defined in any of them is cached by Numba
    for module in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()[:20]


class _LockedCache(FunctionCache):
    """Numba's cache of one function, each load under a shared lock and each save (index and data
    together) under an exclusive one, held on a file in the cache folder. Compiling stays outside
    the lock: two processes may compile one signature, and the cache keeps one of the two."""

    def load_overload(self, sig, target_context):
        with _cache_lock(self.cache_path, fcntl.LOCK_SH):
            return super().load_overload(sig, target_context)

    def save_overload(self, sig, data):
        with _cache_lock(self.cache_path, fcntl.LOCK_EX):
            super().save_overload(sig, data)


@contextmanager
def _cache_lock(folder, mode):
    """Hold ``mode`` on the folder's cache lock (not the build lock, which a build holds while it
    saves); without a folder that can hold one, go on unlocked, as Numba does."""
    try:
        os.makedirs(folder, exist_ok=True)
        handle = open(os.path.join(folder, "ilargi-kernels-cache.lock"), "a")
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, mode)
        yield  # closing the file releases the lock


def lock_caches(namespace):
    """Give every cached Numba function of ``namespace`` (a module's ``globals()``) the locked
    cache; functions without ``cache=True`` keep none.

    Parameters
    ----------
    namespace : dict
        Names to functions, as a module's ``globals()``.
    """
    for function in namespace.values():
        if isinstance(function, Dispatcher) and type(function._cache) is FunctionCache:
            function._cache = _LockedCache(function.py_func)


class _Paths(NamedTuple):
    ready: Path  # the marker of a finished build
    failed: Path  # the marker of a failed one (its log)
    log: Path  # the background build's output
    lock: Path  # held by the process that builds


@functools.lru_cache(maxsize=None)
def _paths():
    """This environment's marker, failure marker, log and lock (one fingerprint a process)."""
    folder, stem = cache_folder(), f"ilargi-kernels-{_fingerprint()}"
    folder.mkdir(parents=True, exist_ok=True)  # Numba creates it on its first save only
    return _Paths(
        folder / f"{stem}.ready",
        folder / f"{stem}.failed",
        folder / f"{stem}.log",
        folder / "ilargi-kernels.lock",
    )


@dataclass(frozen=True)
class Status:
    """Where the compiled kernels of this environment stand, as :func:`status` reports it.

    Parameters
    ----------
    ready : bool
        Built and cached: a process loads them from the cache.
    building : bool
        A build is under way (another process holds the build lock).
    failed : str or None
        The end of the log of a build that failed, else None.
    cache : str
        Numba's cache folder of the kernels, where the markers and the build log are.
    """

    ready: bool
    building: bool
    failed: str | None
    cache: str


def status():
    """Where the compiled kernels of this environment stand (built, building, failed).

    Returns
    -------
    Status
        Whether they are ready, a build is running, or a build failed (and why).

    Examples
    --------
    >>> from ilargi.backend.compiled.build import status
    >>> isinstance(status().ready, bool)
    True
    """
    paths = _paths()
    failed = paths.failed.read_text(errors="replace")[-2000:] if paths.failed.exists() else None
    with open(paths.lock, "a") as handle:
        building = not _try_lock(handle)
        if not building:
            fcntl.flock(handle, fcntl.LOCK_UN)
    child = _state["process"]
    building = building or (child is not None and child.poll() is None)  # not locked yet
    return Status(
        paths.ready.exists() or _state["ready"], building, failed, str(paths.ready.parent)
    )


def _try_lock(handle):
    """Take the build lock without waiting; False if another process holds it."""
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def ready(recheck=True):
    """Whether the compiled kernels are built: in this process already, or by a finished build of
    this environment (its marker). While they are not, starts the background build once per
    process and looks for the marker again at most every RECHECK_SECONDS (only when ``recheck``:
    a fit in progress keeps the kernels it started with).

    Parameters
    ----------
    recheck : bool, default=True
        Look for the marker (else answer from what this process knows).

    Returns
    -------
    bool
        True once the compiled kernels can run without compiling.
    """
    if _state["ready"]:
        return True
    now = time.monotonic()
    if not recheck or now - _state["checked"] < RECHECK_SECONDS:
        return False
    with _lock:
        _state["checked"] = now
        try:
            paths = _paths()
            if paths.ready.exists():
                _state["ready"] = True
            elif not _state["started"] and not paths.failed.exists():
                _state["started"] = True
                _state["process"] = start_background_build()
        except OSError as error:  # no cache folder to mark: compile on first use, as Numba does
            warnings.warn(
                f"ilargi: the compiled kernels cannot be built in the background "
                f"({error}); they compile on first use",
                RuntimeWarning,
                stacklevel=4,
            )
            _state["ready"] = True
    return _state["ready"]


def start_background_build():
    """Start the build in a process of its own at the lowest CPU priority (nothing happens there
    if another process is building already); returns at once.

    Returns
    -------
    subprocess.Popen or None
        The process, or None where it could not be started (the NumPy kernels keep running).
    """
    env = dict(os.environ, ILARGI_KERNELS="compiled")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "ilargi.backend.compiled.build"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:  # no way to start a process here: stay on the NumPy kernels
        return None


def build(quiet=True):
    """Build the compiled kernels in this process (blocking) and mark them ready.

    Calls every kernel once (:func:`warm_up`), which compiles what Numba's cache lacks and loads
    the rest; a process that built them runs them from then on. A build under way in another
    process is waited for (the build lock), so the work is done once.

    Parameters
    ----------
    quiet : bool, default=True
        Print nothing (else one line with the seconds taken).

    Returns
    -------
    float
        Seconds taken.
    """
    start = time.perf_counter()
    paths = _paths()
    with open(paths.lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        warm_up()
        _mark_ready(paths, start)
    with _lock:
        _state["ready"] = True
    seconds = time.perf_counter() - start
    if not quiet:
        print(f"ilargi: compiled kernels ready in {seconds:.1f} s (cache: {paths.ready.parent})")
    return seconds


def _mark_ready(paths, start):
    paths.ready.write_text(f"built in {time.perf_counter() - start:.1f} s\n")
    paths.failed.unlink(missing_ok=True)


def _background():
    """The background build (``python -m ilargi.backend.compiled.build``): at the lowest priority,
    one at a time (a process that finds the lock held leaves), its output in the log."""
    os.nice(19)
    paths = _paths()
    with open(paths.lock, "a") as handle:
        if not _try_lock(handle) or paths.ready.exists():
            return 0
        with open(paths.log, "w") as log:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            return _build_locked(paths)


def _build_locked(paths):
    """Warm up with the lock held; the ready marker on success, the failure marker (the log's
    text and the traceback) on failure. Returns the exit status."""
    start = time.perf_counter()
    try:
        warm_up()
    except Exception:  # a build that cannot succeed here: recorded, so that none retries it
        import traceback

        paths.failed.write_text(traceback.format_exc())
        return 1
    _mark_ready(paths, start)
    return 0


def warm_up():
    """Call every compiled kernel once on small inputs, in every specialization the operators and
    the estimators use (float64; 1-D and 2-D operands; dense sources and CSR ones with 32- and
    64-bit indices; block partials and buckets; BLAS in row blocks; joins row by row and part by
    part; the links of the materialized plan), so that Numba compiles (or loads) each of them here
    rather than inside a user's first call. The size cut-offs that send small inputs to BLAS,
    SciPy or one thread are lifted meanwhile, so that small inputs reach every kernel."""
    from .. import compiled as C

    cut_offs = {
        "SMALL": 0,
        "SMALL_CSR": 0,
        "PARTIALS_RATIO": C.PARTIALS_RATIO,
        "BLAS_SPLIT": 1,
        "PART_MAJOR_PARTS": C.PART_MAJOR_PARTS,
    }
    saved = {name: getattr(C, name) for name in cut_offs}
    try:
        for k in sorted({1, min(2, threads.max_num_threads())}):  # some routes need 2 blocks
            with threads.threads(k):
                for name, value in cut_offs.items():
                    setattr(C, name, value)
                _call_every_kernel(C)
                # buckets; joins part by part; CSR products row by row on one thread
                C.PARTIALS_RATIO, C.PART_MAJOR_PARTS, C.SMALL_CSR = 0.0, 1, 1 << 62
                _call_every_kernel(C)
    finally:
        for name, value in saved.items():
            setattr(C, name, value)


def _call_every_kernel(C):
    from ilargi.metadata.indicator import Indicator
    from ilargi.metadata.parts import make_parts

    rng = np.random.default_rng(0)
    n = 2000
    dims = [Indicator(rng.integers(-1, 30, n), 30), Indicator(rng.integers(0, 7, n), 7)]
    csr = [sp.random(n, 4, 0.3, "csr", random_state=0)]
    wide = sp.csr_array(csr[0])
    wide.indices, wide.indptr = wide.indices.astype(np.int64), wide.indptr.astype(np.int64)
    csr.append(wide)
    plan = C.PassPlan(dims, fact=rng.standard_normal((n, 3)), fact_csr=csr[0])
    U, U3 = plan.buffer(), plan.buffer(3)
    labels = np.zeros(n, dtype=np.intp)
    C.logistic_pass(plan, U, np.zeros(n), None, np.ones(3), np.ones(4), 0.0)
    C.softmax_pass(plan, U3, labels)
    C.gramvec_pass(plan, U, np.ones(n))
    C.gramvec_pass(plan, U3)
    C.kmeans_pass(plan, U3, np.ones(n), np.ones(3), 1e-15)
    plan.scores(U), plan.scores(U3), plan.transposed(np.ones(n)), plan.transposed(np.ones((n, 3)))
    C.BinaryLink(np.zeros(n))(np.ones(n)), C.MultinomialLink(labels, 3)(np.ones((n, 3)))
    S = rng.standard_normal((n, 5))
    for X in (np.ones(5), np.ones((5, 1)), np.ones((5, 3))):
        C.product(S, X)
    for Y in (np.ones(n), np.ones((n, 3)), np.ones((n, 9))):
        C.transposed_product(S, Y)
    C.product(S, np.ones((5, 3)), out=np.empty((n, 3)))
    C.weighted_gram(S), C.weighted_gram(S, np.ones(n)), C.column_sums(S)
    C.square_excess(S, np.ones(5), np.ones(5))
    C.square_excess(S, np.ones(5), np.ones(5), np.ones(n))
    C.gram_pushes(S, dims), C.gram_pushes(S, dims, np.ones(n))
    for A in csr:
        C.product(A, np.ones(4)), C.transposed_product(A, np.ones(n)), C.column_sums(A)
        C.product(A, np.ones((4, 3))), C.transposed_product(A, np.ones((n, 3)))
        C.square_excess(A, np.ones(4), np.ones(4))
        acc = C.BlockAccumulator(n + 4, True)  # crossprod's sparse result: a block, its mirror
        acc.add(np.arange(n), np.arange(n, n + 4), A), acc.add(np.arange(n, n + 4), range(n), A.T)
        acc.result()
    for m in ((), (3,)):
        Z = np.ones((30,) + m)
        C.gather(Z, dims[1]), C.gather_add(np.ones((n,) + m), Z, dims[0])
        C.segment_sum(np.ones((n,) + m), dims[0])
    C.pushed_sums(np.ones((30, 2)), dims[0], dims[1])
    C.pushed_sums(sp.random(30, 5, 0.3, "csr"), dims[0], dims[1])
    C.direct_cross(sp.random(30, 5, 0.3, "csr"), dims[0].rows, np.ones((7, 2)), dims[1].rows)
    d = C.SMALL_DIRECTION
    C.lbfgs_direction(np.ones((2, d)), np.ones((2, d)), np.ones(2), [0], np.ones(d))
    rows, cols = [None, dims[0].rows, dims[1].rows], [range(5), [5, 6], [7, 8, 9]]
    dense = make_parts([S, np.ones((30, 2)), sp.random(7, 3, 0.5, "csr")], rows, cols, (n, 10))
    C.materialize_dense(dense, n, 10, np.float64)
    sparse = [sp.csr_array(S), sp.random(30, 2, 0.5, "csr"), sp.random(7, 3, 0.5, "csr")]
    C.materialize_sparse(make_parts(sparse, rows, cols, (n, 10)), n, 10)
    C.materialize_sparse(dense, n, 10)
    # gradient-boosted trees: float32 gradients by rows, float64 sums by key
    codes = rng.integers(0, 8, (31, 3)).astype(np.uint8)
    idx = np.arange(n, dtype=np.intp)
    # a tree learner's lists of rows are 32-bit; callers' may be 64-bit; None: every row
    for g, lists in (
        (np.ones(n, np.float32), (idx, idx.astype(np.int32), None)),
        (np.ones(n), (idx,)),
    ):
        for rows in lists:
            some = idx[:30] if rows is None else rows[:30]
            C.bin_histograms(codes, dims[0].rows, idx if rows is None else rows, g, g, None, 8)
            C.bin_histograms(codes[:30], None, some, g, g, None, 8)
            # a BinnedMatrix's stacked keys: 32 bits, a row's keys side by side
            R = np.asfortranarray(np.stack([dims[0].rows, dims[1].rows]).astype(np.int32))
            C.leaf_pass(R, [0, 1], [31, 8], codes[:1].repeat(n, axis=0), rows, g, g, 8)
            C.leaf_pass(R, [1], [8], None, rows, g, g, 8)
            # one keyed table: its (1 × n) keys are C- and Fortran-ordered, typed as C-ordered
            one = np.asfortranarray(dims[0].rows[None].astype(np.int32))
            C.leaf_pass(one, [0], [31], codes[:1].repeat(n, axis=0), rows, g, g, 8)
        C.leaf_sums(dims[0].rows, idx, g, g, 31)
    sums = np.ones((31, 3))
    C.bin_histograms(codes, None, idx[:31], sums[:, 0], sums[:, 1], sums[:, 2], 8)
    C.column_histograms(codes.T.copy(), np.array([[0, 0, 31, 1]]), sums, np.zeros((3, 8, 3)))
    columns = (
        np.array([0, 2, 3]),
        np.array([0, 5, 30]),
        np.array([1, 2, 0], dtype=np.uint8),
        np.array([[0, 0, 3, 0, 0, 0], [0, 3, 2, 1, 0, 1]]),
    )
    row_ptr = np.concatenate([[0], np.cumsum(np.bincount([0, 5, 30], minlength=31))])
    by_row = (row_ptr, np.array([1, 2, 3]), np.array([[0, 31, 3]]))
    for by_rows in (None, np.ones(1, bool)):
        C.sparse_histograms(columns, by_row, sums, np.ones(3), np.zeros((5, 3)), 31, by_rows)
    C.sparse_histograms(columns, by_row, sums, np.ones(3), np.zeros((5, 3)), 31, None, False)
    held, rebuilt = np.array([0, 5]), np.array([1])
    C.subtract_held(
        by_row, columns[3], held, sums, np.ones(3), np.zeros((5, 3)), rebuilt, np.zeros((5, 3))
    )
    for k in (3, 9):  # a table's numeric columns, one call and two
        C.dense_columns([np.ones(n)] * k, [0.0] * k, np.empty((n, k)))
    # binning: a column's bins, the codes per target row, the fact codes joint and by column
    for column in (S[:, 1], S[:, 1].copy()):  # a column of a source, or one of its own
        C.affine_column(column, 2.0, 1.0, np.empty(n))
    C.bin_column(np.ones(n), np.array([0.5, np.inf]), np.empty((n, 3), np.uint8), 1)
    C.gather_codes(np.empty((n, 4), np.uint8), 1, codes, dims[0].rows)
    C.gather_codes(np.empty((n, 4), np.uint8), 1, codes[:1].repeat(n, axis=0), None)
    C.joint_codes(codes, [[0, 1], [2]], np.array([8, 8, 8]))
    order = idx.copy()
    C.partition_rows(order, 0, n, codes, dims[0].rows, 1, 3)
    C.partition_rows(order, 0, 30, codes[:30], None, 0, 3)
    _split_every_way(C, codes, n)
    C.best_thresholds(
        np.ones((11, 3)),
        np.array([0, 8, 10]),
        np.array([8, 2, 1]),
        np.ones(3, bool),
        1.0,
        2.0,
        5,
        [0.0] * 6,
    )
    for zero_first in (True, False):
        C.nan_thresholds(
            np.ones((11, 3)),
            np.array([0, 8]),
            np.array([8, 3]),
            np.array([zero_first, False]),
            1.0,
            2.0,
            5,
            [0.0] * 6,
        )
    C.rebuild_bins(np.ones((11, 3)), np.array([0, 8]), np.array([8, 3]), np.array([2, 1]), 1.0, 2.0)
    for onehot in (4.0, 2.0):  # each category alone, and sorted sets
        C.categorical_splits(
            np.ones((11, 3)),
            np.array([0, 8]),
            np.array([8, 3]),
            1.0,
            2.0,
            5,
            [0.0] * 6 + [onehot, 4.0, 1.0, 1.0, 1.0],
        )


_SOME_BINS = np.arange(256) % 3 == 0  # a categorical split's table of the bins that go left


def _split_every_way(C, codes, n):
    """The splits of a leaf's rows as the learner makes them: labels of one byte and of four,
    index vectors of four bytes and of eight and none, histogram ranges subtracted."""
    m = codes.shape[0]  # codes rows: index vector + 1, or the target rows themselves
    flags = np.zeros(-(-n // 8) * 8, dtype=np.uint8)
    keyed = [np.arange(n, dtype=t) % (m - 1) for t in (np.int32, np.intp)]
    for label_type, list_type in itertools.product((np.uint8, np.int32), (np.int32, np.intp)):
        out = np.empty(n, dtype=list_type)
        for rows in (None, *keyed):
            lst = np.arange(m if rows is None else n, dtype=list_type)
            labels = np.zeros(n, dtype=label_type)
            C.split_rows(lst, labels, 0, 1, codes, rows, 0, 3, True, out)
            if label_type is np.uint8 and list_type is np.int32:  # a learner's, categories
                C.split_rows(lst, labels, 0, 1, codes, rows, 0, _SOME_BINS, True, out)
            C.compact_rows(lst, labels, 0)
            C.add_by_label(np.zeros(n), np.ones(2), labels)
            C.residuals(np.zeros(n), np.ones(n, np.float32), np.empty(n, np.float32))
            C.add_by_label_residuals(
                np.zeros(n), np.ones(2), labels, np.ones(n, np.float32), np.empty(n, np.float32)
            )
            if rows is not None:
                keys = np.array([1, 4], dtype=np.intp)
                C.split_by_keys(C.inverse_index(rows, m), keys, labels, 1, 2, flags, out)
    hist = np.ones((11, 3))
    offsets, n_bins = np.array([0, 8], dtype=np.intp), np.array([8, 3], dtype=np.intp)
    C.subtract_ranges(hist, np.ones((11, 3)), offsets, n_bins)
    from .kernels import buffered_sum_kernel  # sum_float64's, which NumPy sums for short vectors

    buffered_sum_kernel(np.ones(n, np.float32), 512, np.empty(-(-n // 512)))


if __name__ == "__main__":
    sys.exit(_background())
