"""Metadata build vs pandas.merge on the TPC-H snowflake, time and peak memory, side by side in one run.

The chain (ilargi.datasets.tpch.SNOWFLAKE)::

    lineitem -> orders -> customer -> nation,  lineitem -> part,  lineitem -> supplier
    (inner joins, validate="many_to_one", keys l_orderkey, o_custkey, c_nationkey, l_partkey, l_suppkey)

Variants, each run in a fresh Python subprocess so its peak memory is its own:

* ``pandas``: the six tables read as the project reads them (``ilargi.datasets.load_tpch_frames``:
  decimals as float64, dates as datetime64, strings as pandas str), then the ``DataFrame.merge`` chain.
  Its merge time alone is the time to beat; read + merge is reported too. (Arrow-backed frames cannot
  be merged: pyarrow has no ``take`` for the files' string_view columns.)
* ``ilargi-parquet``: ``Table.from_parquet`` + the same ``Table.merge`` chain; only key columns are read.
* ``ilargi-duckdb``: ``Table.from_duckdb`` on a DuckDB database holding the six tables (made once from
  the Parquet files, not timed); keys are matched inside DuckDB, only int64 vectors come out.
* ``ilargi-frames``: the same frames the pandas variant reads, wrapped in ``Table``: the memory of the
  loaded frames counts on both sides here.

Time: wall clock of the variant's work inside its process (imports excluded), median over ``--repeats``
processes after one warm-up process (which also warms the OS file cache). Memory: peak resident set
size of the process (``resource.getrusage(RUSAGE_SELF).ru_maxrss``), the largest over the repeats;
"baseline" is the peak right after the imports, before any data is touched.

With ``--encode`` every variant also encodes the columns of the gradient-boosted trees' TPC-H
benchmark (``bench_gbdt_real.TPCH_FEATURES``, strings as ordinal codes): ilargi's
``Table.to_matrix``, pandas' category codes and ``to_numpy`` of the joined frame. Its time is
reported apart, and the peak then counts it.

Usage: ``python benchmarks/bench_build.py [--scale 1] [--repeats 5] [--encode]`` (TPC-H is
generated with tpchgen-cli into ~/.cache/ilargi/tpch/sf<scale> on first use).
"""

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from _timing import markdown_table

VARIANTS = ("pandas", "ilargi-parquet", "ilargi-duckdb", "ilargi-frames")
TABLES = ("lineitem", "orders", "customer", "nation", "part", "supplier")


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _read_frames(scale):
    """The six tables as the project loads them: decimals as float64, dates as datetime64, strings as str."""
    from ilargi.datasets.tpch import load_tpch_frames

    return load_tpch_frames(scale, tables=TABLES)


def _chain(tables):
    """The snowflake merge chain; works on DataFrames and ilargi Tables alike."""
    from ilargi.datasets.tpch import SNOWFLAKE

    joined = tables["lineitem"]
    for name, key, _, foreign_key in SNOWFLAKE:
        joined = joined.merge(
            tables[name], left_on=foreign_key, right_on=key, how="inner", validate="many_to_one"
        )
    return joined


def _duckdb_path(folder):
    return folder / "tpch.duckdb"


def _encode(joined):
    """The gradient-boosted trees benchmark's encoding of the joined table or frame."""
    from bench_gbdt_real import TPCH_TARGET, _ordinal, _tpch_features

    if hasattr(joined, "to_matrix"):
        return joined.to_matrix(_tpch_features(), TPCH_TARGET, categorical="ordinal")
    return _ordinal(joined[_tpch_features()].copy()).to_numpy(dtype="float64")


def worker(variant, scale, encode=False):
    """Run one variant in this process; print its measurements as JSON."""
    import duckdb  # noqa: F401  (imported up front so every variant's baseline holds the same libraries)
    import pandas as pd  # noqa: F401

    from ilargi import Table
    from ilargi.datasets.tpch import tpch_dir

    folder = tpch_dir(scale)
    baseline = _peak_mib()
    start = time.perf_counter()
    phases = {}
    if variant == "pandas":
        frames = _read_frames(scale)
        phases["read_s"] = time.perf_counter() - start
        joined = _chain(frames)
        phases["merge_s"] = time.perf_counter() - start - phases["read_s"]
    elif variant == "ilargi-parquet":
        joined = _chain({name: Table.from_parquet(folder / f"{name}.parquet") for name in TABLES})
    elif variant == "ilargi-duckdb":
        connection = duckdb.connect(str(_duckdb_path(folder)), read_only=True)
        joined = _chain({name: Table.from_duckdb(connection, name) for name in TABLES})
    else:
        frames = _read_frames(scale)
        phases["read_s"] = time.perf_counter() - start
        joined = _chain({name: Table(frame, name=name) for name, frame in frames.items()})
        phases["merge_s"] = time.perf_counter() - start - phases["read_s"]
    seconds = time.perf_counter() - start
    if encode:
        _encode(joined)
        phases["encode_s"] = time.perf_counter() - start - seconds
    print(
        json.dumps(
            {
                "variant": variant,
                "seconds": seconds,
                "rows": len(joined),
                "columns": len(joined.columns),
                "peak_mib": _peak_mib(),
                "baseline_mib": baseline,
                **phases,
            }
        )
    )


def _ensure_duckdb(folder):
    path = _duckdb_path(folder)
    if path.exists():
        return
    import duckdb

    scratch = path.with_suffix(".tmp")
    scratch.unlink(missing_ok=True)
    connection = duckdb.connect(str(scratch))
    for name in TABLES:
        connection.execute(
            f"CREATE TABLE {name} AS SELECT * FROM read_parquet('{folder / name}.parquet')"
        )
    connection.close()
    scratch.rename(path)


def _run(variant, scale, encode):
    result = subprocess.run(
        [sys.executable, __file__, "--worker", variant, "--scale", repr(scale)]
        + (["--encode"] if encode else []),
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--encode", action="store_true", help="also encode (to_matrix)")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.scale, args.encode)
        return
    from ilargi.datasets.tpch import tpch_dir

    folder = tpch_dir(args.scale)
    if "ilargi-duckdb" in args.variants:
        _ensure_duckdb(folder)
    results = {}
    for variant in args.variants:
        _run(variant, args.scale, args.encode)  # warm-up (and OS file cache)
        results[variant] = [_run(variant, args.scale, args.encode) for _ in range(args.repeats)]
        print(f"{variant}: done", file=sys.stderr)
    summary = {
        variant: {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "merge_s": statistics.median(r.get("merge_s", r["seconds"]) for r in runs),
            "encode_s": statistics.median(r.get("encode_s", 0.0) for r in runs),
            "peak_mib": max(r["peak_mib"] for r in runs),
            "baseline_mib": max(r["baseline_mib"] for r in runs),
            "rows": runs[0]["rows"],
            "columns": runs[0]["columns"],
        }
        for variant, runs in results.items()
    }
    reference = summary.get("pandas")
    rows = []
    for variant, s in summary.items():
        # pandas is timed by its merges alone; Ilargi by all its work (from frames: the build alone)
        build = s["merge_s"] if variant in ("pandas", "ilargi-frames") else s["seconds"]
        read = (
            f"{s['seconds'] - s['merge_s']:.2f}" if variant in ("pandas", "ilargi-frames") else "-"
        )
        time_ratio = "" if reference is None else f"{build / reference['merge_s']:.2f}"
        memory_ratio = "" if reference is None else f"{s['peak_mib'] / reference['peak_mib']:.2f}"
        rows.append(
            [
                variant,
                f"{s['rows']:,} x {s['columns']}",
                f"{build:.2f}",
                read,
                f"{s['seconds']:.2f}",
                time_ratio,
                *([f"{s['encode_s']:.2f}"] if args.encode else []),
                f"{s['peak_mib']:.0f}",
                f"{s['baseline_mib']:.0f}",
                memory_ratio,
            ]
        )
    print(f"TPC-H sf={args.scale:g}, median of {args.repeats} processes after 1 warm-up")
    print(
        markdown_table(
            [
                "variant",
                "result",
                "merge/build s",
                "read s",
                "total s",
                "merge/build / pandas merge",
                *(["encode s"] if args.encode else []),
                "peak RSS MiB",
                "baseline MiB",
                "peak / pandas peak",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
