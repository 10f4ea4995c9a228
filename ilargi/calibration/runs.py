"""Both plans of a workload as callables, and the side-by-side timing of the two.

Shared by the sweep that collects training data and by ``benchmarks/bench_chooser.py``, so both time
exactly the same code. The materialized plan runs on the joined table T (built beforehand: its cost
is the join time, measured apart); the factorized plan on the NormalizedMatrix.
"""

import statistics
import time
import warnings

from sklearn.base import clone

from ilargi.backend import namespace_of
from ilargi.chooser.workload import Workload
from ilargi.rewriter import materialized


def operator_calls(nm, T, workload, rng):
    """Both plans of an operator workload, as zero-argument callables.

    The materialized plan is the operator on T through the backend's kernels
    (:mod:`ilargi.rewriter.materialized`, what ``plan="materialized"`` runs): on the CPU
    ilargi's parallel kernels at the same thread count as the factorized plan, and in the
    same thread pool, so that neither plan's idle threads hold the cores the other one needs.

    Parameters
    ----------
    nm : NormalizedMatrix
        The data, factorized.
    T : array or sparse matrix
        The same data, materialized.
    workload : ilargi.chooser.workload.Workload
        An operator workload.
    rng : numpy.random.Generator
        Draws the operands.

    Returns
    -------
    factorized, materialized : callable
        The operator on ``nm`` and on ``T``.

    Raises
    ------
    ValueError
        If the workload is not an operator.

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi.calibration.runs import operator_calls
    >>> from ilargi.chooser.workload import Workload
    >>> from ilargi.datasets import make_star
    >>> nm, _ = make_star(200, target=None, random_state=0)
    >>> fact, mat = operator_calls(nm, nm.materialize(), Workload("lmm", 3), np.random.default_rng(0))
    >>> bool(np.allclose(fact(), mat()))
    True
    """
    xp = namespace_of(nm.parts[0].source)
    n, d = nm.shape
    m = workload.m

    def operand(rows):
        shape = (rows,) if m == 1 else (rows, m)
        return xp.asarray(rng.standard_normal(shape))

    kind = workload.kind
    if kind == "lmm":
        X = operand(d)
        return (lambda: nm @ X), (lambda: materialized.lmm(T, X))
    if kind == "rmm":
        X = operand(n).T
        return (lambda: X @ nm), (lambda: materialized.tmm(T, X.T).T)
    if kind == "tmm":
        Y = operand(n)
        return (lambda: nm.T @ Y), (lambda: materialized.tmm(T, Y))
    if kind == "rowsums":
        return (lambda: nm.sum(axis=1)), (lambda: materialized.rowsums(T))
    if kind == "colsums":
        return (lambda: nm.sum(axis=0)), (lambda: materialized.colsums(T))
    if kind == "crossprod":
        return nm.crossprod, (lambda: materialized.crossprod(T))
    if kind == "gramvec":
        x, v = xp.asarray(rng.standard_normal(d)), xp.asarray(rng.random(n))
        return (lambda: nm.gramvec(x, v)), (lambda: materialized.gramvec(T, x, v))
    raise ValueError(f"{kind!r} is not an operator")


class Fit:
    """One plan's fit of an estimator, as a zero-argument callable; ``estimator`` is the model it
    fits (fitted after a call). Convergence warnings are silenced: the iteration budget is fixed.

    Parameters
    ----------
    estimator : estimator
        The model to fit (fitted in place).
    X : NormalizedMatrix, array or sparse matrix
        The data.
    y : array-like, optional
        The target.
    """

    def __init__(self, estimator, X, y=None):
        self.estimator, self.X, self.y = estimator, X, y

    def __call__(self):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.estimator.fit(self.X, self.y)


def model_calls(estimator, nm, T, y=None):
    """Both plans of an estimator's fit, as zero-argument callables.

    On a GPU the estimators take no bare CuPy table, so the materialized fit gets nm with
    plan="materialized" and builds T itself.

    Parameters
    ----------
    estimator : estimator
        Cloned for each plan.
    nm : NormalizedMatrix
        The data, factorized.
    T : array or sparse matrix
        The same data, materialized.
    y : array-like, optional
        The target, for supervised estimators.

    Returns
    -------
    factorized, materialized : Fit
        Fits on ``nm`` and on ``T``.
    join_included : bool
        The materialized fit builds the join itself (on a GPU): the caller takes its time off.
    """
    factorized = clone(estimator).set_params(plan="factorized")
    materialized = clone(estimator).set_params(plan="materialized")
    on_gpu = nm.device == "gpu"
    return Fit(factorized, nm, y), Fit(materialized, nm if on_gpu else T, y), on_gpu


def iterations_run(workload, estimator):
    """The workload of a fit with the iterations it ran, where it stopped before its budget.

    A fit converges before ``max_iter`` more often on synthetic data than on real data; the time
    it took belongs to the iterations it ran (k-means: those of its best run, times its runs).

    Parameters
    ----------
    workload : ilargi.chooser.workload.Workload
        The fit's workload, as the estimator describes it before fitting (``max_iter``).
    estimator : estimator
        The fitted estimator (its ``n_iter_``).

    Returns
    -------
    ilargi.chooser.workload.Workload
        ``workload`` with ``iterations`` at most the iterations run (at least 1).

    Examples
    --------
    >>> from ilargi.calibration.runs import iterations_run
    >>> from ilargi.chooser.workload import Workload
    >>> from ilargi.models import KMeans
    >>> fitted = KMeans(2, n_init=3).set_params()
    >>> fitted.n_iter_ = 4
    >>> iterations_run(Workload("kmeans", 2, 300 * 3), fitted)
    Workload(kind='kmeans', m=2, iterations=12)
    """
    ran = getattr(estimator, "n_iter_", None)
    if ran is None:
        return workload
    runs = (
        int(estimator.n_init)
        if workload.kind == "kmeans" and isinstance(estimator.init, str)
        else 1
    )
    iterations = max(1, min(workload.iterations, int(ran) * runs))
    return Workload(workload.kind, workload.m, iterations)


def _once(fn, sync):
    start = time.perf_counter()
    fn()
    if sync is not None:
        sync()
    return time.perf_counter() - start


# Calls shorter than this are timed after one untimed call of the same plan: at several threads a
# compiled kernel launched right after a multi-threaded BLAS call (or the reverse) waits for a
# core that the other pool's idle threads still spin on (a short call right after the other plan
# can take many times as long as alone; benchmarks/bench_interference.py measures it).
SETTLE = 0.05


def time_pair(factorized, materialized, budget=0.3, min_repeats=3, max_repeats=15, sync=None):
    """Median times of two callables, measured side by side.

    One warm-up call of each, then the rounds in blocks of one plan at a time, in the order
    factorized, materialized, materialized, factorized, so that a drift in the machine's speed
    hits both plans alike; a block of short calls starts with an untimed call, so that neither
    plan is timed while the other's threads still hold the cores (a user runs one plan, not the
    two in turn). Short calls get more rounds (as many as fit in ``budget`` seconds, up to
    ``max_repeats``); calls of over half a second each get two.

    Parameters
    ----------
    factorized, materialized : callable
        The two plans, without arguments.
    budget : float, default=0.3
        Seconds the rounds may take.
    min_repeats, max_repeats : int, default=3, 15
        Bounds on the number of rounds.
    sync : callable, optional
        Called after each call (device synchronization on a GPU).

    Returns
    -------
    t_factorized, t_materialized : float
        Median seconds.
    repeats : int
        Rounds run: calls timed per plan.

    Examples
    --------
    >>> from ilargi.calibration.runs import time_pair
    >>> t_fact, t_mat, repeats = time_pair(lambda: sum(range(100)), lambda: sum(range(1000)))
    >>> repeats >= 3, t_fact > 0, t_mat > 0
    (True, True, True)
    """
    plans = (factorized, materialized)
    first = [_once(plan, sync) for plan in plans]
    repeats = int(min(max_repeats, max(min_repeats, budget // max(sum(first), 1e-9))))
    if sum(first) > 1.0:
        repeats = 2
    times = ([], [])
    for which, count in (
        (0, (repeats + 1) // 2),
        (1, (repeats + 1) // 2),
        (1, repeats // 2),
        (0, repeats // 2),
    ):
        if count and first[which] < SETTLE:
            _once(plans[which], sync)
        times[which].extend(_once(plans[which], sync) for _ in range(count))
    return statistics.median(times[0]), statistics.median(times[1]), repeats


def time_join(nm, repeats=3, sync=None):
    """Time the join, apart from any workload.

    Parameters
    ----------
    nm : NormalizedMatrix
        The data.
    repeats : int, default=3
        Joins to time.
    sync : callable, optional
        Called after each join (device synchronization on a GPU).

    Returns
    -------
    seconds : float
        Median time of ``nm.materialize()``.
    T : array or sparse matrix
        The last table built.
    """
    times = []
    for _ in range(repeats):
        T = None  # drop the previous table before building the next
        start = time.perf_counter()
        T = nm.materialize()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times), T
