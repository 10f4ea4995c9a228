"""Microbenchmarks: the compiled kernels (ilargi.backend.compiled) against today's NumPy/SciPy code.

    python benchmarks/bench_kernels.py [--repeats 7] [--quick] [--only csr,...]

Rows: segment-sum of a 2e6 x 20 table into 1e5 buckets; Sᵀ·Y of tall dense tables by 8 columns
(BLAS against the compiled rows); a CSR fact block's Fᵀ·Y and F·W by 8 columns, rows of varying
length (SciPy against the compiled pass); gather-add of the Walmart and Yelp stars
(their real index vectors when ../shared/datasets/hamlet is there, random ones of the same sizes
otherwise), one column and eight; a full logistic loss + gradient (the fused pass plus the small
products with the dimension tables) against ``_Objective.loss_and_gradient`` (``NormalizedMatrix.dot``,
``_BinaryLink``, ``nm.T @ r``); gramvec on the dense star TR=20 FR=4 (n_R = 1e5 dimension rows,
2e6 fact rows; ``--quick``: n_R = 2e4) against ``NormalizedMatrix.gramvec``.

Columns: today's NumPy/SciPy code (single-threaded but for BLAS, which runs at one thread as in
bench_models.py: at two it measured 3-8x slower here, its workers waiting for a busy core), the
compiled kernels at 1 thread and at every core (BLAS at one thread: see ilargi/backend/threads.py
on alternating BLAS and compiled kernels), and the ratios (NumPy time / compiled time). Each cell is the median of ``--repeats``
runs after one warm-up (the fastest run in parentheses), the three variants alternating within
each repeat (on a shared machine the neighbours' load then hits all of them alike); the ratios are
of medians. The 1-minute load average at the start and end is printed: on a machine whose other
users keep its cores busy, parallel runs wait for scheduler slices, so re-run such a table.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ilargi.backend import compiled, cpu, threads  # noqa: E402
from ilargi.metadata.indicator import Indicator  # noqa: E402
from ilargi.rewriter import NormalizedMatrix  # noqa: E402
from ilargi.rewriter.rules import by_indicator  # noqa: E402

HAMLET = Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "hamlet"
SIZES = {"Walmart": (421_570, (2_340, 45)), "Yelp": (215_879, (11_535, 43_873))}
POSITIVE_FROM = {"Walmart": 3, "Yelp": 4}  # bench_models.py's binary targets (y >= threshold)


def side_by_side(variants, repeats):
    """Median seconds of each variant (name -> (fn, threads, BLAS threads)), alternating order per
    repeat."""
    for fn, k, blas in variants.values():
        with threads.threads(k, blas):
            fn()
    times = {name: [] for name in variants}
    names = list(variants)
    for rep in range(repeats):
        for name in names if rep % 2 == 0 else names[::-1]:
            fn, k, blas = variants[name]
            with threads.threads(k, blas):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}, {
        name: min(t) for name, t in times.items()
    }


def row(kernel, shape, numpy_fn, compiled_fn, repeats, every):
    t, low = side_by_side(
        {"numpy": (numpy_fn, 1, 1), "c1": (compiled_fn, 1, 1), "cN": (compiled_fn, every, 1)},
        repeats,
    )
    cells = [f"{1e3 * t[v]:.2f} ({1e3 * low[v]:.2f})" for v in ("numpy", "c1", "cN")]
    return [
        kernel,
        shape,
        *cells,
        f"{t['numpy'] / t['c1']:.2f}",
        f"{t['numpy'] / t['cN']:.2f}",
        f"{t['c1'] / t['cN']:.2f}",
    ]


# ---------------------------------------------------------------------------------------------


def star_indicators(name):
    """The two dimension indicators of a Hamlet star (real when present) and the matrix, if any."""
    folder = HAMLET / name
    if folder.is_dir():
        from ilargi.datasets import load_hamlet

        nm, y = load_hamlet(folder)
        dims = [g[0].indicator for g in by_indicator(nm.parts) if not g[0].indicator.is_identity]
        return dims, (nm, (y >= POSITIVE_FROM[name]).astype(float))
    n, sizes = SIZES[name]
    rng = np.random.default_rng(0)
    return [Indicator(rng.integers(0, s, n), s) for s in sizes], None


def bench_segment_sum(repeats, every, quick):
    n, n_out, m = (500_000 if quick else 2_000_000), (25_000 if quick else 100_000), 20
    rng = np.random.default_rng(1)
    ind = Indicator(rng.integers(0, n_out, n), n_out)
    Y = rng.standard_normal((n, m))
    cpu.segment_sum(Y, ind), compiled.segment_sum(Y, ind)  # CSR of Iᵀ / bucket rows built once
    return [
        row(
            "segment-sum",
            f"{n} x {m} -> {n_out}",
            lambda: cpu.segment_sum(Y, ind),
            lambda: compiled.segment_sum(Y, ind),
            repeats,
            every,
        )
    ]


def bench_transposed(repeats, every, quick):
    """Sᵀ·Y of a tall dense S and an 8-column Y (a fact block's gradient in a k-means, GNMF or TMM
    pass, a dimension table's product with its segment-sums): BLAS against the compiled rows."""
    rng = np.random.default_rng(5)
    scale = 4 if quick else 1
    out = []
    for n, d in ((2_000_000, 20), (600_000, 3), (600_000, 50), (100_000, 80)):
        S, Y = rng.standard_normal((n // scale, d)), rng.standard_normal((n // scale, 8))
        expected = S.T @ Y
        assert (
            np.abs(compiled.transposed_product(S, Y) - expected).max()
            <= 1e-11 * np.abs(expected).max()
        )
        out.append(
            row(
                "Sᵀ·Y",
                f"{n // scale} x {d} by 8",
                lambda S=S, Y=Y: cpu.transposed_product(S, Y),
                lambda S=S, Y=Y: compiled.transposed_product(S, Y),
                repeats,
                every,
            )
        )
    return out


def bench_csr_fact(repeats, every, quick):
    """A CSR fact block's products with 8 columns, rows of varying length (a sparse fact table's
    TMM and LMM): SciPy's CSR products against the compiled pass, through a NormalizedMatrix of
    that one block."""
    rng = np.random.default_rng(6)
    scale = 4 if quick else 1
    out = []
    for n, d, per_row in ((13_939, 576, 23), (600_000, 100, 10)):
        S = sp.random(n // scale, d, density=per_row / d, format="csr", random_state=rng)
        nm = NormalizedMatrix.from_parts([S], [None], [np.arange(d)], S.shape)
        Y, W = rng.standard_normal((S.shape[0], 8)), rng.standard_normal((d, 8))
        for got, expected in ((nm.T @ Y, S.T @ Y), (nm @ W, S @ W)):
            assert np.abs(got - expected).max() <= 1e-11 * np.abs(expected).max()
        shape = f"{S.shape[0]} x {d}, {per_row} a row, by 8"
        out.append(
            row(
                "CSR Fᵀ·Y",
                shape,
                lambda S=S, Y=Y: S.T @ Y,
                lambda nm=nm, Y=Y: nm.T @ Y,
                repeats,
                every,
            )
        )
        out.append(
            row("CSR F·W", shape, lambda S=S, W=W: S @ W, lambda nm=nm, W=W: nm @ W, repeats, every)
        )
    return out


def bench_gather(repeats, every):
    out = []
    for name in SIZES:
        dims, _ = star_indicators(name)
        n = dims[0].n_rows
        plan = compiled.PassPlan(dims)
        rng = np.random.default_rng(2)
        for m in (None, 8):
            U = plan.buffer(m)
            U[:-1] = rng.standard_normal(U[:-1].shape)
            small = [plan.table(U, g) for g in range(plan.G)]
            buffer = np.empty((n,) + (() if m is None else (m,)))

            def numpy_chain():
                result = cpu.gather(small[0], dims[0])
                for Z, ind in zip(small[1:], dims[1:]):
                    result = cpu.gather_add(result, Z, ind)
                return result

            out.append(
                row(
                    "gather-add",
                    f"{name} {n} x {m or 1}, tables {[d.n_source for d in dims]}",
                    numpy_chain,
                    lambda: plan.scores(U, out=buffer),
                    repeats,
                    every,
                )
            )
    return out


class CompiledLogistic:
    """The loss and gradient of _Objective (binary, unpenalized part + penalty) through one fused
    pass: the products of the small tables, the pass, the tables' transposed products -- what the
    lead wires into the estimators."""

    def __init__(self, nm, y, C):
        self.nm, self.y, self.d = nm, y, nm.shape[1]
        self.groups = [g for g in by_indicator(nm.parts) if not g[0].indicator.is_identity]
        facts = [p for p in nm.parts if p.indicator.is_identity]
        assert len(facts) <= 1
        self.fact = facts[0] if facts else None
        F = None
        if self.fact is not None:
            F = self.fact.operand()
            F = F.toarray() if cpu.is_sparse(F) else np.ascontiguousarray(F)
        self.plan = compiled.PassPlan([g[0].indicator for g in self.groups], fact=F)
        self.U = self.plan.buffer()
        self.l2 = 1.0 / (C * nm.shape[0])

    def __call__(self, params):
        w, b = params[:-1], params[-1]
        for g, group in enumerate(self.groups):
            table = self.plan.table(self.U, g)
            table[...] = 0
            for part in group:
                table += part.operand() @ w[part.target]
        xf = None if self.fact is None else w[self.fact.target]
        P = compiled.logistic_pass(self.plan, self.U, self.y, None, xf, None, b)
        grad = np.zeros(self.d + 1)
        for g, group in enumerate(self.groups):
            B = self.plan.table(P.tables, g)
            for part in group:
                grad[part.target] += part.operand().T @ B
        if self.fact is not None:
            grad[self.fact.target] += P.fact
        n = self.nm.shape[0]
        grad[:-1] = grad[:-1] / n + self.l2 * w
        grad[-1] = P.total / n
        return P.loss / n + 0.5 * self.l2 * float(w @ w), grad


def bench_logistic(repeats, every):
    from ilargi.models.logistic import _Objective

    out = []
    for name in SIZES:
        _, data = star_indicators(name)
        if data is None:
            print(
                f"skipping the logistic pass on {name}: {HAMLET / name} not found", file=sys.stderr
            )
            continue
        nm, y = data
        C = 1.0
        today = _Objective(nm, y.astype(np.intp), 2, None, C, True)
        fused = CompiledLogistic(nm, y, C)
        params = np.random.default_rng(3).standard_normal(nm.shape[1] + 1) * 0.01
        loss_a, grad_a = today.loss_and_gradient(params)
        loss_b, grad_b = fused(params)
        assert abs(loss_a - loss_b) <= 1e-12 * abs(loss_a)
        assert np.abs(grad_a - grad_b).max() <= 1e-12 * max(np.abs(grad_a).max(), 1e-300) * 10
        out.append(
            row(
                "logistic loss+grad",
                f"{name} {nm.shape[0]} x {nm.shape[1]}",
                lambda: today.loss_and_gradient(params),
                lambda: fused(params),
                repeats,
                every,
            )
        )
    return out


def bench_pushed(repeats, every):
    """Crossprod's cross block route: A = I_qᵀ·I_p·S_p for Walmart's narrow one-hot table p (45 x 53)
    pushed into the other table's 2,340 rows, against cpu.pushed_sums (bincounts)."""
    _, data = star_indicators("Walmart")
    if data is None:
        return []
    nm, _ = data
    dims = sorted(
        (p for p in nm.parts if not p.indicator.is_identity), key=lambda p: p.source.shape[0]
    )
    narrow, other = dims[0], dims[-1]
    S = narrow.operand()
    args = (S, narrow.indicator, other.indicator)
    compiled.pushed_sums(*args)
    return [
        row(
            "pushed sums",
            f"Walmart {S.shape[0]} x {S.shape[1]} CSR -> {other.indicator.n_source} rows",
            lambda: cpu.pushed_sums(*args),
            lambda: compiled.pushed_sums(*args),
            repeats,
            every,
        )
    ]


def bench_kmeans(repeats, every, k=8):
    """One Lloyd step on Walmart (k centers): distances, labels, cluster sums, against the chain of
    models/kmeans.py (_nearest: an LMM of width k, then Xᵀ·onehot)."""
    from ilargi.models.kmeans import _nearest, _rounding

    _, data = star_indicators("Walmart")
    if data is None:
        return []
    nm, _ = data
    groups = [g for g in by_indicator(nm.parts) if not g[0].indicator.is_identity]
    (fact,) = [p for p in nm.parts if p.indicator.is_identity]
    F = fact.operand()
    F = F.toarray() if cpu.is_sparse(F) else np.ascontiguousarray(F)
    plan = compiled.PassPlan([g[0].indicator for g in groups], fact=F)
    rng = np.random.default_rng(5)
    centers = rng.random((k, nm.shape[1]))
    x_sq = nm.sum_of_squares(axis=1)
    c_sq, rounding = (centers**2).sum(axis=1), _rounding(centers)
    U = plan.buffer(k)

    def numpy_chain():
        labels, closest = _nearest(nm, x_sq, centers)
        onehot = (labels[:, None] == np.arange(k)[None, :]).astype(np.float64)
        return (nm.T @ onehot).T

    def fused():
        for g, group in enumerate(groups):
            table = plan.table(U, g)
            table[...] = 0
            for part in group:
                table += part.operand() @ centers[:, part.target].T
        A = compiled.kmeans_pass(plan, U, x_sq, c_sq, rounding, centers[:, fact.target].T)
        sums = np.zeros((nm.shape[1], k))
        for g, group in enumerate(groups):
            for part in group:
                sums[part.target] += part.operand().T @ plan.table(A.tables, g)
        sums[fact.target] += A.fact
        return sums.T

    assert np.abs(fused() - numpy_chain()).max() <= 1e-9 * np.abs(numpy_chain()).max()
    return [
        row(
            "k-means step",
            f"Walmart {nm.shape[0]} x {nm.shape[1]}, k = {k}",
            numpy_chain,
            fused,
            repeats,
            every,
        )
    ]


def bench_gramvec(repeats, every, quick):
    from ilargi.datasets import make_star

    n_R = 20_000 if quick else 100_000
    nm, _ = make_star(20 * n_R, tuple_ratio=20, feature_ratio=4, random_state=0)
    (fact,) = [p for p in nm.parts if p.indicator.is_identity]
    dims = [p for p in nm.parts if not p.indicator.is_identity]
    plan = compiled.PassPlan([p.indicator for p in dims], fact=np.ascontiguousarray(fact.source))
    U = plan.buffer()
    rng = np.random.default_rng(4)
    y, v = rng.standard_normal(nm.shape[1]), rng.random(nm.shape[0])

    def fused():
        for g, part in enumerate(dims):
            np.dot(part.source, y[part.target], out=plan.table(U, g))
        P = compiled.gramvec_pass(plan, U, v, y[fact.target])
        out = np.zeros(nm.shape[1])
        for g, part in enumerate(dims):
            out[part.target] += part.source.T @ plan.table(P.tables, g)
        out[fact.target] += P.fact
        return out

    expected = nm.gramvec(y, v)
    assert np.abs(fused() - expected).max() <= 1e-11 * np.abs(expected).max()
    return [
        row(
            "gramvec",
            f"dense star TR=20 FR=4 n_S={nm.shape[0]} d={nm.shape[1]}",
            lambda: nm.gramvec(y, v),
            fused,
            repeats,
            every,
        )
    ]


def first_calls(start):
    """A logistic fit's first pass, then every compiled kernel once (the warm-up of the background
    build, :func:`ilargi.backend.compiled.build.warm_up`); prints the seconds since ``start``
    (taken before importing NumPy and ilargi) at the end of the imports, of the first pass, and of
    all the first calls."""
    from ilargi.backend import compiled as C
    from ilargi.metadata.indicator import Indicator as Ind

    imported = time.perf_counter()
    rng = np.random.default_rng(0)
    n = 2000
    dims = [Ind(rng.integers(-1, 30, n), 30), Ind(rng.integers(0, 7, n), 7)]
    plan = C.PassPlan(dims, fact=rng.standard_normal((n, 3)), fact_csr=sp.random(n, 4, 0.3, "csr"))
    C.logistic_pass(plan, plan.buffer(), np.zeros(n), None, np.ones(3), np.ones(4), 0.0)
    first_pass = time.perf_counter()
    C.build.warm_up()
    done = time.perf_counter()
    print(f"{imported - start:.3f} {first_pass - start:.3f} {done - start:.3f}")


def compile_cost():
    """Cold (fresh NUMBA_CACHE_DIR) and warm (second process, same folder) first calls."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        env = dict(__import__("os").environ, NUMBA_CACHE_DIR=folder, ILARGI_KERNELS="compiled")
        for label in ("cold", "warm", "warm"):
            code = (
                f"import time; start = time.perf_counter(); import sys; sys.path.insert(0, "
                f"{str(Path(__file__).parent)!r}); import bench_kernels; "
                f"bench_kernels.first_calls(start)"
            )
            out = subprocess.run(
                [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
            ).stdout.split()
            imported, first, every = (float(v) for v in out)
            print(
                f"{label}: import (NumPy, SciPy, Numba, ilargi) {imported:.3f} s; then the first "
                f"logistic pass {first - imported:.3f} s, the first call of every kernel "
                f"{every - imported:.3f} s (total {every:.3f} s)"
            )


def _load():
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # not available on this platform
        return "n/a"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--quick", action="store_true", help="smaller segment-sum and gramvec inputs"
    )
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset: segment,transposed,csr,gather,logistic,pushed,kmeans,gramvec",
    )
    parser.add_argument(
        "--compile-cost",
        action="store_true",
        help="cold and warm import + first calls, in fresh processes",
    )
    args = parser.parse_args(argv)
    if args.compile_cost:
        return compile_cost()
    if args.repeats < 5:
        parser.error("--repeats must be at least 5")
    every = threads.default_num_threads()
    from numba import threading_layer

    compiled.segment_sum(np.ones(10), Indicator(np.zeros(10, dtype=np.intp), 1))
    print(
        f"threading layer: {threading_layer()}, every core = {every} threads, "
        f"median of {args.repeats} after warm-up; load average {_load()}\n"
    )
    only = set(filter(None, args.only.split(","))) or {
        "segment",
        "transposed",
        "csr",
        "gather",
        "logistic",
        "pushed",
        "kmeans",
        "gramvec",
    }
    rows = []
    if "segment" in only:
        rows += bench_segment_sum(args.repeats, every, args.quick)
    if "transposed" in only:
        rows += bench_transposed(args.repeats, every, args.quick)
    if "csr" in only:
        rows += bench_csr_fact(args.repeats, every, args.quick)
    if "gather" in only:
        rows += bench_gather(args.repeats, every)
    if "logistic" in only:
        rows += bench_logistic(args.repeats, every)
    if "pushed" in only:
        rows += bench_pushed(args.repeats, every)
    if "kmeans" in only:
        rows += bench_kmeans(args.repeats, every)
    if "gramvec" in only:
        rows += bench_gramvec(args.repeats, every, args.quick)
    header = [
        "kernel",
        "shape",
        "NumPy/SciPy 1t ms (min)",
        "compiled 1t ms (min)",
        f"compiled {every}t ms (min)",
        "NumPy / 1t",
        f"NumPy / {every}t",
        f"1t / {every}t",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(c) for c in r) + " |")
    print(f"\nload average at the end: {_load()}")


if __name__ == "__main__":
    main()
