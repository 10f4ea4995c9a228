"""``python -m ilargi.calibration sweep|train|calibrate``: collect timings, train the cost model, or both.

    python -m ilargi.calibration sweep --out estimators/chooser_cpu_sweep.csv --budget-seconds 1200 --blas-threads 1
    python -m ilargi.calibration train estimators/chooser_cpu_sweep.csv --out estimators
    python -m ilargi.calibration calibrate --budget-seconds 240
    python -m ilargi.calibration sweep --device gpu --out gpu.csv --budget-seconds 120   # no LightGBM needed
"""
import argparse
import sys

from ilargi.chooser.cost_model import train as run_train

from .calibrate import calibrate as run_calibrate
from .sweep import sweep as run_sweep


def main(argv=None):
    """Run one of the commands.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: the command line).

    Returns
    -------
    int
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(prog="python -m ilargi.calibration", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    sweep = commands.add_parser("sweep", help="time both plans on synthetic scenarios, write a CSV")
    sweep.add_argument("--out", required=True, help="CSV to write")
    sweep.add_argument("--budget-seconds", type=float, default=1200.0)
    sweep.add_argument("--device", choices=["cpu", "gpu"], default="cpu")
    sweep.add_argument("--seed", type=int, default=0)
    sweep.add_argument("--max-scenarios", type=int, default=None)
    sweep.add_argument("--blas-threads", type=int, default=None,
                       help="limit BLAS threads while timing (1 gives steadier timings on a busy machine)")

    train = commands.add_parser("train", help="train the cost model (LightGBM) on sweep CSVs")
    train.add_argument("csv", nargs="+", help="sweep CSVs (one device)")
    train.add_argument("--out", required=True, help="folder for the cost-model files")
    train.add_argument("--device", choices=["cpu", "gpu"], default="cpu")

    calibrate = commands.add_parser("calibrate", help="a small sweep on this machine, then train; "
                                    "the result takes precedence over the shipped cost model")
    calibrate.add_argument("--budget-seconds", type=float, default=240.0)
    calibrate.add_argument("--out", default=None, help="folder (default: ILARGI_CHOOSER_DIR or "
                           "~/.cache/ilargi/chooser)")
    calibrate.add_argument("--device", choices=["cpu", "gpu"], default="cpu")

    args = parser.parse_args(argv)
    if args.command == "sweep":
        rows, scenarios, seconds = run_sweep(args.out, args.budget_seconds, args.device, args.seed,
                                             args.max_scenarios, args.blas_threads)
        print(f"wrote {rows} rows from {scenarios} scenarios to {args.out} in {seconds:.0f} s")
    elif args.command == "train":
        meta = run_train(args.csv, args.out, args.device)
        print(f"trained on {meta['rows']} rows; cross-validated: {meta['cv']}")
        print(f"cost-model files in {args.out}")
    else:
        folder = run_calibrate(args.budget_seconds, args.out, args.device)
        print(f"calibrated cost model written to {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
