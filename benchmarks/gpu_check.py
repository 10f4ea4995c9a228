"""The GPU check of Ilargi, in one run on a CUDA machine: tests, correctness, timings, targets.

    python benchmarks/gpu_check.py --datasets DIR --out OUT   # about 3 minutes on an H200
    python benchmarks/gpu_check.py --quick                    # a smoke run of every section
    python benchmarks/gpu_check.py --full                     # whole grid, CPU column at n_R = 1e6
    python benchmarks/gpu_check.py --sweep 120                # also the chooser's GPU sweep (120 s)

1. runs the GPU tests (``pytest -m gpu tests/test_gpu.py``) in a subprocess, with a timeout;
2. checks every NormalizedMatrix operator and every estimator of :mod:`ilargi.models` on the GPU
   against the NumPy result (float64: relative error ≤ 1e-9; float32: ≤ 1e-4), the stacked passes,
   the per-part rules and the unfused gram-vector chain alike;
3. times, side by side: factorized GPU (stacked passes) vs materialized GPU (CuPy dense / cupyx
   CSR, each operator in its fastest form: GEMV row and column sums, SYRK or GEMM for TᵀT) vs
   factorized CPU (and the operators part by part on the target workload, the three-dimension star
   and the Hamlet datasets), for each operator and for 20 gradient-descent
   iterations of logistic regression, on the Hamlet datasets, a three-dimension star
   (d_S = 20, three dimensions of FR = 4: 1/10 of the materialized bytes) and the synthetic grid
   (TR ∈ {1, 5, 20}, FR ∈ {1, 4}, n_R ∈ {1e5, 1e6}, d_S = 20, generated on the GPU); the
   segment-sum variants; fused vs unfused gramvec; CUDA-graph replay vs eager per-iteration time;
4. asks the chooser (:func:`ilargi.chooser.choose`) which plan it would pick for every timed
   operator, and prints a short table last, ending with one PASS/MISS line per target of the GPU
   issue with the measured number.

Times are medians of up to 5 repeats after a warm-up, with device synchronization. Every section
runs in try/except: a failure prints its traceback and the run goes on; sections are skipped when
the time budget runs out. Full results go to $OUT (or --out): gpu_check.json, gpu_check.md,
gpu_tests.log (and gpu_sweep.csv with --sweep).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

OPERATORS = ("LMM m=1", "LMM m=8", "RMM", "TMM m=8", "rowSums", "colSums", "crossprod", "gramvec")
SHORT = {"LMM m=1": "LMM1", "LMM m=8": "LMM8", "RMM": "RMM", "TMM m=8": "TMM8",
         "rowSums": "rowS", "colSums": "colS", "crossprod": "cross", "gramvec": "gramv"}
CHOOSER_OPS = {"LMM m=1": ("lmm", 1), "LMM m=8": ("lmm", 8), "RMM": ("rmm", 1),
               "TMM m=8": ("tmm", 8), "rowSums": ("rowsums", None),
               "colSums": ("colsums", None), "crossprod": ("crossprod", None),
               "gramvec": ("gramvec", None)}
F64, F32 = 1e-9, 1e-4
PUBLISHED_SPEEDUP = 8.9  # Ilargi's published "up to 8.9×" of factorized over materialized (GPU)
FACT = "factorized GPU"
PER_PART = "factorized GPU per-part"
UNFUSED = "factorized GPU unfused"
MAT = "materialized GPU"


# ---------------------------------------------------------------------------------------------
# Run bookkeeping: budget, sections that never stop the run, results.

class Run:
    def __init__(self, args):
        self.args = args
        self.start = time.perf_counter()
        self.results = {"sections": {}, "errors": [], "timings": [], "checks": [],
                        "estimators": [], "notes": []}

    def left(self):
        return self.args.budget - (time.perf_counter() - self.start)

    def section(self, name, fn, *args, need=0.0):
        """Run fn(*args); a failure is printed and recorded, never raised."""
        if self.left() < need:
            note = f"{name}: skipped, {self.left():.0f} s of the time budget left (needs ~{need:.0f})"
            print(note, flush=True)
            self.results["notes"].append(note)
            return None
        print(f"\n=== {name} ({self.left():.0f} s left)", flush=True)
        began = time.perf_counter()
        try:
            return fn(*args)
        except Exception as exc:  # the check goes on: report and continue
            traceback.print_exc()
            self.results["errors"].append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            return None
        finally:
            self.results["sections"][name] = round(time.perf_counter() - began, 2)

    def note(self, text):
        print(text, flush=True)
        self.results["notes"].append(text)


def _stub_optional_imports():
    """Let ilargi.models import where tqdm (a progress bar only) is not installed."""
    try:
        import tqdm.auto  # noqa: F401
        return None
    except ImportError:
        pass

    class _Bar:
        def __init__(self, *args, **kwargs):
            self.iterable = args[0] if args else kwargs.get("iterable")

        def __iter__(self):
            return iter(self.iterable or ())

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __getattr__(self, name):  # update, set_postfix, close, refresh, ...
            return lambda *args, **kwargs: None

    package, auto = types.ModuleType("tqdm"), types.ModuleType("tqdm.auto")
    package.tqdm = auto.tqdm = _Bar
    package.auto = auto
    sys.modules["tqdm"], sys.modules["tqdm.auto"] = package, auto
    # The pytest subprocess gets the same stub through PYTHONPATH.
    folder = Path(tempfile.mkdtemp(prefix="ilargi_stub_"))
    (folder / "tqdm").mkdir()
    source = ("class tqdm:\n"
              "    def __init__(self, *a, **k): self.iterable = a[0] if a else k.get('iterable')\n"
              "    def __iter__(self): return iter(self.iterable or ())\n"
              "    def __enter__(self): return self\n"
              "    def __exit__(self, *e): return False\n"
              "    def __getattr__(self, name): return lambda *a, **k: None\n")
    (folder / "tqdm" / "__init__.py").write_text(source)
    (folder / "tqdm" / "auto.py").write_text("from tqdm import tqdm\n")
    return folder


# ---------------------------------------------------------------------------------------------
# Timing.

def _sync():
    import cupy as cp
    cp.cuda.Device().synchronize()


def measure(fn, sync=None, repeats=5, max_seconds=1.5):
    """(median seconds, repeats) of fn() after one warm-up; fewer repeats (≥ 3) for slow calls."""
    fn()
    if sync:
        sync()
    times, began = [], time.perf_counter()
    while len(times) < repeats:
        start = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - start)
        if len(times) >= 3 and time.perf_counter() - began > max_seconds:
            break
        if len(times) >= 1 and times[0] > max_seconds:  # one slow run is all the budget allows
            break
    return statistics.median(times), len(times)


def fastest(candidates, sync):
    """(median seconds, repeats) of the fastest of several equivalent calls (a fair baseline)."""
    best = None
    for call in candidates:
        try:
            timing = measure(call, sync)
        except Exception:  # a form this CuPy/cuBLAS does not offer
            continue
        if best is None or timing[0] < best[0]:
            best = timing
    if best is None:
        raise RuntimeError("no candidate form ran")
    return best


def operator_calls(target, xp, n, d, seed, factorized):
    """(name, [calls]) for every timed operator on ``target`` (a NormalizedMatrix or a table T).

    On a materialized T the sums are GEMVs (T·1, Tᵀ·1 or 1ᵀT: CuPy's sum over the rows of a C-order
    matrix is several times slower), and where an operator has several equivalent forms all are
    listed and the fastest counts (TᵀT as a GEMM or a cuBLAS SYRK): the comparison is against the
    best materialized plan.
    """
    rs = xp.random.RandomState(seed)
    x, X8 = rs.standard_normal(d), rs.standard_normal((d, 8))
    y, Y8 = rs.standard_normal(n), rs.standard_normal((n, 8))
    v = rs.random_sample(n)
    if factorized:
        return [("LMM m=1", [lambda: target @ x]), ("LMM m=8", [lambda: target @ X8]),
                ("RMM", [lambda: y @ target]), ("TMM m=8", [lambda: target.T @ Y8]),
                ("rowSums", [lambda: target.sum(axis=1)]),
                ("colSums", [lambda: target.sum(axis=0)]),
                ("crossprod", [lambda: target.crossprod()]),
                ("gramvec", [lambda: target.gramvec(x, v)])]
    ones_d, ones_n = xp.ones(d), xp.ones(n)
    crossprods, column_sums = [lambda: target.T @ target], [lambda: target.T @ ones_n]
    if not sp.issparse(target) and not _is_cupy_sparse(target):
        crossprods.append(lambda: _syrk(target))
        column_sums.append(lambda: ones_n @ target)
    return [("LMM m=1", [lambda: target @ x]), ("LMM m=8", [lambda: target @ X8]),
            ("RMM", [lambda: y @ target]), ("TMM m=8", [lambda: target.T @ Y8]),
            ("rowSums", [lambda: target @ ones_d]), ("colSums", column_sums),
            ("crossprod", crossprods), ("gramvec", [lambda: target.T @ (v * (target @ x))])]


def _is_cupy_sparse(x):
    import cupyx.scipy.sparse as csp
    return csp.issparse(x)


def _syrk(T):
    """TᵀT by cuBLAS SYRK (one triangle: half the FLOPs of a GEMM), into a C-order result (an
    F-order one would make CuPy copy T first)."""
    import cupy as cp
    from cupy import cublas
    return cublas.syrk("T", T, out=cp.zeros((T.shape[1], T.shape[1]), dtype=T.dtype))


# ---------------------------------------------------------------------------------------------
# Data.

def _read_hamlet_files(folder):
    """Hamlet folder -> (NormalizedMatrix on the CPU, y), parsing the files directly."""
    import pandas as pd
    import scipy.io
    from ilargi import NormalizedMatrix
    column = lambda path: pd.read_csv(path).iloc[:, 0].to_numpy()  # noqa: E731
    y = column(folder / "MLY.csv").astype(np.float64)
    sources, rows = [], []
    if (folder / "MLSSparse.txt").exists():
        sources.append(sp.csr_matrix(scipy.io.mmread(folder / "MLSSparse.txt"), dtype=np.float64))
        rows.append(None)
    elif (folder / "MLSraw.txt").exists():
        values = column(folder / "MLSraw.txt").astype(np.float64).reshape(-1, 1)
        sources.append(sp.csr_matrix(values))
        rows.append(None)
    i = 1
    while (folder / f"MLFK{i}.csv").exists():
        sources.append(sp.csr_matrix(scipy.io.mmread(folder / f"MLR{i}Sparse.txt"),
                                     dtype=np.float64))
        rows.append(column(folder / f"MLFK{i}.csv").astype(np.int64) - 1)
        i += 1
    widths = np.cumsum([0] + [s.shape[1] for s in sources])
    cols = [np.arange(widths[k], widths[k + 1]) for k in range(len(sources))]
    return NormalizedMatrix.from_parts(sources, rows, cols, (len(y), int(widths[-1]))), y


def load_hamlet_dataset(folder, run):
    try:
        from ilargi.datasets import load_hamlet
    except Exception as exc:  # e.g. an optional dependency of ilargi.datasets is missing
        run.note(f"ilargi.datasets unavailable ({type(exc).__name__}: {exc}); parsing Hamlet files")
        return _read_hamlet_files(folder)
    return load_hamlet(folder)


def hamlet_folder(args):
    candidates = [args.datasets] if args.datasets else []
    if os.environ.get("ILARGI_DATASETS"):
        candidates.append(Path(os.environ["ILARGI_DATASETS"]))
    candidates += [REPO / "shared" / "datasets", REPO.parent / "shared" / "datasets"]
    for candidate in candidates:
        for folder in (Path(candidate) / "hamlet", Path(candidate)):
            if (folder / "Flights" / "MLY.csv").exists() or (folder / "Yelp" / "MLY.csv").exists():
                return folder
    return None


def synthetic_gpu(n_r, tr, fr, d_s=20, n_dims=1, seed=0, run=None):
    """The dense star S (TR·n_R × d_S) ⋈ R_1..R_k (n_R × FR·d_S each), generated on the GPU."""
    import cupy as cp
    from ilargi import NormalizedMatrix
    n_s, d_r = tr * n_r, fr * d_s
    rs = cp.random.RandomState(seed)
    sources = [rs.standard_normal((n_s, d_s))] + [rs.standard_normal((n_r, d_r))
                                                   for _ in range(n_dims)]
    rows = [None] + [rs.randint(0, n_r, size=n_s).astype(cp.int64) for _ in range(n_dims)]
    starts = np.cumsum([0, d_s] + [d_r] * n_dims)
    cols = [np.arange(starts[k], starts[k + 1]) for k in range(n_dims + 1)]
    shape = (n_s, int(starts[-1]))
    try:
        return NormalizedMatrix.from_parts(sources, rows, cols, shape)
    except Exception as exc:  # report, then build on the host and move
        if run is not None:
            run.note(f"from_parts with CuPy sources failed ({type(exc).__name__}: {exc}); "
                     "building on the host")
        return NormalizedMatrix.from_parts([s.get() for s in sources],
                                           [None] + [r.get() for r in rows[1:]], cols,
                                           shape).to("gpu")


def _free_pool():
    import cupy as cp
    cp.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------------------------------------
# Sections: environment, tests, correctness.

def environment(run):
    import cupy as cp
    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    free, total = cp.cuda.Device().mem_info
    info = {
        "device": name, "memory_gib": round(total / 2 ** 30, 1),
        "free_gib": round(free / 2 ** 30, 1),
        "cupy": cp.__version__, "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": cp.cuda.runtime.driverGetVersion(), "numpy": np.__version__,
        "python": platform.python_version(), "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
    }
    import scipy
    info["scipy"] = scipy.__version__
    run.results["environment"] = info
    print(json.dumps(info, indent=1), flush=True)


def gpu_tests(run, stub_folder, out):
    env = dict(os.environ)
    env.setdefault("ILARGI_EXAMPLES_SCALE", "1" if run.args.full else "0.5")
    if stub_folder is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(stub_folder), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-m", "gpu", "-q", "-rfE",
               "-p", "no:cacheprovider"]
    began = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=run.args.test_timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = ((exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes)
                  else (exc.stdout or "")) + f"\nTIMEOUT after {run.args.test_timeout} s"
        code = "timeout"
    (out / "gpu_tests.log").write_text(output)
    lines = [line for line in output.splitlines() if line.strip()]
    summary = next((line for line in reversed(lines) if " passed" in line or " failed" in line
                    or "error" in line.lower() or "TIMEOUT" in line), lines[-1] if lines else "")
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    run.results["tests"] = {"exit": code, "summary": summary.strip("= "), "failed": failed,
                            "seconds": round(time.perf_counter() - began, 1)}
    print("\n".join(lines[-25:]), flush=True)


def _relative_error(actual, expected):
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if actual.shape != expected.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(actual - expected)) / max(1.0, float(np.max(np.abs(expected)))))


def _host(x):
    import cupy as cp
    import cupyx.scipy.sparse as csp
    if hasattr(x, "materialize"):
        x = x.materialize()
    if csp.issparse(x):
        return x.get().toarray()
    if sp.issparse(x):
        return x.toarray()
    return cp.asnumpy(x)


def _check_cases(seed):
    """(name, CPU NormalizedMatrix, tolerance) for the correctness checks."""
    from ilargi import NormalizedMatrix
    rng = np.random.default_rng(seed)
    n, n_r = 3000, 300
    fact = rng.standard_normal((n, 6))
    dense_dim = rng.standard_normal((n_r, 5))
    sparse_dim = sp.random(200, 7, density=0.3, format="csr", random_state=seed)
    fk1 = rng.integers(-1, n_r, n)  # left join: -1 = no match
    fk2 = rng.integers(0, 200, n)
    cols = [np.arange(6), np.arange(6, 11), np.arange(11, 18)]
    mixed = NormalizedMatrix.from_parts([fact, dense_dim, sparse_dim], [None, fk1, fk2], cols,
                                        (n, 18))
    a, b = rng.uniform(0.5, 2.0, 18), rng.uniform(-1.0, 1.0, 18)
    single = NormalizedMatrix.from_parts([s.astype(np.float32) for s in (fact, dense_dim,
                                                                         sparse_dim)],
                                         [None, fk1, fk2], cols, (n, 18))
    return [("mixed left join", mixed, F64), ("mixed affine", mixed * a + b, F64),
            ("mixed rows[::3]", (mixed * a + b)[::3], F64), ("mixed float32", single, F32)]


def operator_checks(run):
    import cupy as cp
    from ilargi.backend import gpu as kernels
    for index, (name, cpu, tol) in enumerate(_check_cases(0)):
        nm = cpu.to("gpu")
        n, d = cpu.shape
        rng = np.random.default_rng(1)
        x, X8 = rng.standard_normal(d), rng.standard_normal((d, 8))
        y, Y3 = rng.standard_normal(n), rng.standard_normal((n, 3))
        v, w = rng.random(n), rng.random(n) + 0.5
        if tol == F32:
            x, X8, y, Y3, v = (a.astype(np.float32) for a in (x, X8, y, Y3, v))
        g = {k: cp.asarray(a) for k, a in dict(x=x, X8=X8, y=y, Y3=Y3, v=v, w=w).items()}
        checks = [
            ("T @ x", lambda m, o: m @ o["x"]), ("T @ X8", lambda m, o: m @ o["X8"]),
            ("y @ T", lambda m, o: o["y"] @ m), ("T.T @ Y3", lambda m, o: m.T @ o["Y3"]),
            ("sum(0)", lambda m, o: m.sum(axis=0)), ("sum(1)", lambda m, o: m.sum(axis=1)),
            ("sum()", lambda m, o: m.sum()), ("mean(0)", lambda m, o: m.mean(axis=0)),
            ("var(0)", lambda m, o: m.var(axis=0)), ("std()", lambda m, o: m.std()),
            ("min(0)", lambda m, o: m.min(axis=0)), ("max(0)", lambda m, o: m.max(axis=0)),
            ("crossprod", lambda m, o: m.crossprod()),
            ("crossprod(w)", lambda m, o: m.crossprod(o["w"])),
            ("tcrossprod[:300]", lambda m, o: m[:300].tcrossprod()),
            ("gramvec", lambda m, o: m.gramvec(o["x"], v=o["v"], alpha=0.5, beta=2.0, z=o["x"])),
            ("exp(T) @ x", lambda m, o: np.exp(m * 0.1) @ o["x"]),
            ("T[rows, cols]", lambda m, o: m[np.arange(0, n, 7), np.arange(0, d, 2)]),
            ("materialize", lambda m, o: m.materialize()),
        ]
        # Every case through the stacked passes (and the unfused gramvec chain); one also part by
        # part, the path the stacked passes fall back to.
        variants = [("stacked", True, True), ("unfused", True, False)]
        if index == 1:  # the affine case: every per-part rule with the affine state on top
            variants.append(("per-part", False, False))
        host_operands = dict(x=x, X8=X8, y=y, Y3=Y3, v=v, w=w)
        for op, call in checks:
            error, detail = None, ""
            try:
                expected = _host(call(cpu, host_operands))
                for variant, stacked, fused in variants:
                    if variant == "unfused" and op != "gramvec":
                        continue
                    kernels.flags.STACKED, kernels.flags.FUSED_GRAMVEC = stacked, fused
                    error = max(error or 0.0, _relative_error(_host(call(nm, g)), expected))
            except Exception as exc:
                detail = f"{type(exc).__name__}: {exc}"[:200]
            finally:
                kernels.flags.STACKED, kernels.flags.FUSED_GRAMVEC = True, True
            ok = error is not None and error <= tol
            run.results["checks"].append({"case": name, "op": op, "error": error, "tol": tol,
                                          "ok": ok, "detail": detail})
            if not ok:
                print(f"CHECK FAILED {name} / {op}: error={error} {detail}", flush=True)
    checks = run.results["checks"]
    print(f"{sum(c['ok'] for c in checks)}/{len(checks)} operator checks within tolerance",
          flush=True)


def estimator_checks(run):
    import ilargi.models as models
    from ilargi import NormalizedMatrix
    rng = np.random.default_rng(2)
    n, n_r = 2000, 150
    fact = np.abs(rng.standard_normal((n, 4)))
    dim = np.abs(rng.standard_normal((n_r, 5)))
    fk = rng.integers(0, n_r, n)
    cpu = NormalizedMatrix.from_parts([fact, dim], [None, fk], [np.arange(4), np.arange(4, 9)],
                                      (n, 9))
    gpu = cpu.to("gpu")
    T = cpu.toarray()
    y_linear = T @ rng.standard_normal(9) + 0.1 * rng.standard_normal(n)
    y_binary = (y_linear > np.median(y_linear)).astype(np.float64)
    specs = [
        ("StandardScaler", lambda: models.StandardScaler(), None, ("mean_", "var_", "scale_")),
        ("LinearRegression", lambda: models.LinearRegression(plan="factorized"), y_linear,
         ("coef_", "intercept_")),
        ("Ridge", lambda: models.Ridge(alpha=1.0, plan="factorized"), y_linear,
         ("coef_", "intercept_")),
        ("LogisticRegression gd", lambda: models.LogisticRegression(
            solver="gd", max_iter=20, tol=0.0, plan="factorized"), y_binary, ("coef_", "intercept_")),
        ("LogisticRegression lbfgs", lambda: models.LogisticRegression(plan="factorized"),
         y_binary, ("coef_", "intercept_")),
        ("KMeans", lambda: models.KMeans(n_clusters=4, n_init=1, max_iter=20, random_state=0,
                                         plan="factorized"), None, ("cluster_centers_",)),
        ("GNMF", lambda: models.GNMF(n_components=3, max_iter=30, random_state=0,
                                     plan="factorized"), None, ("components_",)),
    ]
    for name, make, target, attributes in specs:
        entry = {"estimator": name, "ok": False, "error": None, "detail": ""}
        try:
            reference = make().fit(cpu, target) if target is not None else make().fit(cpu)
            fitted = make().fit(gpu, target) if target is not None else make().fit(gpu)
            errors = [_relative_error(_host(getattr(fitted, a)), np.asarray(getattr(reference, a)))
                      for a in attributes]
            entry["error"] = max(errors)
            tol = 1e-6 if name == "LogisticRegression lbfgs" else F64  # an optimizer's stopping point
            entry["ok"] = entry["error"] <= tol
            entry["tol"] = tol
        except Exception as exc:
            entry["detail"] = f"{type(exc).__name__}: {exc}"[:200]
        run.results["estimators"].append(entry)
        print(f"{name}: {'ok' if entry['ok'] else 'FAIL'} error={entry['error']} {entry['detail']}",
              flush=True)


def chooser_decisions(run, label, nm_gpu):
    """Which plan the chooser picks for every timed operator of this workload (on the GPU)."""
    try:
        from ilargi.chooser import choose
    except Exception as exc:
        run.results["chooser"][label] = f"unavailable ({type(exc).__name__}: {exc})"[:200]
        return
    decisions = {}
    for op, (name, m) in CHOOSER_OPS.items():
        try:
            plan = choose(nm_gpu, name, m=m, device="gpu")
            decisions[op] = "factorized" if plan.factorize else "materialized"
        except Exception as exc:
            decisions[op] = f"error ({type(exc).__name__}: {exc})"[:150]
    run.results["chooser"][label] = decisions


# ---------------------------------------------------------------------------------------------
# Sections: timings.

def time_workload(run, label, nm_gpu, with_cpu, per_part, seed=0):
    """Operators: factorized GPU (stacked), per part, unfused gramvec, materialized GPU, CPU."""
    import cupy as cp
    from ilargi.backend import gpu as kernels
    n, d = nm_gpu.shape
    rows = run.results["timings"]

    def record(variant, op, seconds, repeats):
        rows.append({"workload": label, "op": op, "variant": variant,
                     "ms": round(seconds * 1e3, 4), "repeats": repeats})

    chooser_decisions(run, label, nm_gpu)
    calls = dict(operator_calls(nm_gpu, cp, n, d, seed, factorized=True))
    for op in OPERATORS:
        record(FACT, op, *measure(calls[op][0], _sync))
    kernels.flags.FUSED_GRAMVEC = False
    try:
        record(UNFUSED, "gramvec", *measure(calls["gramvec"][0], _sync))
    finally:
        kernels.flags.FUSED_GRAMVEC = True
    kernels.flags.STACKED = False
    try:
        for op in OPERATORS if per_part else ():
            record(PER_PART, op, *measure(calls[op][0], _sync))
    finally:
        kernels.flags.STACKED = True
    try:
        began = time.perf_counter()
        T = nm_gpu.materialize()
        _sync()
        record("join GPU", "materialize", time.perf_counter() - began, 1)
        for op, candidates in operator_calls(T, cp, n, d, seed, factorized=False):
            record(MAT, op, *fastest(candidates, _sync))
        del T
    except MemoryError as exc:
        run.note(f"{label}: materialized GPU skipped ({type(exc).__name__}: {exc})"[:250])
    _free_pool()
    if with_cpu:
        nm_cpu = nm_gpu.to("cpu")
        for op, candidates in operator_calls(nm_cpu, np, n, d, seed, factorized=True):
            record("factorized CPU", op, *measure(candidates[0], None, repeats=5,
                                                  max_seconds=1.0))
        return nm_cpu
    return None


def logistic_chain(target, xp, y, iterations, lr=1e-3, l2=1e-4):
    """Plain gradient-descent steps written with the operators (the eager chain, any backend)."""
    n = target.shape[0]
    w = xp.zeros(target.shape[1])
    for _ in range(iterations):
        residual = (1.0 / (1.0 + xp.exp(-(target @ w))) - y) / n
        w = w - lr * (target.T @ residual + l2 * w)
    return w


def time_logistic(run, label, nm_gpu, nm_cpu, iterations=20):
    import cupy as cp
    from ilargi.models._graphed import LogisticGD
    n = nm_gpu.shape[0]
    y = (cp.random.RandomState(3).random_sample(n) < 0.5).astype(cp.float64)
    rows = run.results["timings"]

    def record(variant, seconds, repeats):
        rows.append({"workload": label, "op": f"logreg {iterations} GD", "variant": variant,
                     "ms": round(seconds * 1e3, 4), "repeats": repeats})

    record(FACT, *measure(lambda: logistic_chain(nm_gpu, cp, y, iterations), _sync))
    for graph in (False, True):
        began = time.perf_counter()
        loop = LogisticGD(nm_gpu, y, 1e-3, 1e-4, graph=graph)
        _sync()
        setup = time.perf_counter() - began
        variant = "graphed kernels" if graph else "eager kernels"
        if graph and not loop.graphed:
            run.note(f"{label}: graph capture failed: {loop.fallback_reason}")
            variant = "graphed kernels (FELL BACK to eager)"
        record(variant, *measure(lambda: loop.run(iterations), _sync))
        rows.append({"workload": label, "op": "setup", "variant": variant,
                     "ms": round(setup * 1e3, 3), "repeats": 1})
    try:
        T = nm_gpu.materialize()
        record(MAT, *measure(lambda: logistic_chain(T, cp, y, iterations), _sync))
        del T
    except MemoryError as exc:
        run.note(f"{label}: materialized logistic skipped ({exc})"[:200])
    _free_pool()
    if nm_cpu is not None:
        y_host = cp.asnumpy(y)
        record("factorized CPU", *measure(lambda: logistic_chain(nm_cpu, np, y_host, iterations),
                                          None, repeats=3, max_seconds=2.0))


def time_segment_sums(run, label, nm_gpu):
    """s(Y, rows) of the largest dimension by each SEGMENT_SUM variant (m = 1 and 8)."""
    import cupy as cp
    from ilargi.backend import gpu as kernels
    dims = [p.indicator for p in nm_gpu.parts if not p.indicator.is_identity]
    if not dims:
        return
    ind = max(dims, key=lambda i: i.n_source)
    rs = cp.random.RandomState(4)
    y, Y8 = rs.standard_normal(ind.n_rows), rs.standard_normal((ind.n_rows, 8))
    saved = kernels.flags.SEGMENT_SUM
    try:
        for method in ("pieces", "atomic", "csr"):
            kernels.flags.SEGMENT_SUM = method
            for op, Y in (("segment sum m=1", y), ("segment sum m=8", Y8)):
                seconds, repeats = measure(lambda: kernels.segment_sum(Y, ind), _sync)
                run.results["timings"].append({"workload": label, "op": op, "variant": method,
                                               "ms": round(seconds * 1e3, 4), "repeats": repeats})
    finally:
        kernels.flags.SEGMENT_SUM = saved


def time_graph_replay(run, label, nm_gpu, iterations=100):
    """Per-iteration time of the graphed steps vs the same kernels launched eagerly."""
    import cupy as cp
    from ilargi.models._graphed import KMeansLloyd, LogisticGD
    n = nm_gpu.shape[0]
    y = (cp.random.RandomState(5).random_sample(n) < 0.5).astype(cp.float64)
    start = nm_gpu[np.arange(8) * (n // 8)].toarray()
    makers = {"logreg step": lambda graph: LogisticGD(nm_gpu, y, 1e-3, graph=graph),
              "k-means step (K=8)": lambda graph: KMeansLloyd(nm_gpu, start, graph=graph)}
    for step, make in makers.items():
        for graph in (False, True):
            loop = make(graph)
            variant = "graph replay" if graph else "eager"
            if graph and not loop.graphed:
                variant = "graph replay (FELL BACK to eager)"
                run.note(f"{label} {step}: capture failed: {loop.fallback_reason}")
            seconds, repeats = measure(lambda: loop.run(iterations), _sync)
            run.results["timings"].append({"workload": label, "op": step, "variant": variant,
                                           "ms": round(seconds / iterations * 1e3, 5),
                                           "repeats": repeats})


def chooser_sweep(run, seconds, out):
    """The chooser's GPU sweep in a subprocess (its failure cannot break this check)."""
    command = [sys.executable, "-m", "ilargi.chooser", "sweep", "--device", "gpu", "--out",
               str(out / "gpu_sweep.csv"), "--budget-seconds", str(seconds)]
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                              timeout=seconds + 60)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired:
        output, code = f"TIMEOUT after {seconds + 60} s", "timeout"
    (out / "gpu_sweep.log").write_text(output)
    lines = [line for line in output.splitlines() if line.strip()]
    run.results["sweep"] = {"exit": code, "last": lines[-1][:200] if lines else ""}
    print("\n".join(lines[-5:]), flush=True)


# ---------------------------------------------------------------------------------------------
# Output.

def _lookup(timings, workload, op, variant):
    for row in timings:
        if row["workload"] == workload and row["op"] == op and row["variant"] == variant:
            return row["ms"]
    return None


def _ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator <= 0:
        return "  -  "
    return f"{numerator / denominator:5.1f}"


def markdown(results):
    env = results.get("environment", {})
    lines = [f"GPU check: {env.get('device')} ({env.get('memory_gib')} GiB), CuPy "
             f"{env.get('cupy')}, CUDA runtime {env.get('cuda_runtime')}, {env.get('date')}",
             f"command: `{env.get('command')}`", "",
             "| workload | operator | variant | ms | repeats |", "|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['op']} | {r['variant']} | {r['ms']} | {r['repeats']} |"
              for r in results["timings"]]
    lines += ["", "| case | check | relative error | tolerance | ok |", "|---|---|---|---|---|"]
    lines += [f"| {c['case']} | {c['op']} | {c['error']} | {c['tol']} | {c['ok']} {c['detail']} |"
              for c in results["checks"]]
    lines += ["", "chooser decisions (GPU): " + json.dumps(results.get("chooser", {}))]
    return "\n".join(lines) + "\n"


def _speedups(results, variant):
    """{(workload, op): variant ms / factorized GPU ms} over every timed pair."""
    timings = results["timings"]
    out = {}
    for row in timings:
        if row["variant"] == FACT and row["op"] in OPERATORS:
            other = _lookup(timings, row["workload"], row["op"], variant)
            if other is not None and row["ms"] > 0:
                out[(row["workload"], row["op"])] = other / row["ms"]
    return out


def targets(results):
    """One PASS/MISS line per target of the GPU issue, with the measured numbers."""
    timings, lines = results["timings"], []
    checks, estimators, tests = results["checks"], results["estimators"], results.get("tests")
    correct = (bool(checks) and all(c["ok"] for c in checks) and bool(estimators)
               and all(e["ok"] for e in estimators)
               and (tests is None or tests.get("exit") == 0))
    lines.append(f"{'PASS' if correct else 'FAIL'} correctness: tests "
                 f"{tests['summary'] if tests else 'not run'}; operator checks "
                 f"{sum(c['ok'] for c in checks)}/{len(checks)}; estimators "
                 f"{sum(e['ok'] for e in estimators)}/{len(estimators)}")
    fused = {}
    for w in dict.fromkeys(r["workload"] for r in timings):
        f, u = _lookup(timings, w, "gramvec", FACT), _lookup(timings, w, "gramvec", UNFUSED)
        if f and u:
            fused[w] = u / f
    if fused:
        hits = [w for w, r in fused.items() if r >= 2.0]
        best, worst = max(fused, key=fused.get), min(fused, key=fused.get)
        verdict = "PASS" if len(hits) == len(fused) else ("PARTIAL" if hits else "MISS")
        lines.append(f"{verdict} fused gramvec >= 2x unfused chain: on {len(hits)}/{len(fused)} "
                     f"workloads; best {fused[best]:.2f}x ({best}), median "
                     f"{statistics.median(fused.values()):.2f}x, worst {fused[worst]:.2f}x "
                     f"({worst})")
    speedups = _speedups(results, MAT)
    if speedups:
        (w, op), best = max(speedups.items(), key=lambda item: item[1])
        lines.append(f"{'PASS' if best > PUBLISHED_SPEEDUP else 'MISS'} factorized vs "
                     f"materialized GPU beyond {PUBLISHED_SPEEDUP}x: best {best:.1f}x "
                     f"({w}, {op})")
        chosen = {key: r for key, r in speedups.items()
                  if isinstance(results["chooser"].get(key[0]), dict)
                  and results["chooser"][key[0]].get(key[1]) == "factorized"}
        if chosen:
            low = sorted(chosen.items(), key=lambda item: item[1])
            misses = [item for item in low if item[1] < 0.9]
            worst = ", ".join(f"{w} {op} {r:.2f}x" for (w, op), r in misses[:6])
            lines.append(f"{'PASS' if not misses else 'MISS'} never below 0.9x where the chooser "
                         f"factorizes: min {low[0][1]:.2f}x over {len(chosen)} chosen "
                         f"(workload, operator) pairs; {len(misses)} below 0.9x"
                         + (f": {worst}" if worst else ""))
        else:
            lines.append("MISS never below 0.9x where the chooser factorizes: no chooser "
                         "decisions recorded")
    replay = []
    for w in dict.fromkeys(r["workload"] for r in timings):
        for step in ("logreg step", "k-means step (K=8)"):
            eager, graphed = (_lookup(timings, w, step, v) for v in ("eager", "graph replay"))
            if eager and graphed and _small(w):
                replay.append((w, step, 1 - graphed / eager))
    if replay:
        hits = [r for r in replay if r[2] >= 0.30]
        lines.append(f"{'PASS' if len(hits) == len(replay) else 'MISS'} graph replay >= 30% "
                     "less per iteration on small problems: " + "; ".join(
                         f"{w} {step} {100 * less:.0f}%" for w, step, less in replay))
    return lines


def _small(workload):
    return workload.startswith("synthetic n=") or workload == "Hamlet Flights"


def summary(results):
    env = results.get("environment", {})
    out = ["", "=" * 30 + " ilargi GPU check summary " + "=" * 30,
           f"device {env.get('device')} ({env.get('memory_gib')} GiB) | CuPy {env.get('cupy')} | "
           f"CUDA runtime {env.get('cuda_runtime')} driver {env.get('cuda_driver')} | numpy "
           f"{env.get('numpy')} | {env.get('date')}",
           f"command: {env.get('command')}"]
    tests = results.get("tests")
    if tests:
        out.append(f"tests: {tests['summary']} [{tests['seconds']} s, exit {tests['exit']}]")
        out += [f"  {line[:160]}" for line in tests["failed"][:8]]
    checks = results["checks"]
    if checks:
        bad = [c for c in checks if not c["ok"]]
        worst = {tol: max((c["error"] for c in checks if c["tol"] == tol and c["error"] is not None),
                          default=None) for tol in (F64, F32)}
        out.append(f"operator checks: {len(checks) - len(bad)}/{len(checks)} within tolerance "
                   f"(max error float64 {worst[F64]}, float32 {worst[F32]})")
        out += [f"  FAIL {c['case']} / {c['op']}: {c['error']} {c['detail']}" for c in bad[:8]]
    if results["estimators"]:
        out.append("estimators (GPU vs CPU fit): " + " | ".join(
            f"{e['estimator']} {'ok' if e['ok'] else 'FAIL'} "
            f"{e['error'] if e['error'] is None else format(e['error'], '.1e')}"
            + (f" ({e['detail'][:70]})" if e["detail"] else "") for e in results["estimators"]))
    timings = results["timings"]
    workloads = list(dict.fromkeys(r["workload"] for r in timings))
    seg = [w for w in workloads if _lookup(timings, w, "segment sum m=1", "pieces") is not None]
    if seg:
        out.append("segment sum of the largest dimension, m=1 / m=8 in ms (pieces | atomic | csr):")
        for w in seg:
            cells = [f"{_lookup(timings, w, 'segment sum m=1', m)}/"
                     f"{_lookup(timings, w, 'segment sum m=8', m)}"
                     for m in ("pieces", "atomic", "csr")]
            out.append(f"  {w:26s} " + " | ".join(cells))
    for w in workloads:
        for step in ("logreg step", "k-means step (K=8)"):
            eager = _lookup(timings, w, step, "eager")
            replay = _lookup(timings, w, step, "graph replay")
            if eager and replay:
                out.append(f"graph replay vs eager, {w} {step}: {replay:.4f} vs {eager:.4f} ms/it "
                           f"({100 * (1 - replay / eager):.0f}% less)")
    lr = [w for w in workloads if _lookup(timings, w, "logreg 20 GD", FACT) is not None]
    if lr:
        out.append("logistic regression, 20 GD iterations, ms: fact GPU (operators) | graphed "
                   "kernels | eager kernels | mat GPU | fact CPU")
        for w in lr:
            cells = [_lookup(timings, w, "logreg 20 GD", v) for v in
                     (FACT, "graphed kernels", "eager kernels", MAT, "factorized CPU")]
            out.append(f"  {w:26s} " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells))
    head = f"  {'workload':26s} " + " ".join(f"{SHORT[o]:>5s}" for o in OPERATORS)
    op_rows = [w for w in workloads if _lookup(timings, w, "LMM m=1", FACT) is not None]
    if op_rows:
        out.append("factorized GPU ms (stacked passes):")
        out.append(head)
        for w in op_rows:
            out.append(f"  {w:26s} " + " ".join(
                f"{_lookup(timings, w, o, FACT) or 0:5.2f}"[:5] for o in OPERATORS))
        out.append("fused gramvec speed-up (unfused / fused): " + " | ".join(
            f"{w} {_ratio(_lookup(timings, w, 'gramvec', UNFUSED), _lookup(timings, w, 'gramvec', FACT)).strip()}"
            for w in op_rows))
        for title, variant in (("materialized GPU / factorized GPU (> 1: factorized faster; "
                                "* = chooser picks materialized)", MAT),
                               ("per-part GPU / stacked GPU (> 1: stacked passes faster)",
                                PER_PART),
                               ("factorized CPU / factorized GPU", "factorized CPU")):
            out += [title, head]
            for w in op_rows:
                if all(_lookup(timings, w, o, variant) is None for o in OPERATORS):
                    continue
                decisions = results["chooser"].get(w)
                cells = []
                for o in OPERATORS:
                    cell = _ratio(_lookup(timings, w, o, variant), _lookup(timings, w, o, FACT))
                    mark = (variant == MAT and isinstance(decisions, dict)
                            and decisions.get(o) == "materialized")
                    cells.append(cell[1:] + "*" if mark else cell)
                out.append(f"  {w:26s} " + " ".join(cells))
    if "sweep" in results:
        out.append(f"chooser GPU sweep: exit {results['sweep']['exit']}: "
                   f"{results['sweep']['last']}")
    out += [f"note: {n[:200]}" for n in results["notes"][-8:]]
    out.append("section errors: " + ("none" if not results["errors"] else ""))
    out += [f"  {e}" for e in results["errors"]]
    out.append(f"total {results.get('seconds')} s; full tables in gpu_check.md / gpu_check.json")
    out.append("-" * 30 + " targets (issue 5) " + "-" * 30)
    out += targets(results)
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------

def grid(args):
    """(label, builder kwargs, with CPU column, extras) of the synthetic workloads, in run order.

    The target workload (n_R = 1e5, TR = 20, FR = 4) first, then the three-dimension star; after
    the Hamlet datasets, the GPU-only n_R = 1e6 grid (fast); the rest of the n_R = 1e5 grid, with
    its slower CPU column, last.
    """
    def dense(n_r, tr, fr, with_cpu, extras):
        return (f"dense TR={tr} FR={fr} nR={n_r:.0e}", dict(n_r=n_r, tr=tr, fr=fr), with_cpu,
                extras)

    if args.quick:
        return ([dense(10_000, tr, fr, True, ("logistic", "segments", "per-part"))
                 for tr in (1, 20) for fr in (1, 4)]
                + [("star3 TR=20 FR=4 nR=1e+04", dict(n_r=10_000, tr=20, fr=4, n_dims=3), False,
                    ("logistic",))], [])
    pairs = [(tr, fr) for tr in (1, 5, 20) for fr in (1, 4)]
    first = [dense(100_000, 20, 4, True, ("logistic", "segments", "graph", "per-part")),
             ("star3 TR=20 FR=4 nR=2e+05", dict(n_r=200_000, tr=20, fr=4, n_dims=3), False,
              ("logistic", "segments", "per-part"))]
    rest = ([dense(1_000_000, tr, fr, args.full, ("logistic",)) for tr, fr in pairs]
            + [dense(100_000, tr, fr, True, ("logistic",) + (("segments",) if tr == 1 else ()))
               for tr, fr in pairs if (tr, fr) != (20, 4)])
    return first, rest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", type=Path, default=None,
                        help="folder holding hamlet/ (or the hamlet folder itself)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu_check_out")))
    parser.add_argument("--quick", action="store_true", help="small sizes, every section")
    parser.add_argument("--full", action="store_true", help="the whole grid, CPU at n_R = 1e6 too")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds for the whole run (default 165; --quick 90; --full 1800)")
    parser.add_argument("--test-timeout", type=float, default=None,
                        help="seconds for the pytest run (default 100; --quick 60)")
    parser.add_argument("--sweep", type=float, default=0.0, metavar="SECONDS",
                        help="also run the chooser's GPU sweep for SECONDS (default 0: no)")
    args = parser.parse_args(argv)
    if args.budget is None:
        args.budget = 90.0 if args.quick else (1800.0 if args.full else 165.0)
    if args.test_timeout is None:
        args.test_timeout = 60.0 if args.quick else 100.0
    args.out.mkdir(parents=True, exist_ok=True)
    run = Run(args)
    run.results["chooser"] = {}
    stub_folder = _stub_optional_imports()
    if stub_folder is not None:
        run.note("tqdm is not installed: a no-op stand-in lets ilargi.models import")

    run.section("environment", environment, run)
    if not args.skip_tests:
        run.section("GPU tests (pytest -m gpu)", gpu_tests, run, stub_folder, args.out)
    run.section("operator checks", operator_checks, run, need=10)
    run.section("estimator checks", estimator_checks, run, need=10)

    hamlet = hamlet_folder(args)
    if hamlet is None:
        run.note("Hamlet datasets not found (use --datasets DIR): Hamlet workloads skipped")
    small = run.section("small synthetic workload", synthetic_gpu, 1000 if not args.quick else 500,
                        5, 1, 20, 1, 0, run)
    if small is not None:
        run.section("graph replay vs eager: small synthetic", time_graph_replay, run,
                    "synthetic n=5e3", small, need=5)

    def workload(label, build, with_cpu, extras):
        nm = run.section(f"build {label}", build, need=8)
        if nm is None:
            return
        nm_cpu = run.section(f"operators {label}", time_workload, run, label, nm, with_cpu,
                             "per-part" in extras, need=8)
        if "logistic" in extras:
            run.section(f"logistic regression {label}", time_logistic, run, label, nm, nm_cpu,
                        need=6)
        if "segments" in extras:
            run.section(f"segment sums {label}", time_segment_sums, run, label, nm, need=4)
        if "graph" in extras:
            run.section(f"graph replay {label}", time_graph_replay, run, label, nm, 20, need=4)
        del nm, nm_cpu
        _free_pool()

    first, rest = grid(args)
    for label, kwargs, with_cpu, extras in first:
        workload(label, lambda: synthetic_gpu(run=run, **kwargs), with_cpu, extras)
    if hamlet is not None:
        for name in ("Flights", "Walmart", "Yelp"):
            folder = hamlet / name
            if folder.exists():
                workload(f"Hamlet {name}", lambda: load_hamlet_dataset(folder, run)[0].to("gpu"),
                         True, ("logistic", "segments", "per-part")
                         + (("graph",) if name == "Flights" else ()))
    for label, kwargs, with_cpu, extras in rest:
        workload(label, lambda: synthetic_gpu(run=run, **kwargs), with_cpu, extras)
    if not args.full and not args.quick:
        run.note("factorized CPU column measured at n_R = 1e5 only (use --full for 1e6)")
    if args.sweep > 0:
        run.section("chooser GPU sweep", chooser_sweep, run, args.sweep, args.out)

    run.results["seconds"] = round(time.perf_counter() - run.start, 1)
    try:
        (args.out / "gpu_check.json").write_text(json.dumps(run.results, indent=1, default=str))
        (args.out / "gpu_check.md").write_text(markdown(run.results))
    except Exception:
        traceback.print_exc()
    print(summary(run.results), flush=True)


if __name__ == "__main__":
    main()
