"""A cluster whose workers share the client's process leaves the client's thread setting alone:
its worker threads run tasks at once, and a setting made around each task would race."""

import numpy as np
import pytest

import ilargi

distributed = pytest.importorskip("distributed")


def test_in_process_workers_keep_the_clients_threads():
    T = ilargi.NormalizedMatrix.from_parts(
        [np.arange(40.0).reshape(20, 2), np.array([[1.0, 2.0], [3.0, 4.0]])],
        [None, np.arange(20) % 2],
        [[0, 1], [2, 3]],
        (20, 4),
    )
    before = ilargi.get_num_threads()
    with distributed.Client(
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        )
    ):
        D = T.to_dask(chunks=3)
        for _ in range(3):
            np.testing.assert_allclose((D @ np.ones(4)).compute(), T @ np.ones(4))
            ilargi.Ridge(alpha=1.0).fit(D, np.arange(20.0))
    assert ilargi.get_num_threads() == before
    ilargi.set_num_threads(None)
    assert ilargi.get_num_threads() == before
