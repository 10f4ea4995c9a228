"""Dask plumbing: the scheduler in use, values placed once on every worker, tree reductions, and
the thread count of the kernels inside a task.

Everything runs on Dask's own schedulers: the current ``distributed.Client`` when there is one
(``dask.compute`` picks it up), Dask's default (threaded) scheduler otherwise.
"""

import threading
import uuid
import warnings
from contextlib import contextmanager
from weakref import WeakKeyDictionary

import dask
from dask import delayed

from ilargi.backend import threads

# Partials are combined this many at a time: a tree of depth log_8(partitions).
SPLIT_EVERY = 8


def current_client():
    """The ``distributed.Client`` that ``dask.compute`` would use now, or None."""
    try:
        from distributed import default_client
    except ImportError:  # distributed is optional: Dask's default scheduler then
        return None
    try:
        return default_client()
    except ValueError:
        return None


class Shared:
    """A value placed once on every worker of each client that uses it and referenced by every
    task; without a client, the value itself.

    Dimension sources are shared this way: each task of each iteration names the same future,
    so nothing is sent again. The value travels as the only argument of a task (not
    ``client.scatter``): scattered data has no lineage, and a worker killed while it held the
    only copy would cancel every computation that needs it; a task is computed again. It is
    then copied to every worker once (``client.replicate``); a worker that joins later (one
    restarted after a failure) fetches it from a peer when a task needs it.
    """

    def __init__(self, value):
        self.value = value
        self._futures = WeakKeyDictionary()
        self._lock = threading.Lock()

    def ref(self):
        """What a task takes as its argument: a future of the current client, or the value."""
        client = current_client()
        if client is None:
            return self.value
        with self._lock:
            future = self._futures.get(client)
            if future is None or future.status in ("error", "cancelled", "lost"):
                with warnings.catch_warnings():  # "Sending large graph": the value, on purpose
                    warnings.simplefilter("ignore", UserWarning)
                    future = client.submit(
                        _value,
                        _Box(self.value),
                        pure=False,
                        key=f"ilargi-shared-{uuid.uuid4().hex}",
                    )
                client.replicate([future])
                self._futures[client] = future
        return future

    def __getstate__(self):
        raise TypeError("a Shared value is referenced by tasks through ref(), never pickled")


class _Box:
    """The shared value as one task argument (Dask would traverse a dict or list of them)."""

    def __init__(self, value):
        self.value = value


def _value(box):
    return box.value


def persist(items):
    """Delayed objects computed and kept in memory: on the workers (their futures keep the
    tasks' lineage, so a lost worker's results are recomputed), or in this process."""
    items = list(items)
    if not items:
        return items
    client = current_client()
    if client is not None:
        return client.persist(items)
    return list(dask.persist(*items))


def compute(*items):
    """``dask.compute`` on the current scheduler."""
    return dask.compute(*items)


def tree(partials, combine, split_every=SPLIT_EVERY):
    """One delayed value combining ``partials`` by ``combine(*group)`` in groups of
    ``split_every``, level by level (the order is fixed, so the result does not depend on which
    worker ran what)."""
    level = list(partials)
    while len(level) > 1:
        level = [
            delayed(combine, pure=True)(*level[i : i + split_every])
            for i in range(0, len(level), split_every)
        ]
    return level[0]


_local = threading.local()


def task_threads():
    """The kernel threads of one task: 1 (each worker thread runs one task; a worker with
    ``threads_per_worker=k`` runs k tasks at once)."""
    return getattr(_local, "threads", None) or 1


@contextmanager
def kernel_threads(k=None):
    """Run a task's kernels (Numba and BLAS) with ``k`` threads (default :func:`task_threads`).

    On a distributed worker in a process of its own the count is set once for the process (its
    tasks all use the same number); on Dask's threaded scheduler it is set around the task (the
    client's own setting comes back afterwards). A worker that shares the client's process
    (``LocalCluster(processes=False)``) leaves the process's setting alone: its tasks run in
    several threads at once, and the setting is the client's."""
    k = k or task_threads()
    worker = _worker()
    if worker is not None and _client_in_process():
        yield
        return
    if worker is not None:
        if getattr(worker, "_ilargi_threads", None) != k:
            threads.set_num_threads(k)
            worker._ilargi_threads = k
        threads.apply()
        yield
        return
    with threads.threads(k):
        yield


def _worker():
    try:
        from distributed import get_worker
    except ImportError:
        return None
    try:
        return get_worker()
    except ValueError:
        return None


def _client_in_process():
    """Whether a distributed Client lives in this process (a worker of an in-process cluster)."""
    from distributed import default_client

    try:
        default_client()
    except ValueError:
        return False
    return True
