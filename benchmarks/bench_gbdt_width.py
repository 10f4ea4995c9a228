"""Where ilargi's tree learner passes LightGBM on dense stars, by the number of features.

    python benchmarks/bench_gbdt_width.py

2M fact rows, 100 trees, 2 threads; stars of make_star_tables (two dimensions of 100,000 rows,
tuple ratio 20) of 6, 12, 20 and 36 features: ilargi factorized (Table.merge + to_matrix + fit)
against pandas.merge + LightGBM (merge + Dataset + train, its defaults), the two alternating in
one process, the median of two runs each. Dimensions of at most 8 features are read per target
row by ilargi's learner, wider ones by key (the 36-feature star). What plan="auto" reads from it:
``ilargi.models.gbdt.FACTORIZED_FEATURES``.
"""

import time

import lightgbm
import numpy as np

import ilargi
from ilargi.datasets import make_star_tables

n, trees = 2_000_000, 100
for d_fact, ratio, dims in ((2, 1, 2), (4, 1, 2), (4, 2, 2), (4, 4, 2)):
    frames = make_star_tables(n, 20, ratio, n_dims=dims, d_fact=d_fact, noise=0.5, random_state=0)
    names = sorted(k for k in frames if k.startswith("dim"))
    res = {"ilargi": [], "lightgbm": []}
    for rep in range(2):
        with ilargi.threads(2):
            t0 = time.perf_counter()
            table = ilargi.Table(frames["fact"], name="fact")
            for name in names:
                table = table.merge(
                    ilargi.Table(frames[name], name=name),
                    on=f"fk{name[3:]}",
                    validate="many_to_one",
                )
            feats = [c for c in table.columns if c != "y" and not c.startswith("fk")]
            X, y = table.to_matrix(feats, "y")
            ilargi.GradientBoostingRegressor(n_estimators=trees, plan="factorized").fit(X, y)
            res["ilargi"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        joined = frames["fact"]
        for name in names:
            joined = joined.merge(frames[name], on=f"fk{name[3:]}", validate="many_to_one")
        D = joined[feats].to_numpy(np.float64)
        lightgbm.train(
            dict(objective="regression", num_threads=2, verbose=-1),
            lightgbm.Dataset(D, joined["y"].to_numpy()),
            trees,
        )
        res["lightgbm"].append(time.perf_counter() - t0)
    a, b = np.median(res["ilargi"]), np.median(res["lightgbm"])
    print(
        f"features {len(feats)}: ilargi {a:.2f}s lightgbm {b:.2f}s speed-up {b / a:.2f}x  {res}",
        flush=True,
    )
