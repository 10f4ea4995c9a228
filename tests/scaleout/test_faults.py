"""A worker killed in the middle of a logistic-regression fit: Dask recomputes its lost partitions
from their lineage (pieces sent by ``to_dask``, or Parquet files read again) and the fit ends
with the same coefficients as a fit without failure."""

import logging
import os
import signal
import threading
import time

import numpy as np
import pytest

from ilargi import Table
from ilargi.datasets import make_star
from ilargi.models import LogisticRegression
from tests.scaleout.conftest import assert_close

FIT = dict(solver="gd", max_iter=12, tol=0.0)


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with (
        LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _kill_during(matrix, client, call=4, delay=0.02):
    """Make the matrix's ``call``-th loss + gradient pass kill one worker process (SIGKILL) a
    moment after it starts; returns the list the killed pid is appended to."""
    original, calls, killed = matrix.loss_gradient, [], []

    def kill():
        pids = client.run(os.getpid)
        victim = sorted(pids)[0]
        os.kill(pids[victim], signal.SIGKILL)
        killed.append(pids[victim])

    def loss_gradient(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            threading.Timer(delay, kill).start()
        return original(*args, **kwargs)

    matrix.loss_gradient = loss_gradient
    return killed


def _wait_for_workers(client, n=2, timeout=60):
    start = time.time()
    while len(client.scheduler_info()["workers"]) < n:
        if time.time() - start > timeout:
            raise TimeoutError("the killed worker did not come back")
        time.sleep(0.2)


def _fit_with_a_kill(client, make):
    expected = LogisticRegression(**FIT).fit(*make())
    X, y = make()
    pids = set(client.run(os.getpid).values())
    killed = _kill_during(X, client)
    model = LogisticRegression(**FIT).fit(X, y)
    assert killed and killed[0] in pids, "no worker was killed during the fit"
    _wait_for_workers(client)
    assert killed[0] not in set(client.run(os.getpid).values())
    assert model.n_iter_ == expected.n_iter_
    assert_close(model.coef_, expected.coef_, rtol=1e-12, what="coef after a lost worker")
    assert_close(model.intercept_, expected.intercept_, rtol=1e-12, what="intercept")


def test_lost_worker_in_memory_pieces(cluster):
    X, y = make_star(60000, tuple_ratio=20, d_fact=5, target="logistic", random_state=0)

    def make():
        return X.to_dask(chunks=7500), y

    _fit_with_a_kill(cluster, make)


def test_lost_worker_parquet(cluster, tmp_path):
    rng = np.random.default_rng(0)
    import pandas as pd

    n, k = 60000, 500
    fact = pd.DataFrame(
        {
            "key": rng.integers(0, k, n),
            "a": rng.normal(size=n),
            "b": rng.normal(size=n),
            "c": rng.choice(["u", "v", "w"], n),
        }
    )
    dim = pd.DataFrame(
        {"key": np.arange(k), "z": rng.normal(size=k), "g": rng.choice(["p", "q"], k)}
    )
    fact["y"] = (fact["a"] + dim["z"].to_numpy()[fact["key"]] > 0).astype(float)
    fact.to_parquet(tmp_path / "fact.parquet", row_group_size=5000)

    def make():
        table = Table.from_parquet(tmp_path / "fact.parquet", chunks="row_groups")
        return table.merge(dim, on="key").to_matrix(columns=["a", "b", "c", "z", "g"], target="y")

    _fit_with_a_kill(cluster, make)
