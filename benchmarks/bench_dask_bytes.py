"""Scale-out: bytes moved per iteration on a Dask cluster, measured, and what it means at TPC-H sf=1000.

A DaskNormalizedMatrix (``nm.to_dask(chunks)``, persisted: the partitions' pieces stay on the workers,
the dimension sources are placed on every worker once) is fitted by ``Ridge`` (one pass: the
d × d statistics) and by ``LogisticRegression(solver="gd", tol=0)`` (one loss + gradient pass per
iteration). Everything a fit moves is counted, per pass over the partitions:

* client → workers: the tasks' specifications (the coefficients each task takes, the references to
  its partition), measured as the pickled size of every task the client submits (a scheduler plugin;
  the scheduler forwards each to the worker that runs it);
* worker → worker: the partials of the tree reduction (``SPLIT_EVERY`` = 8 at a time), from the
  workers' transfer logs (``Worker.transfer_outgoing_log``, requests from a peer);
* workers → client: the reduced result, from the same logs (requests from anyone but a peer: the
  scheduler gathering for the client).

Setup traffic (sending the pieces, placing the dimension sources, aligning the target) is measured
apart and is paid once. Worker-log sizes are Dask's ``sizeof`` of the objects moved, not wire bytes
(compression is off for these small arrays).

Usage: ``python benchmarks/bench_dask_bytes.py [--rows 200000] [--workers 2 4] [--partitions 8 32 128]
[--iterations 5]``. Runs on LocalClusters of worker processes with one thread each; under 2 minutes
on 2 cores. It then prints the arithmetic for 100 workers on TPC-H sf=1000 (6e9 lineitem rows),
from the measured per-task and per-partial sizes.
"""

import argparse
import logging
import math
import pickle
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # this checkout's ilargi (and workers')
from _timing import markdown_table  # noqa: E402


class GraphBytes:
    """A scheduler plugin: the pickled size of the tasks each graph makes the workers run (those
    still to compute when it arrives; a persisted key it references again is not sent again),
    and how many graphs."""

    name = "ilargi-graph-bytes"

    def __init__(self):
        self.bytes = self.tasks = self.graphs = 0

    def update_graph(self, scheduler, *, tasks, **kwargs):
        import cloudpickle

        self.graphs += 1
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.run_spec is None or ts.state != "released":
                continue
            self.bytes += len(cloudpickle.dumps(ts.run_spec, protocol=pickle.HIGHEST_PROTOCOL))
            self.tasks += 1

    def take(self):
        out = (self.bytes, self.tasks, self.graphs)
        self.bytes = self.tasks = self.graphs = 0
        return out


class ClientBytes:
    """The serialized size of every graph this process's clients send to the scheduler."""

    total = 0

    @classmethod
    def install(cls):
        from distributed import Client
        from distributed.utils import nbytes

        send = Client._send_to_scheduler

        def counted(self, msg):
            if isinstance(msg, dict) and msg.get("op") == "update-graph":
                ser = msg["expr_ser"]
                cls.total += sum(map(nbytes, [ser.header] + list(ser.frames)))
            return send(self, msg)

        Client._send_to_scheduler = counted

    @classmethod
    def take(cls):
        out, cls.total = cls.total, 0
        return out


def _register(client):
    from distributed.diagnostics.plugin import SchedulerPlugin

    class Plugin(GraphBytes, SchedulerPlugin):
        pass

    client.register_plugin(Plugin(), name=GraphBytes.name)


def _take_graph(client):
    return client.run_on_scheduler(
        lambda dask_scheduler: dask_scheduler.plugins[GraphBytes.name].take()
    )


def _take_transfers(dask_worker):
    """This worker's outgoing transfers since the last call as (requester, bytes, {key: bytes}),
    and whether its log may have overflowed; clears the log."""
    log = list(dask_worker.transfer_outgoing_log)
    dask_worker.transfer_outgoing_log.clear()
    return [(entry["who"], entry["total"], entry["keys"]) for entry in log], len(
        log
    ) == dask_worker.transfer_outgoing_log.maxlen


def _traffic(client):
    """Bytes moved since the last call: client → workers, worker → worker, workers → client."""
    from dask.utils import key_split

    graph_bytes, tasks, graphs = _take_graph(client)
    workers = set(client.scheduler_info()["workers"])
    logs = client.run(_take_transfers)
    to_peers = to_client = 0
    moved = {}
    for address, (entries, overflow) in logs.items():
        if overflow:
            raise RuntimeError(
                f"the transfer log of {address} overflowed; raise "
                "distributed.admin.low-level-log-length"
            )
        for who, total, keys in entries:
            if who in workers:
                to_peers += total
            else:
                to_client += total
            for key, size in keys.items():
                kind = key_split(key)
                moved[kind] = moved.get(kind, 0) + size
    return dict(
        graph=ClientBytes.take(),
        specs=graph_bytes,
        tasks=tasks,
        graphs=graphs,
        peers=to_peers,
        client=to_client,
        moved=moved,
    )


def _fmt(n):
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


KINDS = ("graph", "specs", "peers", "client", "tasks", "graphs")


def _fit(make, X, y):  # noqa: D103
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    return model, time.perf_counter() - start


def _add(total, t):
    for k in KINDS:
        total[k] = total.get(k, 0) + t[k]


def _passes(D, client, record, rest):
    """Make D's loss + gradient passes record the traffic of each (they are synchronous), and
    add what moved between them to ``rest``."""
    original = D.loss_gradient

    def loss_gradient(*args, **kwargs):
        _add(rest, _traffic(client))
        out = original(*args, **kwargs)
        record.append(_traffic(client))
        return out

    D.loss_gradient = loss_gradient


def _median(records, kind):
    return float(np.median([r[kind] for r in records])) if records else 0.0


def measure(args):
    """One row per (workers, partitions, fit): Ridge's whole fit; the logistic fit's iterations
    (the median of its loss + gradient passes after the first, which also places the labels
    beside the partitions), its first pass and the rest of the fit."""
    import dask
    from distributed import Client, LocalCluster, futures_of, wait

    from ilargi.datasets import make_star
    from ilargi.models import LogisticRegression, Ridge

    X, y = make_star(
        args.rows,
        tuple_ratio=args.tuple_ratio,
        n_dims=args.dims,
        d_fact=args.d_fact,
        target="linear",
        random_state=0,
    )
    labels = (y > np.median(y)).astype(float)
    d = X.shape[1]
    rows = []
    ClientBytes.install()
    for n_workers in args.workers:
        with (
            dask.config.set({"distributed.admin.low-level-log-length": 100_000}),
            LocalCluster(
                n_workers=n_workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            ) as cluster,
            Client(cluster) as client,
        ):
            _register(client)
            for partitions in args.partitions:
                _traffic(client)
                D = X.to_dask(chunks=math.ceil(X.shape[0] / partitions))
                yd, ld = D.align(y), D.align(labels)
                wait(futures_of(D.persist()) + futures_of(yd) + futures_of(ld))
                setup = _traffic(client)
                common = dict(
                    workers=n_workers,
                    partitions=D.npartitions,
                    d=d,
                    setup=setup["graph"] + setup["specs"] + setup["peers"],
                )

                for name in ("Ridge (first fit)", "Ridge (second fit)"):
                    _, seconds = _fit(lambda: Ridge(alpha=1.0), D, yd)
                    ridge = _traffic(client)
                    if args.verbose:
                        print(n_workers, partitions, name, ridge)
                    rows.append(
                        dict(common, fit=name, seconds=seconds, per=ridge, first=None, rest=None)
                    )

                record, rest = [], {}
                _passes(D, client, record, rest)
                model, seconds = _fit(
                    lambda: LogisticRegression(solver="gd", max_iter=args.iterations, tol=0.0),
                    D,
                    ld,
                )
                _add(rest, _traffic(client))  # the fit's other passes (checks, class codes)
                per = {k: _median(record[1:], k) for k in KINDS}
                if args.verbose:
                    print(
                        n_workers,
                        partitions,
                        "first pass",
                        record[0],
                        "\nlater",
                        record[1:],
                        "\nrest",
                        rest,
                    )
                rows.append(
                    dict(
                        common,
                        fit=f"Logistic gd, per pass ({len(record)} passes)",
                        seconds=seconds,
                        per=per,
                        first=record[0],
                        rest=rest,
                    )
                )
                del D, yd, ld
    return rows, d


def _total(t):
    return t["graph"] + t["specs"] + t["peers"] + t["client"]


def print_table(rows):
    header = [
        "workers",
        "partitions",
        "d",
        "fit",
        "graphs",
        "tasks run",
        "client → scheduler",
        "scheduler → workers",
        "worker → worker",
        "workers → client",
        "per worker (in + out)",
        "first pass",
        "rest of the fit",
        "setup (once)",
        "fit time",
    ]
    body = []
    for r in rows:
        p = r["per"]
        worker_side = p["specs"] + p["peers"] * 2 + p["client"]  # a peer transfer: out and in
        body.append(
            [
                r["workers"],
                r["partitions"],
                r["d"],
                r["fit"],
                f"{p['graphs']:.3g}",
                f"{p['tasks']:.0f}",
                _fmt(p["graph"]),
                _fmt(p["specs"]),
                _fmt(p["peers"]),
                _fmt(p["client"]),
                _fmt(worker_side / r["workers"]),
                "—" if r["first"] is None else _fmt(_total(r["first"])),
                "—" if r["rest"] is None else _fmt(_total(r["rest"])),
                _fmt(r["setup"]),
                f"{r['seconds']:.2f} s",
            ]
        )
    print(markdown_table(header, body))


def extrapolate(rows, args):
    """The arithmetic for ``--at-workers`` workers on TPC-H sf=1000, from the measured sizes: a
    pass costs per partition one task specification (client → scheduler → worker; it carries
    the d coefficients) and one partial moved up a tree of 8 (at most 8/7 moves per partition,
    the last one to the client); the dimension sources go to every worker once."""
    logistic = [r for r in rows if r["fit"].startswith("Logistic")]
    ridge = [r for r in rows if r["fit"].startswith("Ridge")]
    big = max(logistic, key=lambda r: (r["partitions"], r["workers"]))
    P_m, d_m, per = big["partitions"], big["d"], big["per"]
    # what a partition's task costs beyond its d coefficients (8 bytes each, in both messages)
    graph_fixed = per["graph"] / P_m - 8 * d_m
    spec_fixed = per["specs"] / P_m - 8 * d_m
    # one partial of a loss + gradient pass is what the client receives: (loss, gradient, total)
    partial_fixed = per["client"] - 8 * d_m
    ridge_big = max(ridge, key=lambda r: (r["partitions"], r["workers"]))
    ridge_fixed = ridge_big["per"]["client"] - 8 * (d_m + 1) ** 2  # X'X with the intercept

    W, n, d = args.at_workers, args.at_rows, args.at_d
    P = math.ceil(n / args.at_partition_rows)
    to_scheduler = P * (graph_fixed + 8 * d)
    to_workers = P * (spec_fixed + 8 * d)
    partials = P * 8 / 7 * (partial_fixed + 8 * d)
    ridge_partials = P * 8 / 7 * (ridge_fixed + 8 * (d + 1) ** 2)
    per_worker = (to_workers + 2 * partials) / W
    dims = args.at_dim_rows * args.at_dim_bytes
    table = [
        [
            "partitions P (rows / rows per partition)",
            f"{n:.3g} / {args.at_partition_rows:,} = {P:,} ({P / W:.0f} per worker)",
        ],
        [
            "measured per partition and pass (d coefficients apart)",
            f"client → scheduler {graph_fixed:.0f} B, scheduler → worker {spec_fixed:.0f} B; "
            f"a partial {partial_fixed:.0f} B + 8·d (from {P_m} partitions, d = {d_m})",
        ],
        [
            f"logistic iteration: client → scheduler, P × ({graph_fixed:.0f} + 8·{d})",
            _fmt(to_scheduler),
        ],
        [
            f"logistic iteration: scheduler → workers, P × ({spec_fixed:.0f} + 8·{d})",
            f"{_fmt(to_workers)} ({_fmt(to_workers / W)} per worker)",
        ],
        [
            f"logistic iteration: partials, at most 8/7 · P × ({partial_fixed:.0f} + 8·{d})",
            f"{_fmt(partials)} ({_fmt(partials / W)} out of each worker)",
        ],
        ["logistic iteration, per worker (in + out)", _fmt(per_worker)],
        [
            f"Ridge (one pass): partials of (d+1)² = {(d + 1) ** 2:,} values, at most 8/7 · P",
            f"{_fmt(ridge_partials)} ({_fmt(ridge_partials / W)} out of each worker)",
        ],
        [
            "once: the broadcast dimensions (customer, part) to every worker, "
            f"{args.at_dim_rows:.3g} rows × {args.at_dim_bytes:.0f} B",
            f"{_fmt(dims)} per worker, {_fmt(dims * W)} in all",
        ],
        [
            "for scale: the joined feature matrix, n × d × 8 B (what a baseline that materializes "
            "the join holds in its workers' memory, or shuffles to build it)",
            _fmt(n * d * 8),
        ],
    ]
    print(
        f"\nAt {W} workers, TPC-H sf=1000 (lineitem {n:.3g} rows), d = {d} "
        f"(bench_dask_tpch.py's features), partitions of {args.at_partition_rows:,} rows:\n"
    )
    print(markdown_table(["quantity", "value"], table))


def main():
    # to_dask sends the pieces inside the graph on purpose (lineage): no warning about it
    warnings.filterwarnings("ignore", message="Sending large graph")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--tuple-ratio", type=float, default=20.0)
    parser.add_argument("--dims", type=int, default=2)
    parser.add_argument("--d-fact", type=int, default=10)
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--partitions", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--at-workers", type=int, default=100)
    parser.add_argument("--at-rows", type=float, default=6e9)
    parser.add_argument("--at-partition-rows", type=int, default=1 << 20)
    parser.add_argument(
        "--at-d", type=int, default=53, help="features of bench_dask_tpch.py's join"
    )
    parser.add_argument(
        "--at-dim-rows",
        type=float,
        default=350e6,
        help="rows of the broadcast dimensions (customer 150M + part 200M at sf=1000)",
    )
    parser.add_argument(
        "--at-dim-bytes",
        type=float,
        default=45.0,
        help="encoded bytes per broadcast dimension row, key index included "
        "(bench_dask_tpch.py measures 45 at sf=0.1)",
    )
    args = parser.parse_args()
    start = time.perf_counter()
    rows, d = measure(args)
    print(
        f"Star scenario: {args.rows:,} fact rows, {args.dims} dimensions "
        f"({args.rows / args.tuple_ratio:,.0f} rows each), d = {d}; LocalCluster processes, "
        "1 thread per worker.\n"
    )
    print_table(rows)
    extrapolate(rows, args)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
