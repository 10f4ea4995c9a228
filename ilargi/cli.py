"""The ``ilargi`` command (``python -m ilargi``).

With no arguments it runs the main job: generate a synthetic normalized dataset (a star schema, no
files needed), train one estimator with the factorized and with the materialized plan on the same
rows, and print a comparison table: fit time, peak memory, held-out accuracy or R^2, and the plan
that ``plan="auto"`` picks. Options pick a real dataset, an estimator (``--model``) and the plans
to run.

    ilargi                                  # logistic regression on a synthetic star schema
    ilargi --hamlet ../shared/datasets/hamlet/Yelp --model kmeans
    ilargi --santoku ../shared/datasets/santoku/Flights
    ilargi --tpch 0.1                       # ridge regression on lineitem ⋈ orders ⋈ customer ⋈ part
    ilargi --model gbdt                     # gradient-boosted trees (a classifier; --tpch: a regressor)
    ilargi calibrate [--budget-seconds S] [--out DIR]   # re-fit the plan chooser to this machine
    ilargi compile                          # build the compiled kernels now (once per environment)

:func:`compare_plans` and :func:`format_comparison` are what the examples use to print the same table.
"""

import argparse
import sys
import time
import tracemalloc
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sklearn.base import clone, is_classifier, is_regressor

from ilargi import datasets
from ilargi._config import get_config
from ilargi.backend import compile_kernels, kernel_status, kernels_held
from ilargi.backend import threads as thread_control
from ilargi.calibration import __main__ as calibration_cli
from ilargi.calibration.__main__ import (
    EXPECTED_ERRORS,
    Parser,
    existing_folder,
    fail,
    non_negative_int,
    positive_float,
    positive_int,
)
from ilargi.chooser import choose
from ilargi.models import (
    GNMF,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    KMeans,
    LinearRegression,
    LogisticRegression,
    Ridge,
)

PLANS = ("factorized", "materialized")
# The estimators of --model.
ESTIMATORS = {
    "logistic": lambda args: LogisticRegression(max_iter=args.max_iter or 100),
    "logistic-gd": lambda args: LogisticRegression(solver="gd", max_iter=args.max_iter or 20),
    "linear": lambda args: LinearRegression(max_iter=args.max_iter),
    "ridge": lambda args: Ridge(alpha=1.0, max_iter=args.max_iter),
    "kmeans": lambda args: KMeans(n_clusters=8, max_iter=args.max_iter or 300, random_state=0),
    "gnmf": lambda args: GNMF(n_components=5, max_iter=args.max_iter or 200, random_state=0),
    # --max-iter: the number of trees; a regressor on --tpch's regression target.
    "gbdt": lambda args: (GradientBoostingRegressor if args.tpch else GradientBoostingClassifier)(
        n_estimators=args.max_iter or 100, random_state=0
    ),
}


def shared_datasets():
    """The folder of the real datasets.

    Returns
    -------
    pathlib.Path
        The ``datasets_dir`` setting (:func:`ilargi.get_config`, ``$ILARGI_DATASETS`` by
        default), else ``shared/datasets`` next to the checkout.
    """
    folder = get_config()["datasets_dir"]
    if folder is None:
        folder = Path(__file__).resolve().parents[2] / "shared" / "datasets"
    return folder


@dataclass
class Result:
    """One fit, as :func:`compare_plans` measures it.

    Parameters
    ----------
    plan : str
        The plan that ran.
    seconds : float
        Wall time of the fit.
    peak_mib : float
        Peak memory the fit allocated, MiB.
    score : float
        The held-out score (see :func:`score_name`).
    fitted : estimator, optional
        The fitted estimator: what it learned of the labels (a classifier's classes) is what a fit
        with ``plan="auto"`` knows when it chooses.
    warm_up_seconds : float, default=0.0
        Wall time of the plan's untimed warm-up fit on a sample, before the timed fits: where
        loading the compiled kernels (or compiling them, with ``kernels="compiled"`` in an
        environment that has not built them) is paid, apart from the fit time.
    """

    plan: str
    seconds: float
    peak_mib: float
    score: float
    fitted: object = None
    warm_up_seconds: float = 0.0


def score_name(estimator):
    """What :func:`compare_plans` scores an estimator by.

    Parameters
    ----------
    estimator : estimator
        A classifier, regressor, KMeans or GNMF.

    Returns
    -------
    str
        Test accuracy, R^2, inertia per row or relative reconstruction error.
    """
    if is_classifier(estimator):
        return "test accuracy"
    if is_regressor(estimator):
        return "test R^2"
    if isinstance(estimator, KMeans):
        return "test inertia/row"
    return "test rel. error"


def _score(estimator, X_test, y_test):
    if is_classifier(estimator) or is_regressor(estimator):
        return float(estimator.score(X_test, y_test))
    if isinstance(estimator, KMeans):
        return -estimator.score(X_test) / X_test.shape[0]
    # GNMF: ||X - W H||_F / ||X||_F on the held-out rows, W fitted to them with H fixed.
    return float(np.sqrt(-2.0 * estimator.score(X_test) / float(X_test.sum_of_squares())))


def compare_plans(estimator, X, y=None, plans=PLANS, test_fraction=0.2, seed=0, threads=None):
    """Fit a clone of an estimator once per plan on the same rows and score it on held-out rows.

    Time and peak memory cover the whole fit, so the materialized plan pays for the join it builds
    and the factorized plan for what it builds on its matrix; memory is what the fit allocates
    (tracemalloc sees NumPy and SciPy buffers), the inputs excluded, measured in a second, untimed
    fit. Before either plan is timed, each fits once on a few training rows, untimed: a process
    loads the compiled kernels on their first call (once per process;
    ``benchmarks/bench_kernels.py --compile-cost`` measures it), a cost that would otherwise fall
    on whichever plan runs first; it is reported apart (``Result.warm_up_seconds``). Both plans run
    the same CPU kernels: where the compiled ones are still being built in the background, the
    NumPy kernels run for the whole comparison (:func:`ilargi.backend.kernels_held`).

    Parameters
    ----------
    estimator : estimator
        An ilargi estimator with a ``plan`` parameter.
    X : NormalizedMatrix
        The data.
    y : array-like, optional
        The target, for supervised estimators.
    plans : tuple of str, default=("factorized", "materialized")
        The plans to run, in order.
    test_fraction : float, default=0.2
        Fraction of the rows held out.
    seed : int, default=0
        Seed of the split.
    threads : int or None, default=None
        Threads of both plans during the fits (the compiled kernels and BLAS, see
        :func:`ilargi.threads`); None: the current setting (every core by default).

    Returns
    -------
    list of Result
        One per plan.

    See Also
    --------
    format_comparison : The results as a table.

    Examples
    --------
    >>> from ilargi.cli import compare_plans
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import LinearRegression
    >>> X, y = make_star(2000, tuple_ratio=10, d_fact=3, random_state=0)
    >>> results = compare_plans(LinearRegression(), X, y)
    >>> [r.plan for r in results], all(r.score > 0.9 for r in results)
    (['factorized', 'materialized'], True)
    """
    order = np.random.default_rng(seed).permutation(X.shape[0])
    cut = X.shape[0] - int(test_fraction * X.shape[0])
    train, test = np.sort(order[:cut]), np.sort(order[cut:])
    X_train, X_test = X[train], X[test]
    y_train = None if y is None else y[train]
    y_test = None if y is None else y[test]
    with thread_control.threads(threads or thread_control.get_num_threads()), kernels_held():
        warm = np.sort(order[: min(cut, WARM_ROWS)])
        warm_up = [
            _warm_up(
                clone(estimator).set_params(plan=plan), X[warm], None if y is None else y[warm]
            )
            for plan in plans
        ]
        return [
            replace(
                _fit_and_score(
                    clone(estimator).set_params(plan=plan), X_train, y_train, X_test, y_test
                ),
                warm_up_seconds=seconds,
            )
            for plan, seconds in zip(plans, warm_up)
        ]


WARM_ROWS = 1000  # rows of the untimed fits that load the kernels


def _warm_up(estimator, X, y):
    """One untimed fit of at most two iterations (two trees) on a sample, to load the kernels the
    plan calls; returns its wall time."""
    for name in ("max_iter", "n_estimators"):
        if name in estimator.get_params():
            estimator.set_params(**{name: 2})
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            estimator.fit(X, *(() if y is None else (y,)))
        except ValueError:  # the sample does not suit the estimator (one class, too few rows)
            pass
    return time.perf_counter() - start


def _fit_and_score(estimator, X_train, y_train, X_test, y_test):
    fit_args = () if y_train is None else (y_train,)
    start = time.perf_counter()
    estimator.fit(X_train, *fit_args)
    seconds = time.perf_counter() - start
    # Memory in a second fit: tracemalloc slows allocation-heavy code, so it must not be timed.
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with warnings.catch_warnings():  # the timed fit already reported them
            warnings.simplefilter("ignore")
            clone(estimator).fit(X_train, *fit_args)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    return Result(
        estimator.plan_, seconds, peak / 2**20, _score(estimator, X_test, y_test), estimator
    )


def format_comparison(estimator, X, results):
    """The results of :func:`compare_plans` as a table, with the ratios and what ``plan="auto"`` picks.

    Parameters
    ----------
    estimator : estimator
        The estimator compared.
    X : NormalizedMatrix
        The data it was compared on (the plan chooser decides for it).
    results : list of Result
        From :func:`compare_plans`.

    Returns
    -------
    str
        Lines of text: a header, one line per plan, the ratios when both plans ran, the choice.

    Examples
    --------
    >>> from ilargi.cli import Result, format_comparison
    >>> from ilargi.datasets import make_star
    >>> from ilargi.models import LinearRegression
    >>> X, _ = make_star(200, target=None, random_state=0)
    >>> results = [Result("factorized", 0.5, 1.0, 0.9), Result("materialized", 1.0, 4.0, 0.9)]
    >>> print(format_comparison(LinearRegression(), X, results))  # doctest: +ELLIPSIS
    plan            fit time (s)   peak memory (MiB)         test R^2
    factorized             0.500                 1.0           0.9000
    materialized           1.000                 4.0           0.9000
    factorized is 2.00x as fast and uses 0.25x the memory of materialized
    plan="auto" picks ...

    Tree ensembles have a rule of their own (LightGBM on the table where it fits in memory):

    >>> from ilargi.models import GradientBoostingClassifier
    >>> print(format_comparison(GradientBoostingClassifier(), X, results[:1]))
    ... # doctest: +ELLIPSIS
    plan            fit time (s)   peak memory (MiB)       test accuracy
    factorized             0.500                 1.0           0.9000
    plan="auto" picks materialized: LightGBM on the table ...
    """
    name = score_name(estimator)
    lines = [f"{'plan':<14}{'fit time (s)':>14}{'peak memory (MiB)':>20}{name:>20}"]
    for r in results:
        lines.append(f"{r.plan:<14}{r.seconds:>14.3f}{r.peak_mib:>20.1f}{r.score:>20.4f}")
    by_plan = {r.plan: r for r in results}
    if set(PLANS) <= set(by_plan):
        fact, mat = by_plan["factorized"], by_plan["materialized"]
        lines.append(
            f"factorized is {mat.seconds / fact.seconds:.2f}x as fast and uses "
            f"{fact.peak_mib / max(mat.peak_mib, 1e-9):.2f}x the memory of materialized"
        )
    lines.append(_auto_line(estimator, X, results))
    return "\n".join(lines)


def _auto_line(estimator, X, results):
    # What a fit with plan="auto" asks: it knows the labels' classes by then (a multinomial
    # logistic fit is as many columns wide as classes), so ask with a fitted estimator.
    asking = next((r.fitted for r in results if r.fitted is not None), estimator)
    plan = choose(X, asking, repeats=1)
    return f'plan="auto" picks {"factorized" if plan.factorize else "materialized"}: {plan.reason}'


def _describe(X):
    parts = ", ".join(f"{p.name} {p.source.shape[0]:,}x{p.source.shape[1]:,}" for p in X.parts)
    return f"{X.shape[0]:,} rows x {X.shape[1]:,} columns from {len(X.parts)} parts ({parts})"


def _load(args, estimator):
    """(description, X, y) of the dataset the options name."""
    if args.hamlet:
        X, y = datasets.load_hamlet(args.hamlet)
        return f"Hamlet {args.hamlet}", X, y
    if args.santoku:
        X, y = datasets.load_santoku_matrix(args.santoku)
        return f"Santoku {args.santoku}", X, y
    if args.tpch:
        try:
            X, y = datasets.tpch_regression(args.tpch)
        except (
            RuntimeError
        ) as error:  # tpchgen-cli missing (the message names the extra) or failing
            raise ValueError(str(error)) from None
        return f"TPC-H sf={args.tpch:g}", X, y
    target = "logistic" if is_classifier(estimator) else "linear"
    X, y = datasets.make_star(
        args.rows,
        tuple_ratio=args.tuple_ratio,
        feature_ratio=args.feature_ratio,
        n_dims=2,
        d_fact=10,
        target=target,
        random_state=args.seed,
    )
    return (
        f"synthetic star (tuple ratio {args.tuple_ratio:g}, feature ratio {args.feature_ratio:g})",
        X,
        y,
    )


def _parser():
    parser = Parser(
        prog="ilargi",
        description="Train an estimator on normalized data, factorized and materialized, "
        "and compare. 'ilargi calibrate --help' re-fits the plan chooser to this machine.",
    )
    data = parser.add_mutually_exclusive_group()
    data.add_argument(
        "--hamlet",
        metavar="DIR",
        type=existing_folder,
        help="a Hamlet dataset folder (one-hot star schema)",
    )
    data.add_argument(
        "--santoku",
        metavar="DIR",
        type=existing_folder,
        help="a Santoku dataset folder (raw categorical tables)",
    )
    data.add_argument(
        "--tpch", metavar="SF", type=positive_float, help="TPC-H at this scale factor (generated)"
    )
    parser.add_argument(
        "--model",
        choices=sorted(ESTIMATORS),
        default=None,
        help="default: ridge for --tpch (its one-hot columns make plain least squares "
        "singular), logistic otherwise; gbdt: gradient-boosted trees (a classifier, a "
        "regressor for --tpch)",
    )
    parser.add_argument("--plan", choices=["both", "auto", *PLANS], default="both")
    parser.add_argument(
        "--max-iter",
        type=positive_int,
        default=None,
        help="iterations of the estimator's solver (gbdt: trees, 100 by default)",
    )
    parser.add_argument(
        "--rows", type=_rows, default=200_000, help="synthetic: fact-table rows (at least 10)"
    )
    parser.add_argument(
        "--tuple-ratio",
        type=positive_float,
        default=20.0,
        help="synthetic: fact rows per dimension row",
    )
    parser.add_argument(
        "--feature-ratio",
        type=positive_float,
        default=2.0,
        help="synthetic: dimension columns per fact-table column",
    )
    parser.add_argument("--seed", type=non_negative_int, default=0)
    parser.add_argument(
        "--threads",
        type=non_negative_int,
        default=0,
        help="threads of both plans (compiled kernels and BLAS; 0, the default: every core)",
    )
    return parser


def _rows(text):
    """``--rows``: enough fact rows for a held-out split with rows on both sides."""
    value = positive_int(text)
    if value < MIN_ROWS:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_ROWS}, got {text!r}")
    return value


MIN_ROWS = 10


def main(argv=None):
    """The ``ilargi`` command: compare the plans of one fit, or ``ilargi calibrate ...``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: the command line); ``--help`` lists them.

    Returns
    -------
    int
        The exit status: 0, or 2 for a bad option or input (one line on stderr, no traceback:
        argparse's checks, and the errors a malformed dataset folder raises).

    Examples
    --------
    >>> from ilargi.cli import main
    >>> main(["--rows", "2000", "--model", "linear"])  # doctest: +SKIP
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["calibrate"]:
        return calibration_cli.main(argv)
    if argv[:1] == ["compile"]:
        return _compile(argv[1:])
    args = _parser().parse_args(argv)
    try:
        return _compare(args)
    except EXPECTED_ERRORS as error:
        folder = args.hamlet or args.santoku  # a loader's error may not say which folder it read
        return fail(
            "ilargi", f"{folder}: {error}" if folder and str(folder) not in str(error) else error
        )


def _compare(args):
    estimator = ESTIMATORS[args.model or ("ridge" if args.tpch else "logistic")](args)
    description, X, y = _load(args, estimator)
    if isinstance(estimator, GNMF):
        X = abs(X)  # GNMF needs non-negative data; abs stays factorized
    if not (is_classifier(estimator) or is_regressor(estimator)):
        y = None
    plans = PLANS if args.plan == "both" else (args.plan,)
    print(f"ilargi: {type(estimator).__name__} on {description}")
    print(f"  {_describe(X)}")
    kernels = kernel_status()  # the kernels of the comparison: it holds them (kernels_held)
    results = compare_plans(
        estimator, X, y, plans=plans, seed=args.seed, threads=args.threads or None
    )
    print(format_comparison(estimator, X, results))
    print(describe_kernels(kernels, results))
    return 0


def describe_kernels(status, results=()):
    """The CPU kernels the fits ran, in a line or two for the comparison's reader.

    Parameters
    ----------
    status : ilargi.backend.KernelStatus
        From :func:`ilargi.backend.kernel_status`, taken right before the fits.
    results : list of Result, optional
        The fits, for the time their untimed warm-up took (where the kernels were loaded).

    Returns
    -------
    str
        Which kernels ran, what loading them cost apart from the fit times, or that the compiled
        ones are being built in the background.

    Examples
    --------
    >>> from ilargi.backend import KernelStatus
    >>> from ilargi.cli import describe_kernels
    >>> print(describe_kernels(KernelStatus("numpy", "numpy", False, False, None, "")))
    kernels: NumPy/SciPy (ILARGI_KERNELS=numpy)
    """
    warm = ", ".join(f"{r.plan} {r.warm_up_seconds:.2f} s" for r in results)
    loaded = f"; loading them took {warm} in the untimed warm-up fits" if warm else ""
    if status.running == "compiled":
        return f"kernels: compiled (Numba){loaded}, not in the fit times"
    if status.mode == "numpy":
        return "kernels: NumPy/SciPy (ILARGI_KERNELS=numpy)"
    if status.failed:
        return (
            "kernels: NumPy/SciPy; the compiled kernels failed to build here:\n"
            + status.failed.strip().splitlines()[-1]
        )
    return (
        "kernels: NumPy/SciPy, while the compiled kernels are built in the background "
        "(once per\n  environment, about a minute on 2 cores; the next runs use them, or run "
        "'python -m ilargi compile' now)"
    )


def _compile(argv):
    """``ilargi compile``: build the compiled kernels in the foreground."""
    parser = Parser(
        prog="ilargi compile",
        description="Build ilargi's compiled CPU kernels now "
        "(once per environment; otherwise the first calls run the NumPy kernels while "
        "a background process builds them).",
    )
    parser.parse_args(argv)
    compile_kernels(quiet=False)
    return 0
