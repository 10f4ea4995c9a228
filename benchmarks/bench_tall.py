"""A dimension far taller than the rows joined to it: the matrix keeps only the used rows of such
a source (``ilargi.metadata.parts.compacted``), once when it is built. Side by side in one
process: the operators on the matrix as built, on the same matrix with its sources kept whole (the
cut switched off while building it, as the code did before), and on the materialized table
(as ``materialize()`` builds it: dense here, so NumPy's BLAS).

    python benchmarks/bench_tall.py                  # TPC-DS sf 1, at every core
    python benchmarks/bench_tall.py --threads 1

Data: TPC-DS sf 1 customer (100,000 rows) ⋈ customer_demographics (1,920,800 rows, of which the
customers use 94,215) ⋈ customer_address (50,000) ⋈ household_demographics (7,200), numeric and
one-hot columns (``Table.to_matrix``). Each figure is the median of 21 calls after a warm-up.
"""

import argparse
import statistics
import time
from unittest import mock

import numpy as np
from _timing import block_times, markdown_table

import ilargi
from ilargi.metadata import parts as parts_module

COLUMNS = (
    "c_birth_month",
    "c_preferred_cust_flag",
    "cd_gender",
    "cd_marital_status",
    "cd_purchase_estimate",
    "cd_credit_rating",
    "cd_dep_count",
    "ca_gmt_offset",
    "ca_location_type",
    "hd_buy_potential",
    "hd_dep_count",
)


def build():
    from ilargi.datasets import load_tpcds

    t = load_tpcds(
        1.0,
        ("customer", "customer_demographics", "customer_address", "household_demographics"),
    )
    table = t["customer"]
    for left, name, right in (
        ("c_current_cdemo_sk", "customer_demographics", "cd_demo_sk"),
        ("c_current_addr_sk", "customer_address", "ca_address_sk"),
        ("c_current_hdemo_sk", "household_demographics", "hd_demo_sk"),
    ):
        table = table.merge(
            t[name], left_on=left, right_on=right, how="left", validate="many_to_one"
        )
    return table.to_matrix(columns=list(COLUMNS), target="c_birth_year")[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=ilargi.get_num_threads())
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    ilargi.set_num_threads(args.threads)
    started = time.perf_counter()
    cut = build()
    built = time.perf_counter() - started
    with mock.patch.object(parts_module, "compacted", lambda parts: parts):
        whole = build()
    table = cut.materialize()
    n, d = cut.shape
    rng = np.random.default_rng(0)
    x, y, v = rng.standard_normal(d), rng.standard_normal(n), rng.random(n)
    operators = {
        "T @ x": lambda T: T @ x,
        "T.T @ y": lambda T: T.T @ y,
        "colsums": lambda T: T.sum(axis=0),
        "gramvec": lambda T: T.gramvec(x, v) if hasattr(T, "gramvec") else T.T @ (v * (T @ x)),
        "crossprod": lambda T: T.crossprod() if hasattr(T, "crossprod") else T.T @ T,
    }
    rows = []
    for name, op in operators.items():
        ms = {}
        for label, T in (("cut", cut), ("whole", whole), ("materialized", table)):
            times = block_times(lambda: op(T), args.repeats, warmup=2)
            ms[label] = statistics.median(times) * 1e3
        rows.append(
            [
                name,
                f"{ms['cut']:.3f}",
                f"{ms['whole']:.3f}",
                f"{ms['materialized']:.3f}",
                f"**{ms['whole'] / ms['cut']:.1f}x**",
                f"{ms['materialized'] / ms['cut']:.2f}x",
            ]
        )
    heights = [
        (p.name, p.source.shape[0], w.source.shape[0])
        for p, w in zip(cut.parts, whole.parts)
        if p.source.shape[0] != w.source.shape[0]
    ]
    print(
        f"{n:,} x {d} at {args.threads} thread(s); matrix built (join, encoding, cut) in {built:.2f} s"
    )
    print("sources cut:", ", ".join(f"{name} {w:,} -> {c:,} rows" for name, c, w in heights))
    print()
    header = [
        "operator",
        "cut (ms)",
        "whole (ms)",
        "materialized (ms)",
        "cut vs whole",
        "cut vs materialized",
    ]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
