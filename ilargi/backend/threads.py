"""How many threads ilargi's compiled kernels (Numba) and BLAS (through threadpoolctl) use.

One process-wide number k covers both, so the factorized plan (Numba) and the materialized plan
(BLAS) are compared and run at the same thread count::

    set_num_threads(2)          # from now on
    with threads(1):            # inside the block only, then the previous number again
        ...

The default is every core this process may run on (its CPU affinity mask), capped by Numba's
``NUMBA_NUM_THREADS``: joblib's process workers (loky) set that variable to cores / n_jobs, so
k defaults to their share of the cores and n_jobs processes do not oversubscribe the machine.
The mask is read once per process (and again by ``set_num_threads(None)``), as Numba and OpenBLAS
read theirs: every compiled launch asks for k, and a system call each time cost a few
microseconds of every small operator at the default count.

Numba keeps its thread count per Python thread (a thread started later uses all of Numba's
threads again), so the compiled kernels call :func:`apply` before each launch: it sets the
calling thread's Numba count to k when they differ. Numba is imported on first use only, so
importing ilargi stays cheap for code that never runs a compiled kernel.

:func:`set_num_threads` sets k for the process; a :func:`threads` block sets it for the Python
thread that opens it, until it closes (blocks nest). Blocks in several Python threads therefore
never undo each other (two fits in two threads, or Dask's threaded scheduler around its tasks,
each leave behind the count they found): Numba's count is per Python thread already. BLAS has one
count per process: while blocks are open it follows the most recently opened one still open, in
whichever thread, and the process-wide setting once none is.

Keep BLAS at one thread around loops that alternate compiled kernels with BLAS calls
(``threads(k, blas=1)``): OpenBLAS's idle workers spin after a call and Numba's OpenMP workers
after a kernel, so on a machine without spare cores each switch waits for a scheduler slice (a
short fused pass followed by a dot product then takes many times as long with BLAS at every
thread as with BLAS at one).
"""

import functools
import numbers
import os
import threading
from contextlib import contextmanager

__all__ = [
    "apply",
    "blas_held",
    "blas_held_on_demand",
    "default_num_threads",
    "get_num_threads",
    "max_num_threads",
    "set_num_threads",
    "settle_spin",
    "threads",
]

_lock = threading.RLock()
_k = None  # process-wide: None, the default (every core); else the number set
_k_blas = None  # process-wide: None, BLAS follows _k; else BLAS's own number
_blas = None  # the threadpoolctl limiter that set BLAS, kept alive while a number is set


class _Local(threading.local):
    blocks = None  # a class default: a thread with no block yet reads it without an exception


_local = _Local()  # .blocks: this Python thread's open threads() blocks, innermost last
_open: list = []  # every open block of every thread, in the order they were opened (BLAS's)
_held = 0  # blas_held() and blas_held_on_demand() blocks open (counted) in the main thread
_hold = None  # None: BLAS not held (yet); else what the outermost block puts back (_hold_blas)
_UNKNOWN = ()  # _hold when BLAS's count cannot be set (no threadpoolctl): nothing to put back


# libgomp's idle workers spin this many rounds after a parallel region before they sleep (its
# default, without OMP_WAIT_POLICY, is 300,000)
SPIN_COUNT = 30_000


def settle_spin():
    """Shorten the spin of Numba's idle OpenMP workers (``GOMP_SPINCOUNT``), once per process.

    After each parallel kernel libgomp's idle workers spin, waiting for the next one, 300,000
    rounds by default: milliseconds on a 2-core host. An operator's serial steps between its
    kernels (SciPy's sparse conversions) ran beside that spin, and Hamlet Flights' factorized
    crossprod was slower at 2 threads than at 1; a tenth of the rounds makes it faster at 2,
    and leaves whole fits (and LightGBM's) as fast, where idle workers that sleep at once
    (``OMP_WAIT_POLICY=PASSIVE``) slow fits down (figures in ``benchmarks/RESULTS.md``, the
    operators). libgomp reads the setting when it loads: it holds where ilargi's backend loads
    (any array work of ilargi's) before a library that loads libgomp (scikit-learn, LightGBM);
    ``GOMP_SPINCOUNT`` or ``OMP_WAIT_POLICY`` in the environment is left as it is. Processes
    started afterwards inherit it with the environment.

    Returns
    -------
    bool
        Whether this call set it.
    """
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return False
    os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)
    return True


def _numba():
    import numba

    return numba


def max_num_threads():
    """The most threads Numba can run: its ``NUMBA_NUM_THREADS`` (fixed when numba is imported)."""
    return int(_numba().config.NUMBA_NUM_THREADS)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


_default = None  # default_num_threads() once read in this process (None: not yet)


def _forget_default():
    global _default
    _default = None


if hasattr(os, "register_at_fork"):  # a forked child reads its own mask
    os.register_at_fork(after_in_child=_forget_default)


def default_num_threads():
    """Every core this process may use, at most :func:`max_num_threads` (read once per process,
    see the module docstring)."""
    global _default
    if _default is None:
        _default = max(1, min(_cores(), max_num_threads()))
    return _default


def _check(k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise ValueError(f"the number of threads must be a positive integer, got {k!r}")
    k = int(k)
    top = max_num_threads()
    if not 1 <= k <= top:
        raise ValueError(
            f"the number of threads must be in [1, {top}] (Numba's NUMBA_NUM_THREADS; "
            f"set that environment variable before starting Python for more), got {k}"
        )
    return k


def get_num_threads():
    """The number of threads the compiled kernels and BLAS use now.

    Returns
    -------
    int
        The number set by :func:`set_num_threads` or :func:`threads`, else the default: every core
        this process may use, at most Numba's ``NUMBA_NUM_THREADS``.
    """
    k = _setting()[0]
    return default_num_threads() if k is None else k


class _Block:
    """One open :func:`threads` block: its (k, blas), which :func:`set_num_threads` called
    inside it replaces until it closes."""

    __slots__ = ("k", "blas")

    def __init__(self, k, blas):
        self.k, self.blas = k, blas


def _blocks():
    blocks = _local.blocks
    if blocks is None:
        blocks = _local.blocks = []
    return blocks


def _setting():
    """(k, blas) in force in the calling Python thread: its innermost block's, else the
    process-wide setting."""
    blocks = _local.blocks
    if blocks:
        return blocks[-1].k, blocks[-1].blas
    return _k, _k_blas


def _sync_blas():
    """Set BLAS (one count per process) to the newest open block's count in any thread, else to
    the process-wide setting; the original limits when nothing is set. Under ``_lock``."""
    k, blas = (_open[-1].k, _open[-1].blas) if _open else (_k, _k_blas)
    if k is None and blas is None:
        _restore_blas()
    else:
        _limit_blas(k if blas is None else blas)


def _restore_blas():
    global _blas
    if _blas is not None:
        _blas.restore_original_limits()  # back to what BLAS had before ilargi touched it
        _blas = None


@functools.lru_cache(maxsize=None)
def _blas_controller():
    """One threadpoolctl controller of the loaded BLAS libraries, found once: building one scans
    the process's loaded libraries, a noticeable share of a short fit that
    sets BLAS twice. None without threadpoolctl."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return None
    import numpy.linalg  # noqa: F401  (both BLAS libraries loaded before the one scan:
    import scipy.linalg  # noqa: F401   SciPy loads its own OpenBLAS on first use)

    return ThreadpoolController().select(user_api="blas")


def _limit_blas(k):
    """BLAS limited to k threads until the next call (threadpoolctl; skipped if absent)."""
    global _blas
    controller = _blas_controller()
    if controller is None:  # pragma: no cover
        return
    _restore_blas()
    _blas = controller.limit(limits=k)


def set_num_threads(k=None, blas=None):
    """Use k threads in the compiled kernels and in BLAS from now on; None: the default.

    Outside a :func:`threads` block this is the process-wide setting, which every Python thread
    uses unless it is inside a block of its own. Inside a block it changes that block's setting
    only: the block still restores what was in force before it when it closes.

    Parameters
    ----------
    k : int or None, default=None
        Threads of the compiled kernels (and of BLAS unless ``blas`` is given), in
        [1, ``NUMBA_NUM_THREADS``]; None: back to the default, every core this process may use.
    blas : int or None, default=None
        A different count for BLAS only (e.g. 1 around a factorized fit, see the module
        docstring); None: BLAS follows ``k``.

    Raises
    ------
    ValueError
        Unless k (and blas) are integers in [1, NUMBA_NUM_THREADS].
    """
    global _k, _k_blas
    if k is None:
        _forget_default()  # back to the default: the affinity mask read again
    k = None if k is None else _check(k)
    blas = None if blas is None else _check(blas)
    with _lock:
        blocks = _local.blocks
        if blocks:
            blocks[-1].k, blocks[-1].blas = k, blas
        else:
            _k, _k_blas = k, blas
        _sync_blas()
    apply()


@contextmanager
def threads(k, blas=None):
    """Run the block with k threads (compiled kernels and BLAS), then restore the previous setting.

    The count is the calling Python thread's (see the module docstring): blocks opened in other
    threads at the same time neither see nor undo it. BLAS, one count per process, follows the
    most recently opened block still open.

    Parameters
    ----------
    k : int
        Threads of the compiled kernels (and of BLAS unless ``blas`` is given), in
        [1, ``NUMBA_NUM_THREADS``].
    blas : int or None, default=None
        A different count for BLAS only; None: BLAS follows ``k``.

    Yields
    ------
    int
        ``k``.

    Raises
    ------
    ValueError
        Unless k (and blas) are integers in [1, NUMBA_NUM_THREADS].

    Examples
    --------
    >>> import ilargi
    >>> with ilargi.threads(1):
    ...     ilargi.get_num_threads()
    1
    """
    k = _check(k)
    if blas is not None:
        blas = _check(blas)
    block = _Block(k, blas)
    blocks = _blocks()
    with _lock:
        blocks.append(block)
        _open.append(block)
        _sync_blas()
    apply()
    try:
        yield k
    finally:
        with _lock:
            blocks.remove(block)  # by identity: a block closes itself, whatever opened since
            _open.remove(block)
            _sync_blas()
        apply()


class blas_held:  # noqa: N801 -- a context manager used as a function, as contextlib's are
    """BLAS at one thread inside the block, the compiled kernels' count unchanged; yields whether
    BLAS is known to run at one thread inside it (False in a thread other than the main one).

    The kernels of the compiled backend take one around each BLAS call they make between compiled
    kernels, so that the call never wakes OpenBLAS's pool (see the module docstring; on a dense
    star at 2 threads this takes crossprod, Tᵀ·Y and T·X down by about a third). Blocks nest with
    each other and with :class:`blas_held_on_demand`; the outermost sets each BLAS library's count
    itself and puts back the count it found. Only the main Python thread holds BLAS: OpenBLAS
    ignores a thread count raised from another thread (0.3.30 here), so a hold taken there could
    not be undone. Nothing is done at one thread or where BLAS is held at one already.

    Every operator pays for its hold, so it is kept cheap: a class, not a generator-based context
    manager, a nested block only counted, and OpenBLAS's own ``openblas_get/set_num_threads``
    called directly (:func:`_hold_calls`). As a generator through threadpoolctl's per-library
    methods it cost several times more, enough to make a sub-millisecond operator slower at 2
    threads than at 1, where nothing is held (benchmarks/RESULTS.md, "Operators").
    """

    __slots__ = ("_counted",)
    _on_demand = False  # blas_held_on_demand: the hold waits for the first need of it

    def __init__(self):
        self._counted = False

    def __enter__(self):
        global _held
        main = threading.current_thread() is threading.main_thread()
        if _held and main:
            _held += 1  # nested in the main thread's blocks, whose hold this one takes if due
            self._counted = True
            return None if self._on_demand else _hold_blas()
        k, k_blas = _setting()
        if k_blas == 1 or (k if k is not None else default_num_threads()) == 1:
            return (k_blas or 1) == 1
        if not main:
            return False
        _held += 1
        self._counted = True
        return None if self._on_demand else _hold_blas()

    def __exit__(self, *exc):
        global _held, _hold
        if self._counted:
            _held -= 1
            if _held == 0:
                if _hold:
                    for set_count, count in reversed(_hold):
                        set_count(count)
                _hold = None
        return False


class blas_held_on_demand(blas_held):  # noqa: N801 -- as blas_held
    """:class:`blas_held` for a whole operator, taken at its first need: the first
    :class:`blas_held` block inside it (every BLAS call of the compiled backend's kernels, and
    those of the rewriter between them, is in one) or the first compiled launch at several
    threads (:func:`apply`), whichever comes first; then held until the block closes. Yields
    None.

    So an operator that calls BLAS or launches several threads runs with BLAS at one thread from
    that point to its end, as under :class:`blas_held`: BLAS's pool is never woken between its
    parallel kernels. An operator that does neither (every kernel on one thread, as on sources
    under ``SMALL_CSR`` entries) sets nothing: it runs at the default thread count as at one
    thread, where a hold costs more than its sub-millisecond work can spare.
    """

    __slots__ = ()
    _on_demand = True


def _hold_blas():
    """Hold BLAS at one thread for the main thread's open blocks, unless held already; whether
    BLAS is known to run at one thread now. In the main thread, with ``_held`` > 0."""
    global _hold
    if _hold is None:
        calls = _hold_calls()
        _hold = _UNKNOWN if calls is None else _one_thread(calls)
    return _hold is not _UNKNOWN


@functools.lru_cache(maxsize=None)
def _hold_calls():
    """[(get, set)] thread-count calls of each loaded BLAS library (None without threadpoolctl):
    OpenBLAS's own C functions on its pthreads layer, found once through threadpoolctl (its
    methods look the symbol up and check the calling thread at every call); threadpoolctl's
    methods for the other libraries and layers."""
    controller = _blas_controller()
    if controller is None:  # pragma: no cover
        return None
    calls = []
    for library in controller.lib_controllers:
        symbol = getattr(library, "_get_symbol", None)
        raw = (
            (symbol("openblas_get_num_threads"), symbol("openblas_set_num_threads"))
            if symbol is not None
            and library.internal_api == "openblas"
            and getattr(library, "threading_layer", None) == "pthreads"
            else (None, None)
        )
        calls.append(raw if None not in raw else (library.get_num_threads, library.set_num_threads))
    return calls


def _one_thread(calls):
    """[(set, the library's thread count before)] for the BLAS libraries not at one thread, now
    set to one."""
    before = []
    for get_count, set_count in calls:
        count = get_count()
        if count != 1:
            set_count(1)
            before.append((set_count, count))
    return before


def apply():
    """Set the calling Python thread's Numba thread count to :func:`get_num_threads`; returns it.

    Called by every compiled kernel before its launch (a few microseconds), because Numba's count
    is per Python thread. A launch at several threads inside a :class:`blas_held_on_demand`
    block of the main thread takes its hold on BLAS here, before Numba's threads start.
    """
    k = get_num_threads()
    if _held and _hold is None and k > 1 and threading.current_thread() is threading.main_thread():
        _hold_blas()
    numba = _numba()
    if numba.get_num_threads() != k:
        numba.set_num_threads(k)
    return k
