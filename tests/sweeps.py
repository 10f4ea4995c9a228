"""Sweep rows for training tests: the AMD EPYC sweeps of 2026-12-03, given a host probe they were
recorded without.

They are test data (``tests/data/chooser_cpu_sweep*.csv.xz``, xz-compressed CSVs as the sweeps of
``estimators/`` are), not the shipped model's training data, so they are not installed. The CSVs
predate the host probe (ilargi.chooser.host). A test that trains on them gives every row this
host's probe at the row's thread count (so that this host is inside the trained model's range),
and the analytic rule's predictions from the estimates at fixed rates the rows carry: a stand-in
base for the hybrid to correct, as a test's fabricated timings are stand-ins.
"""

from pathlib import Path

import numpy as np
import pandas as pd

from ilargi.chooser import host

DATA = Path(__file__).resolve().parent / "data"


def epyc_sweep(name="chooser_cpu_sweep"):
    """The rows of one EPYC sweep (``name``: its file name without ``.csv.xz``)."""
    return pd.read_csv(DATA / f"{name}.csv.xz")


def probed(rows):
    """``rows`` (a sweep frame) as if this host had timed them."""
    rows = rows.copy()
    for name in host.RATES:
        rows[name] = [host.probe(int(k))[name] for k in rows["threads"]]
    return rows.assign(
        analytic_log_speedup=np.log(rows["time_ratio"]),
        analytic_log_join=np.log(rows["join_time_ratio"]),
    )
