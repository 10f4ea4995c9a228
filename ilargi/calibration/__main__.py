"""``python -m ilargi.calibration sweep|refeaturize|train|calibrate|probe``: collect timings, train the cost model, or both.

    python -m ilargi.calibration sweep --out sweep.csv.xz --budget-seconds 2400   # .xz: compressed
    python -m ilargi.calibration train sweep.csv.xz --out /tmp/candidate
    python -m ilargi.calibration calibrate --budget-seconds 240
    python -m ilargi.calibration sweep --device gpu --out gpu.csv --budget-seconds 120   # no LightGBM needed
    python -m ilargi.calibration refeaturize sweep.csv.xz --seed 0 --budget-seconds 2400
    python -m ilargi.calibration refeaturize sweep.csv.xz --seed 0 --budget-seconds 2400 --retime gnmf
    python -m ilargi.calibration probe --repeat 5      # this host's rates, five times: the spread

A sweep CSV may be xz-compressed (``*.csv.xz``, as the sweeps in ``estimators/`` are): every command
reads it, and a sweep or refeaturize writes one where its output's name ends with ``.xz``.
"""

import argparse
import math
import statistics
import sys
from pathlib import Path

from ilargi.backend import threads as thread_control
from ilargi.chooser import cost_model, host
from ilargi.chooser.cost_model import train as run_train

from .calibrate import calibrate as run_calibrate
from .sweep import STYLES
from .sweep import refeaturize as run_refeaturize
from .sweep import sweep as run_sweep

# ------------------------------------------------------------------ argument types
# argparse turns the ValueError/ArgumentTypeError of a type into "argument --x: invalid value"
# and exit status 2, with no traceback. ilargi's own command uses them too.


def positive_int(text):
    """An integer >= 1 (``--rows``, ``--max-iter``, ``--threads``, ...)."""
    value = _number(text, int, "an integer")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def thread_counts(text):
    """``--threads 1,2``: a tuple of thread counts, each an integer >= 1."""
    return tuple(positive_int(part.strip()) for part in text.split(","))


def non_negative_int(text):
    """An integer >= 0 (``--seed``; ``--threads 0``: every core)."""
    value = _number(text, int, "an integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def positive_float(text):
    """A finite number > 0 (``--budget-seconds``, ``--tuple-ratio``, ``--tpch``, ...)."""
    value = _number(text, float, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def existing_folder(text):
    """A folder that exists (a dataset folder)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"no such folder: {text!r}")
    return text


def existing_file(text):
    """A file that exists (a sweep CSV)."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def styles(text):
    """``--styles onehot,keys``: a tuple of source styles."""
    return tuple(part.strip() for part in text.split(","))


def _number(text, kind, what):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


class Parser(argparse.ArgumentParser):
    """argparse, with a bad argument reported in one line (no usage block): ``prog: error: ...``."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# Errors a command can expect from its inputs (a malformed CSV or dataset, a folder it cannot
# write): reported in one line with exit status 2. Anything else is a bug and keeps its traceback.
EXPECTED_ERRORS = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
)


def fail(prog, error):
    """Report an expected error in one line on stderr, argparse's way; returns exit status 2."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return 2


def main(argv=None):
    """Run one of the commands.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: the command line).

    Returns
    -------
    int
        The exit status: 0, or 2 for a bad argument or input (one line on stderr, no traceback).
    """
    prog = "python -m ilargi.calibration"
    parser = Parser(prog=prog, description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    sweep = commands.add_parser("sweep", help="time both plans on synthetic scenarios, write a CSV")
    sweep.add_argument(
        "--out", required=True, help="CSV to write (xz-compressed where it ends with .xz)"
    )
    sweep.add_argument("--budget-seconds", type=positive_float, default=1200.0)
    sweep.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    sweep.add_argument("--seed", type=non_negative_int, default=0)
    sweep.add_argument("--max-scenarios", type=positive_int, default=None)
    sweep.add_argument(
        "--threads",
        type=thread_counts,
        default=None,
        help="comma-separated thread counts every workload is timed at (default: 1 and every core)",
    )
    sweep.add_argument(
        "--styles",
        type=styles,
        default=None,
        help="comma-separated source styles to draw scenarios from "
        f"(default: all of {', '.join(STYLES)})",
    )
    sweep.add_argument(
        "--fits-only", action="store_true", help="time the estimator fits only, not the operators"
    )

    refeaturize = commands.add_parser(
        "refeaturize",
        help="recompute a sweep CSV's features in place, keeping its times (after a "
        "feature's definition changed); give the seed, budget and styles the sweep ran with",
    )
    refeaturize.add_argument("csv", type=existing_file, help="sweep CSV (rewritten)")
    refeaturize.add_argument("--seed", type=non_negative_int, required=True)
    refeaturize.add_argument("--budget-seconds", type=positive_float, required=True)
    refeaturize.add_argument("--styles", type=styles, default=None)
    refeaturize.add_argument(
        "--out", default=None, help="CSV to write (default: rewrite the sweep CSV in place)"
    )
    refeaturize.add_argument(
        "--probe-host",
        action="store_true",
        help="give rows recorded before the host probe this host's probe at "
        "their thread count (only on the host that ran the sweep)",
    )
    refeaturize.add_argument(
        "--retime",
        type=lambda text: tuple(text.split(",")),
        default=(),
        help="comma-separated fit kinds (e.g. gnmf) to time again on this "
        "machine, after a change of their code; 'join': every row's join",
    )

    train = commands.add_parser("train", help="train the cost model (LightGBM) on sweep CSVs")
    train.add_argument("csv", nargs="+", type=existing_file, help="sweep CSVs (one device)")
    train.add_argument("--out", required=True, help="folder for the cost-model files")
    train.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    train.add_argument(
        "--fits-only",
        nargs="+",
        type=existing_file,
        default=(),
        metavar="CSV",
        help="more sweep CSVs whose estimator fits only are trained on",
    )
    train.add_argument(
        "--selection",
        nargs="+",
        type=existing_file,
        default=(),
        metavar="CSV",
        help="sweep CSVs of the selection set's real workloads (chooser_testset.py select "
        "--sweep-out), trained on with --selection-weight",
    )
    train.add_argument(
        "--selection-weight",
        type=positive_float,
        default=1.0,
        help="the weight of each selection row; a synthetic row weighs 1 (default %(default)s)",
    )
    train.add_argument(
        "--margin",
        type=float,
        default=cost_model.MARGIN,
        help="factorize iff the predicted log speed-up exceeds this (default %(default)s)",
    )
    train.add_argument(
        "--correction",
        type=float,
        default=cost_model.CORRECTION,
        help="share of the learned correction added to the analytic rule (default %(default)s)",
    )

    probe = commands.add_parser(
        "probe",
        help="measure this host's properties (bandwidth, GEMM, "
        "gather, call overhead) at each thread count, or show the cached "
        "ones",
    )
    probe.add_argument(
        "--threads",
        type=thread_counts,
        default=None,
        help="comma-separated thread counts (default: 1 and every core)",
    )
    probe.add_argument("--refresh", action="store_true", help="measure again, replacing the cache")
    probe.add_argument(
        "--repeat",
        type=positive_int,
        default=1,
        help="measure this many times (no cache) and print the run-to-run spread",
    )

    calibrate = commands.add_parser(
        "calibrate",
        help="a small sweep on this machine, then train; "
        "the result takes precedence over the shipped cost model",
    )
    calibrate.add_argument("--budget-seconds", type=positive_float, default=240.0)
    calibrate.add_argument(
        "--out",
        default=None,
        help="folder (default: the chooser_dir setting, ILARGI_CHOOSER_DIR, or ~/.cache/ilargi/chooser)",
    )
    calibrate.add_argument("--device", choices=["cpu", "gpu"], default="cpu")

    args = parser.parse_args(argv)
    try:
        return _run(args)
    except EXPECTED_ERRORS as error:
        return fail(f"{prog} {args.command}", error)


def _run(args):
    if args.command == "sweep":
        rows, scenarios, seconds = run_sweep(
            args.out,
            args.budget_seconds,
            args.device,
            args.seed,
            args.max_scenarios,
            args.threads,
            styles=args.styles,
            fits_only=args.fits_only,
        )
        print(f"wrote {rows} rows from {scenarios} scenarios to {args.out} in {seconds:.0f} s")
    elif args.command == "refeaturize":
        out = args.out or args.csv
        rows, changed = run_refeaturize(
            args.csv,
            out,
            args.seed,
            args.budget_seconds,
            args.styles,
            retime=args.retime,
            probe_host=args.probe_host,
        )
        print(
            f"wrote {rows} rows of {args.csv} to {out}; features changed in "
            f"{max(changed.values(), default=0)} rows"
        )
    elif args.command == "train":
        meta = run_train(
            args.csv,
            args.out,
            args.device,
            fits_only=args.fits_only,
            margin=args.margin,
            correction=args.correction,
            selection=args.selection,
            selection_weight=args.selection_weight,
        )
        print(f"trained on {meta['rows']} rows; cross-validated: {meta['cv']}")
        print(f"cost-model files in {args.out}")
    elif args.command == "probe":
        _probe(args.threads, args.refresh, args.repeat)
    else:
        folder = run_calibrate(args.budget_seconds, args.out, args.device)
        print(f"calibrated cost model written to {folder}")
    return 0


def _probe(counts, refresh, repeat):
    """Print the host's probed properties per thread count (and their spread over repeats)."""
    counts = counts or tuple(sorted({1, thread_control.default_num_threads()}))
    print(f"host: {host.machine()}")
    for k in counts:
        if repeat == 1:
            measured = host.probe(k, refresh=refresh)
            print(
                f"threads={k}: "
                + ", ".join(f"{name}={measured[name]:.4g}" for name in host.PROPERTIES)
                + f"  (probed {measured['probed_at']} in {measured['seconds']:.2f} s; cache "
                f"{host.cache_path(k)})"
            )
            continue
        runs = [host.measure(k) for _ in range(repeat)]
        for name in host.RATES + ("seconds",):
            values = sorted(run[name] for run in runs)
            middle = statistics.median(values)
            print(
                f"threads={k} {name:14s} median {middle:9.4g}  range {values[0]:9.4g} - "
                f"{values[-1]:9.4g}  ({(values[-1] - values[0]) / middle:.1%} of the median)"
            )


if __name__ == "__main__":
    sys.exit(main())
