"""Sweep rows for training tests: the shipped sweeps, given a host probe they were recorded without.

The shipped CSVs predate the host probe (ilargi.chooser.host). A test that trains on them gives
every row this host's probe at the row's thread count (so that this host is inside the trained
model's range), and the analytic rule's predictions from the estimates at fixed rates the rows
carry: a stand-in base for the hybrid to correct, as a test's fabricated timings are stand-ins.
"""
import numpy as np

from ilargi.chooser import host


def probed(rows):
    """``rows`` (a sweep frame) as if this host had timed them."""
    rows = rows.copy()
    for name in host.RATES:
        rows[name] = [host.probe(int(k))[name] for k in rows["threads"]]
    return rows.assign(analytic_log_speedup=np.log(rows["time_ratio"]),
                       analytic_log_join=np.log(rows["join_time_ratio"]))
