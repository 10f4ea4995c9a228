"""``ilargi.calibrate()``: fit the plan chooser to this machine in a few minutes.

A small sweep (:func:`ilargi.calibration.sweep.sweep`) times both plans on this machine, then the
cost model is trained on it alone (another machine's timings would mislead it) and written to the
user folder, where :func:`ilargi.chooser.choose` looks before the shipped cost model. Workloads
outside the small sweep's range fall back to the Morpheus rule, as always.
"""

from pathlib import Path

from ilargi.chooser.cost_model import train, user_folder

from .sweep import sweep

# Of the time budget, what training and a 3-fold cross-validation need after the sweep (seconds;
# a few hundred rows train in about one second here, and a workload may overrun the sweep's end).
TRAIN_RESERVE = 20.0


def calibrate(budget_seconds=240, out=None, device="cpu", seed=None, log=None):
    """Re-collect a small sweep on this machine and retrain the cost model on it.

    Writes ``chooser_<device>.txt``, ``chooser_<device>_join.txt``, ``chooser_<device>.json`` and
    the sweep CSV into ``out``, which takes precedence over the shipped cost model from then on.

    Parameters
    ----------
    budget_seconds : float, default=240
        About how long it may take, > 0 (a reserve of it goes to training).
    out : path-like, optional
        The folder (default: the ``chooser_dir`` setting of :func:`ilargi.get_config`, which
        ``$ILARGI_CHOOSER_DIR`` gives, or ``~/.cache/ilargi/chooser``).
    device : {"cpu", "gpu"}, default="cpu"
        The device to time.
    seed : int, optional
        Seed of the sweep's scenarios (default 0).
    log : callable, optional
        Called with a line of progress text per scenario and workload (None: quiet).

    Returns
    -------
    pathlib.Path
        The folder written.

    Raises
    ------
    ValueError
        If ``budget_seconds`` is not positive.
    RuntimeError
        If no workload finished within the budget.

    Examples
    --------
    >>> import ilargi
    >>> folder = ilargi.calibrate(budget_seconds=120)  # doctest: +SKIP
    """
    if not budget_seconds > 0:
        raise ValueError(f"budget_seconds must be positive, got {budget_seconds!r}")
    folder = Path(out) if out is not None else user_folder()
    csv = folder / f"chooser_{device}_sweep.csv"
    sweep_budget = max(budget_seconds - TRAIN_RESERVE, budget_seconds / 2)
    rows, _, _ = sweep(csv, sweep_budget, device, seed=0 if seed is None else seed, log=log)
    if rows == 0:
        raise RuntimeError(
            f"calibrate: no workload finished within {sweep_budget:.0f} s; "
            "give it a larger budget_seconds"
        )
    train([csv], folder, device, folds=3)
    return folder
