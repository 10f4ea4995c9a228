"""The factorized crossprod's sparse multiply-adds, counted apart: give sweeps written before the
count its column, and fit the price the analytic rule puts on it.

    python benchmarks/chooser_selection/cross_bytes.py migrate SWEEP.csv.xz ...   # rewrites them
    python benchmarks/chooser_selection/cross_bytes.py fit REAL.csv ... [--sweeps SWEEP ...]

Until ``sparse_work_fact`` was a feature, a sweep row's ``bytes_fact`` held those multiply-adds at
SciPy SpGEMM's price (``features.SPGEMM_BYTES`` byte-equivalents each) on top of what every other
term of a crossprod moves, and those terms are functions of the row's own features (its stored
entries and their sparse share, the table's shape and entries): ``migrate`` takes them away again,
exactly, and writes the count into the new column (``check`` first verifies that on fresh
features of synthetic stars). ``fit`` scores the analytic rule's log speed-up against the measured
one on the crossprods (and Cholesky fits) with sparse work of the selection set's real rows, for a
grid of prices, the sweeps' rows reported beside them; the price is chosen on the real rows.
"""

import argparse
import lzma
from pathlib import Path

import numpy as np
import pandas as pd

from ilargi.chooser import features, rules

GRID = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0)


def other_bytes(frame):
    """The bytes a row's crossprod (and a Cholesky fit's column sums and Tᵀ·y) moves besides the
    sparse multiply-adds, from the row's features (``features._Costs``)."""
    isz = frame["itemsize"]
    src = frame["stored"] * isz + 4 * frame["sparse_frac"] * frame["stored"]
    n, d = frame["n"], frame["d"]
    mat_sparse = frame["mat_sparse"].astype(bool)
    out_sparse = np.minimum(d * d, frame["nnz_t"] ** 2 / n) * features.SPARSE_RESULT_BYTES
    out = np.where(mat_sparse, out_sparse, d * d * isz)
    dims = frame["n_parts"] - frame["n_fact_parts"]
    tmm = src + dims * n * (8 + isz) + frame["n_parts"] * n * isz
    cholesky = (frame["workload"] == "linreg_cholesky").to_numpy()
    return src + out + np.where(cholesky, src + tmm, 0.0)


def migrate_frame(frame):
    """The rows with ``sparse_work_fact`` and ``bytes_fact`` without it (a copy)."""
    frame = frame.copy()
    crossing = frame["workload"].isin(rules.WITH_CROSSPROD).to_numpy()
    work = np.where(crossing, (frame["bytes_fact"] - other_bytes(frame)) / features.SPGEMM_BYTES, 0)
    work = np.where(np.abs(work) * features.SPGEMM_BYTES <= 1e-9 * frame["bytes_fact"], 0.0, work)
    if (work < 0).any():
        raise SystemExit(f"negative sparse work recovered in {int((work < 0).sum())} rows")
    frame["bytes_fact"] = frame["bytes_fact"] - features.SPGEMM_BYTES * work
    position = list(frame.columns).index("gather_fact") + 1
    frame.insert(position, "sparse_work_fact", work)
    predicted = pd.DataFrame([rules.analytic_features(r) for r in frame.to_dict("records")])
    for column in predicted.columns:
        frame[column] = predicted[column].to_numpy()
    return frame


def _read(path):
    return pd.read_csv(path)


def _write(frame, path):
    text = frame.to_csv(index=False)
    if path.suffix == ".xz":
        path.write_bytes(lzma.compress(text.encode(), preset=9 | lzma.PRESET_EXTREME))
    else:
        path.write_text(text)


def check():
    """Fresh features of synthetic stars (dense, sparse, mixed; crossprod and Cholesky fits),
    written as the old format would have, come back exactly."""
    from ilargi.chooser.features import combine, data_features, device_features
    from ilargi.chooser.workload import Workload
    from ilargi.datasets import make_star

    rows = []
    for density, n_dims in ((None, 2), (0.05, 3), (0.3, 1)):
        kwargs = {} if density is None else {"density": density}
        nm, _ = make_star(
            3_000,
            tuple_ratio=5,
            feature_ratio=2,
            n_dims=n_dims,
            d_fact=6,
            target=None,
            random_state=0,
            **kwargs,
        )
        data, stats = data_features(nm)
        for kind in ("crossprod", "linreg_cholesky", "lmm"):
            row = combine(data, stats, Workload(kind), "cpu", device_features("cpu"))
            rows.append(row)
    fresh = pd.DataFrame(rows)
    old = fresh.drop(columns="sparse_work_fact").copy()
    old["bytes_fact"] = fresh["bytes_fact"] + features.SPGEMM_BYTES * fresh["sparse_work_fact"]
    back = migrate_frame(old)
    assert fresh["sparse_work_fact"].gt(0).any()
    for column in ("sparse_work_fact", "bytes_fact", "analytic_log_speedup"):
        np.testing.assert_allclose(back[column], fresh[column], rtol=1e-9, atol=1e-6)
    print(f"check: {len(fresh)} rows recovered exactly")


def fit(real, sweeps):
    def crossing(frame):
        rows = frame[frame["workload"].isin(rules.WITH_CROSSPROD) & (frame["sparse_work_fact"] > 0)]
        return rows.to_dict("records"), np.log(rows["t_mat"] / rows["t_fact"]).to_numpy()

    sets = {"real": crossing(pd.concat([_read(p) for p in real]))}
    if sweeps:
        sets["sweeps"] = crossing(pd.concat([_read(p) for p in sweeps]))
    print(
        "| bytes per multiply-add | "
        + " | ".join(
            f"{name} ({len(y)} rows): rmse, bias, right side" for name, (_, y) in sets.items()
        )
        + " |"
    )
    print("|---|" + "---|" * len(sets))
    saved = rules.CROSS_SPARSE_BYTES
    try:
        for price in GRID:
            rules.CROSS_SPARSE_BYTES = price
            cells = []
            for records, y in sets.values():
                predicted = np.array(
                    [rules.analytic_features(r)["analytic_log_speedup"] for r in records]
                )
                error = predicted - y
                right = np.mean(np.sign(predicted) == np.sign(y))
                cells.append(f"{np.sqrt(np.mean(error**2)):.3f}, {error.mean():+.3f}, {right:.3f}")
            print(f"| {price:g} | " + " | ".join(cells) + " |")
    finally:
        rules.CROSS_SPARSE_BYTES = saved


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    m = commands.add_parser("migrate", help="give old sweeps the sparse_work_fact column")
    m.add_argument("csv", nargs="+", type=Path)
    commands.add_parser("check", help="verify the migration on fresh features")
    f = commands.add_parser("fit", help="score the rule's price of the sparse work")
    f.add_argument("real", nargs="+", type=Path)
    f.add_argument("--sweeps", nargs="*", type=Path, default=[])
    args = parser.parse_args(argv)
    if args.command == "check":
        check()
    elif args.command == "fit":
        fit(args.real, args.sweeps)
    else:
        for path in args.csv:
            frame = _read(path)
            if "sparse_work_fact" in frame.columns:
                print(f"{path}: already has sparse_work_fact")
                continue
            _write(migrate_frame(frame), path)
            print(f"{path}: {len(frame)} rows migrated")


if __name__ == "__main__":
    main()
