"""The GPU check of Ilargi, in one run on a CUDA machine: correctness first, then the timed tables.

    python benchmarks/gpu_check.py --out $OUT/gpu_check.md            # the GPU issue's run
    python benchmarks/gpu_check.py --quick --out $OUT/gpu_check.md    # a short smoke run
    python benchmarks/gpu_check.py --only operators gramvec           # some sections only
    python benchmarks/gpu_check.py --device cpu --quick               # a dry run of the driver

ilargi must be importable (``pip install -e ".[gpu,dev]"``, or ``PYTHONPATH=.`` in the checkout).
Sections, in run order (``--only`` picks some):

* ``tests`` -- ``pytest -m gpu`` over the test suite, in a subprocess. FAIL unless every GPU test
  ran and passed: a skipped GPU test (CuPy missing, no device) counts as a FAIL, never a pass.
* ``estimators`` -- every public estimator fitted on the GPU against the same fit on the CPU
  (no GPU test fits the estimators yet).
* ``graphs`` -- per-iteration time of the CUDA-graph steps (:mod:`ilargi.backend.gpu.graphs`):
  replay vs the same kernels launched eagerly.
* ``operators`` -- every operator factorized vs materialized on the GPU, with the chooser's plan
  for each: the calls of :func:`ilargi.calibration.runs.operator_calls` (also what the chooser's
  sweep times), timed by ``time_pair``, the join timed apart by ``time_join``. The materialized
  sums and TᵀT are also timed in their cuBLAS forms (GEMV, SYRK) and the fastest form counts, so
  the factorized plan is compared against the best materialized one.
* ``gramvec`` -- the fused gram-vector pass against the unfused operator chain (the same call with
  ``gpu_fused_gramvec=False``), on the operator workloads.
* ``chooser`` -- the held-out evaluation of ``benchmarks/bench_chooser.py`` (Hamlet, Santoku,
  TPC-H), run on the GPU.

Workloads: dense stars from :func:`ilargi.datasets.make_star` (the target TR=20 FR=4, the
three-dimension star with 1/10 of the materialized bytes, the TR × FR grid) and the Hamlet
datasets from :func:`ilargi.datasets.load_hamlet`, float64, moved to the device. Every time is a
median of side-by-side rounds after a warm-up, alternating which call goes first, with a device
synchronize inside each timed region. A section that fails is reported and the run goes on; once
``--budget`` seconds are spent, the rest is reported as skipped. The report (``--out``, markdown,
also printed) ends with one PASS/MISS/FAIL line per target of the GPU issue.

Not here: the chooser's GPU sweep, which re-trains the GPU model, runs on its own
(``python -m ilargi.calibration sweep --device gpu --out gpu.csv --budget-seconds 120``).
"""

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path

import bench_chooser
import numpy as np
from _timing import markdown_table

import ilargi
from ilargi.backend import namespace_of
from ilargi.calibration.runs import operator_calls, time_join, time_pair
from ilargi.chooser import choose
from ilargi.chooser.metrics import evaluate
from ilargi.chooser.workload import Workload
from ilargi.datasets import load_hamlet, make_star

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("tests", "estimators", "graphs", "operators", "gramvec", "chooser")
GPU_ONLY = ("graphs", "gramvec")  # what a --device cpu dry run skips
OPERATORS = bench_chooser.OPERATORS
PUBLISHED_SPEEDUP = 8.9  # Ilargi's published "up to 8.9x" of factorized over materialized (GPU)
F64 = 1e-9
# How operator_calls (and so the chooser's sweep) writes the materialized sums and TᵀT.
SWEEP_FORMS = {"rowsums": "T.sum(axis=1)", "colsums": "T.sum(axis=0)", "crossprod": "T.T @ T"}


# ---------------------------------------------------------------------------------------------
# Bookkeeping: the time budget, sections that never stop the run, what they found.


class Check:
    """What one run found, its time budget, and sections that report a failure and go on."""

    def __init__(self, args):
        self.args = args
        self.start = time.perf_counter()
        self.device_problem = None  # why the GPU cannot be used, or None
        self.sync = None
        self.environment, self.tests, self.estimators = {}, None, []
        self.operators, self.gramvec, self.graphs = [], [], []
        self.chooser = None
        self.notes, self.errors = [], []

    def left(self):
        return self.args.budget - (time.perf_counter() - self.start)

    def wants(self, section):
        return section in self.args.only

    def note(self, text):
        print(text, flush=True)
        self.notes.append(text)

    def section(self, name, fn, *args):
        """fn(*args), or a note why not (budget spent); a failure is reported, never raised."""
        if self.left() <= 0:
            self.note(f"{name}: skipped, the time budget ({self.args.budget:.0f} s) is spent")
            return None
        print(f"\n=== {name} ({self.left():.0f} s left)", flush=True)
        try:
            return fn(*args)
        except Exception as exc:  # report and go on: the later sections still run
            traceback.print_exc()
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            return None
        finally:
            self.save()

    def save(self):
        """Write the report so far (a run killed from outside still leaves one)."""
        try:
            self.args.out.parent.mkdir(parents=True, exist_ok=True)
            self.args.out.write_text(report(self))
        except Exception:  # a report that cannot be written must not end the run
            traceback.print_exc()


def gpu_problem():
    """Why CuPy cannot run kernels here (None when it can)."""
    try:
        import cupy as cp

        cp.cuda.runtime.getDeviceCount()
        cp.zeros(1).sum().item()
    except Exception as exc:  # ImportError, CUDARuntimeError, ...
        return f"{type(exc).__name__}: {exc}"[:200]
    return None


def environment(check):
    info = {
        "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpu_count": os.cpu_count(),
        "device": check.args.device,
    }
    try:
        info["commit"] = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
            ).stdout.strip()
            or None
        )
    except OSError:
        info["commit"] = None
    if check.args.device == "gpu" and check.device_problem is None:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"]
        free, total = cp.cuda.Device().mem_info
        info.update(
            gpu=name.decode() if isinstance(name, bytes) else str(name),
            memory_gib=round(total / 2**30, 1),
            free_gib=round(free / 2**30, 1),
            cupy=cp.__version__,
            cuda_runtime=cp.cuda.runtime.runtimeGetVersion(),
            cuda_driver=cp.cuda.runtime.driverGetVersion(),
        )
    check.environment = info
    print(info, flush=True)


# ---------------------------------------------------------------------------------------------
# Correctness.


def gpu_tests(check):
    """Run ``pytest -m gpu``; the verdict is PASS only if every GPU test ran and passed."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "gpu_tests.xml"
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-q",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
        ]
        began = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=REPO, capture_output=True, text=True, timeout=check.args.test_timeout
            )
            output, code = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout or ""
            output = output.decode(errors="replace") if isinstance(output, bytes) else output
            output, code = output + f"\nTIMEOUT after {check.args.test_timeout:.0f} s", "timeout"
        counts = _junit_counts(report) if report.exists() else None
    result = {
        "exit": code,
        "seconds": round(time.perf_counter() - began, 1),
        "tail": output.splitlines()[-40:],
    }
    if counts is not None:
        result.update(counts)
    result["verdict"], result["why"] = _test_verdict(code, counts, check.args.test_timeout)
    check.tests = result
    print("\n".join(result["tail"][-15:]), flush=True)
    print(f"GPU tests: {result['verdict']} ({result['why']})", flush=True)


def _junit_counts(path):
    """Counts, failing tests and skip reasons of a pytest JUnit XML report."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {
        key: sum(int(s.get(key, 0)) for s in suites)
        for key in ("tests", "failures", "errors", "skipped")
    }
    cases = list(root.iter("testcase"))
    counts["failed"] = [
        f"{c.get('classname')}::{c.get('name')}"
        for c in cases
        if c.find("failure") is not None or c.find("error") is not None
    ]
    counts["skip_reasons"] = sorted(
        {c.find("skipped").get("message", "")[:200] for c in cases if c.find("skipped") is not None}
    )
    return counts


def _test_verdict(code, counts, timeout):
    if code == "timeout":
        return "FAIL", f"timed out after {timeout:.0f} s"
    if counts is None:
        return "FAIL", f"pytest exited {code} without a report"
    total, skipped = counts["tests"], counts["skipped"]
    bad = counts["failures"] + counts["errors"]
    passed = total - skipped - bad
    if total == 0:
        return "FAIL", "no GPU test was collected"
    if bad:
        return "FAIL", f"{bad} failed, {passed} passed, {skipped} skipped"
    if skipped:
        reason = counts["skip_reasons"][0] if counts["skip_reasons"] else "no reason given"
        return "FAIL", f"{skipped} of {total} GPU tests skipped, so not checked ({reason})"
    if code != 0:
        return "FAIL", f"{passed} passed but pytest exited {code}"
    return "PASS", f"{passed} passed"


def _host(x):
    """A NumPy copy of an estimator attribute (CuPy array, NumPy array or scalar)."""
    return x.get() if type(x).__module__.startswith("cupy") else np.asarray(x)


def _relative_error(actual, expected):
    actual, expected = np.asarray(actual, float), np.asarray(expected, float)
    if actual.shape != expected.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(actual - expected)) / max(1.0, float(np.max(np.abs(expected)))))


def estimator_checks(check):
    """Each public estimator fitted on the device against its CPU fit (same data, same seed)."""
    import ilargi.models as models

    nm, y = make_star(n_fact=2000, tuple_ratio=13, feature_ratio=1.25, d_fact=4, random_state=2)
    cpu = abs(nm)  # non-negative, for GNMF
    on_device = cpu.to(check.args.device)
    binary = (y > np.median(y)).astype(np.float64)
    specs = [  # name, estimator, target, fitted attributes, tolerance
        ("StandardScaler", lambda: models.StandardScaler(), None, ("mean_", "var_", "scale_"), F64),
        (
            "LinearRegression",
            lambda: models.LinearRegression(plan="factorized"),
            y,
            ("coef_", "intercept_"),
            F64,
        ),
        (
            "Ridge",
            lambda: models.Ridge(alpha=1.0, plan="factorized"),
            y,
            ("coef_", "intercept_"),
            F64,
        ),
        (
            "LogisticRegression gd",
            lambda: models.LogisticRegression(solver="gd", max_iter=20, tol=0.0, plan="factorized"),
            binary,
            ("coef_", "intercept_"),
            F64,
        ),
        # An optimizer's stopping point: the fits agree to its tolerance, not to rounding.
        (
            "LogisticRegression lbfgs",
            lambda: models.LogisticRegression(plan="factorized"),
            binary,
            ("coef_", "intercept_"),
            1e-6,
        ),
        (
            "KMeans",
            lambda: models.KMeans(
                n_clusters=4, n_init=1, max_iter=20, random_state=0, plan="factorized"
            ),
            None,
            ("cluster_centers_",),
            F64,
        ),
        (
            "GNMF",
            lambda: models.GNMF(n_components=3, max_iter=30, random_state=0, plan="factorized"),
            None,
            ("components_",),
            F64,
        ),
    ]
    for name, make, target, attributes, tol in specs:
        entry = {"estimator": name, "ok": False, "error": None, "tol": tol, "detail": ""}
        try:
            reference, fitted = make().fit(cpu, target), make().fit(on_device, target)
            entry["error"] = max(
                _relative_error(_host(getattr(fitted, a)), _host(getattr(reference, a)))
                for a in attributes
            )
            entry["ok"] = entry["error"] <= tol
        except Exception as exc:  # one estimator's failure is its row, not the section's end
            entry["detail"] = f"{type(exc).__name__}: {exc}"[:200]
        check.estimators.append(entry)
        print(
            f"{name}: {'ok' if entry['ok'] else 'FAIL'} error={entry['error']} {entry['detail']}",
            flush=True,
        )


# ---------------------------------------------------------------------------------------------
# Workloads.


def star(n_r, tuple_ratio, feature_ratio, n_dims=1):
    """(label, builder) of a dense float64 star: fact TR·n_R × 20, n_dims dimensions n_R × 20·FR."""
    label = (
        f"{'star3' if n_dims == 3 else 'dense'} TR={tuple_ratio} FR={feature_ratio} nR={n_r:.0e}"
    )
    return label, lambda: make_star(
        n_fact=tuple_ratio * n_r,
        tuple_ratio=tuple_ratio,
        feature_ratio=feature_ratio,
        n_dims=n_dims,
        d_fact=20,
        target=None,
        random_state=0,
    )[0]


def hamlet(root, name):
    folder = root / "hamlet" / name
    return f"Hamlet {name}", (lambda: load_hamlet(folder)[0]) if folder.exists() else None


def workloads(args, root):
    """(first, rest): (label, builder or None, sections, graph iterations) in run order.

    First the small star (graph replay, where launches dominate), the target star, the
    three-dimension star and the Hamlet datasets; the chooser's evaluation runs between them and
    the rest of the TR × FR grid, which the budget cuts first.
    """
    timed = ("operators", "gramvec")
    if args.quick:
        n_rs, pairs, star3, names = (10_000,), ((20, 4), (1, 1)), 10_000, ("Flights",)
    else:
        pairs = tuple((tr, fr) for tr in (1, 5, 20) for fr in (1, 4))
        n_rs, star3, names = args.n_r, 200_000, ("Flights", "Walmart", "Yelp")
    first = [
        (*star(1000 if not args.quick else 500, 5, 1), ("graphs",), 100),
        (*star(n_rs[0], 20, 4), timed + ("graphs",), 20),
        (*star(star3, 20, 4, n_dims=3), timed, 0),
    ]
    first += [
        (*hamlet(root, name), timed + (("graphs",) if name == "Flights" else ()), 20)
        for name in names
    ]
    rest = [
        (*star(n_r, tr, fr), timed, 0)
        for n_r in n_rs
        for tr, fr in pairs
        if (n_r, tr, fr) != (n_rs[0], 20, 4)
    ]
    return first, rest


def run_workload(check, label, build, sections, iterations):
    sections = [
        s for s in sections if check.wants(s) and not (check.args.device == "cpu" and s in GPU_ONLY)
    ]
    if not sections:
        return
    if build is None:
        check.note(f"{label}: skipped, its dataset folder was not found (--datasets)")
        return
    nm = check.section(f"build {label}", lambda: build().to(check.args.device))
    if nm is None:
        return
    if "graphs" in sections:
        check.section(f"graph replay {label}", time_graphs, check, label, nm, iterations)
    if "gramvec" in sections:
        check.section(f"fused gramvec {label}", time_gramvec, check, label, nm)
    if "operators" in sections:
        check.section(f"operators {label}", time_operators, check, label, nm)
    del nm
    _free_device_memory(check)


def _free_device_memory(check):
    if check.args.device == "gpu":
        import cupy as cp

        cp.get_default_memory_pool().free_all_blocks()


# ---------------------------------------------------------------------------------------------
# Timed tables.


def fastest_forms(kind, T, xp):
    """Materialized forms equivalent to operator_calls' own, timed too (the fastest counts).

    On a dense table, sums as GEMVs (CuPy's reduction over the rows of a C-order matrix is much
    slower than cuBLAS) and TᵀT by SYRK (one triangle: half the FLOPs of a GEMM), into a C-order
    result (an F-order one would make CuPy copy T first).
    """
    n, d = T.shape
    dense = isinstance(T, xp.ndarray)
    if kind == "rowsums":
        ones_d = xp.ones(d)
        return {"T·1": lambda: T @ ones_d}
    if kind == "colsums":
        ones_n = xp.ones(n)
        forms = {"Tᵀ·1": lambda: T.T @ ones_n}
        if dense:
            forms["1ᵀ·T"] = lambda: ones_n @ T
        return forms
    if kind == "crossprod" and dense and xp.__name__ == "cupy":
        from cupy import cublas

        return {"SYRK": lambda: cublas.syrk("T", T, out=xp.zeros((d, d), dtype=T.dtype))}
    return {}


def time_operators(check, label, nm):
    """Every operator factorized vs materialized, side by side, with the chooser's plan."""
    try:
        t_join, T = time_join(nm, sync=check.sync)
    except MemoryError as exc:  # DeviceMemoryError too: the join does not fit on the device
        check.note(f"{label}: no materialized table ({type(exc).__name__}: {exc})"[:250])
        return
    xp, rng = namespace_of(nm.parts[0].source), np.random.default_rng(0)
    for kind, m in OPERATORS:
        op = kind + (f" m={m}" if m > 1 else "")
        plan = choose(nm, kind, m=m)
        fact, mat = operator_calls(nm, T, Workload(kind, m), rng)
        best = None
        forms = {SWEEP_FORMS.get(kind, "-"): mat, **fastest_forms(kind, T, xp)}
        for form, call in forms.items():
            try:
                t_fact, t_mat, _ = time_pair(fact, call, sync=check.sync)
            except Exception as exc:  # a form this CuPy/cuBLAS does not offer
                check.note(f"{label} {op} materialized {form}: {type(exc).__name__}: {exc}"[:200])
                continue
            if best is None or t_mat < best[2]:
                best = (form, t_fact, t_mat)
        if best is None:
            continue
        form, t_fact, t_mat = best
        check.operators.append(
            {
                "workload": label,
                "op": op,
                "fact": t_fact,
                "mat": t_mat,
                "form": form,
                "join": t_join,
                "factorize": plan.factorize,
            }
        )
        print(
            f"{label:26s} {op:10s} fact {t_fact * 1e3:8.3f} ms  mat {t_mat * 1e3:8.3f} ms "
            f"({form})  {t_mat / t_fact:6.2f}x  chooser {'F' if plan.factorize else 'M'}",
            flush=True,
        )
    del T


def time_gramvec(check, label, nm):
    """α·Tᵀ(v⊙(T·y)) by the fused stacked pass vs the operator chain (FUSED_GRAMVEC off)."""
    call, _ = operator_calls(nm, None, Workload("gramvec"), np.random.default_rng(1))

    def with_fused(value):
        def run():
            with ilargi.config_context(gpu_fused_gramvec=value):
                call()

        return run

    t_fused, t_chain, _ = time_pair(with_fused(True), with_fused(False), sync=check.sync)
    check.gramvec.append({"workload": label, "fused": t_fused, "chain": t_chain})
    print(
        f"{label}: fused {t_fused * 1e3:.3f} ms, chain {t_chain * 1e3:.3f} ms, "
        f"{t_chain / t_fused:.2f}x",
        flush=True,
    )


def step_inputs(nm):
    """What the graphed steps take of a NormalizedMatrix T: parts, n, d, scale, shift."""
    if nm.transposed:
        raise ValueError("the graphed steps train on T, not a transposed view")
    n, d = nm.shape
    return nm.parts, n, d, nm.scale, nm.shift


def time_graphs(check, label, nm, iterations):
    """Per-iteration time of each graphed step: replay vs the same kernels launched eagerly."""
    import cupy as cp

    from ilargi.backend.gpu.graphs import KMeansLloyd, LogisticGD

    parts, n, d, scale, shift = step_inputs(nm)
    y = (cp.random.RandomState(5).random_sample(n) < 0.5).astype(cp.float64)
    start = nm[np.arange(8) * (n // 8)].toarray()
    steps = {
        "logistic GD step": lambda graph: LogisticGD(
            parts, n, d, scale, shift, y, 1e-3, graph=graph
        ),
        "k-means step K=8": lambda graph: KMeansLloyd(
            parts, n, d, scale, shift, start, graph=graph
        ),
    }
    for step, make in steps.items():
        eager, graphed = make(False), make(True)
        fallback = None if graphed.graphed else graphed.fallback_reason
        if fallback:
            check.note(f"{label} {step}: capture failed, replay ran eagerly: {fallback}")
        t_eager, t_replay, _ = time_pair(
            lambda: eager.run(iterations), lambda: graphed.run(iterations), sync=check.sync
        )
        check.graphs.append(
            {
                "workload": label,
                "step": step,
                "n": n,
                "iterations": iterations,
                "eager": t_eager / iterations,
                "replay": t_replay / iterations,
                "fallback": fallback,
            }
        )
        print(
            f"{label} {step}: eager {t_eager / iterations * 1e3:.4f} ms/it, replay "
            f"{t_replay / iterations * 1e3:.4f} ms/it",
            flush=True,
        )


def chooser_evaluation(check, root):
    """bench_chooser's held-out evaluation, every dataset moved to the device first."""
    recorder, rng = bench_chooser.Recorder(), np.random.default_rng(0)
    check.chooser = recorder
    tpch_sf = check.args.tpch_sf if check.args.tpch_sf else (0.01 if check.args.quick else 0.1)
    for name, load in bench_chooser.datasets(root, tpch_sf):
        if check.left() <= 0:
            check.note(f"chooser {name}: skipped, the time budget is spent")
            continue
        try:
            nm, y = load()
            bench_chooser.run_dataset(
                name,
                nm.to(check.args.device),
                np.asarray(y, dtype=np.float64),
                recorder,
                rng,
                check.args.quick,
                sync=check.sync,
            )
        except Exception as exc:  # one dataset's failure (e.g. TPC-H not generated) is a note
            traceback.print_exc()
            check.errors.append(f"chooser {name}: {type(exc).__name__}: {exc}"[:300])
        _free_device_memory(check)


# ---------------------------------------------------------------------------------------------
# The report.


def targets(check):
    """One PASS/MISS/FAIL line per target of the GPU issue, with the measured number."""
    lines = []
    tests, estimators = check.tests, check.estimators
    correct = (
        tests is not None
        and tests["verdict"] == "PASS"
        and bool(estimators)
        and all(e["ok"] for e in estimators)
    )
    found = f"{tests['verdict']}, {tests['why']}" if tests else "not run"
    fitted = (
        f"{sum(e['ok'] for e in estimators)}/{len(estimators)} within tolerance of the CPU fit"
        if estimators
        else "not run"
    )
    lines.append(
        f"{'PASS' if correct else 'FAIL'} correctness: GPU tests {found}; estimators {fitted}"
    )
    speedups = [(r["mat"] / r["fact"], r) for r in check.operators]
    if speedups:
        best, row = max(speedups, key=lambda item: item[0])
        lines.append(
            f"{'PASS' if best > PUBLISHED_SPEEDUP else 'MISS'} factorized over "
            f"materialized beyond {PUBLISHED_SPEEDUP}x: best {best:.1f}x "
            f"({row['workload']}, {row['op']})"
        )
        chosen = sorted((s, r) for s, r in speedups if r["factorize"])
        low = [f"{r['workload']} {r['op']} {s:.2f}x" for s, r in chosen if s < 0.9]
        lines.append(
            f"{'PASS' if chosen and not low else 'MISS'} never below 0.9x where the "
            f"chooser factorizes: "
            + (
                f"min {chosen[0][0]:.2f}x over {len(chosen)} chosen pairs"
                if chosen
                else "none chosen"
            )
            + (f"; below: {', '.join(low[:6])}" if low else "")
        )
    if check.gramvec:
        ratios = {r["workload"]: r["chain"] / r["fused"] for r in check.gramvec}
        hits = [w for w, ratio in ratios.items() if ratio >= 2.0]
        verdict = "PASS" if len(hits) == len(ratios) else ("PARTIAL" if hits else "MISS")
        lines.append(
            f"{verdict} fused gramvec >= 2x the unfused chain: {len(hits)}/{len(ratios)} "
            f"workloads; median {statistics.median(ratios.values()):.2f}x, min "
            f"{min(ratios.values()):.2f}x, max {max(ratios.values()):.2f}x"
        )
    small = [r for r in check.graphs if r["n"] <= 100_000]
    if small:
        saved = [(1 - r["replay"] / r["eager"], r) for r in small]
        lines.append(
            f"{'PASS' if all(s >= 0.3 for s, _ in saved) else 'MISS'} graph replay "
            ">= 30% less per iteration on small problems (steps called directly, not "
            "through the estimators yet): "
            + "; ".join(f"{r['workload']} {r['step']} {100 * s:.0f}%" for s, r in saved)
        )
    if check.chooser is not None and check.chooser.rows:
        rows = check.chooser.rows
        score = evaluate(
            [r["t_fact"] for r in rows],
            [r["t_mat"] for r in rows],
            [r["iterative"]["chooser"] for r in rows],
        )
        ok = score["accuracy"] >= 0.95 and score["time_saved"] >= 0.9
        lines.append(
            f"{'PASS' if ok else 'MISS'} GPU chooser on held-out data: accuracy "
            f"{score['accuracy']:.3f} (>= 0.95), time saved {score['time_saved']:.3f} "
            f"(>= 0.9) over {len(rows)} workloads"
        )
    return lines


def report(check):
    env = check.environment
    out = [
        "# Ilargi GPU check",
        "",
        f"{env.get('gpu', 'no GPU')} ({env.get('memory_gib', '-')} GiB), CuPy "
        f"{env.get('cupy', '-')}, CUDA runtime {env.get('cuda_runtime', '-')}, driver "
        f"{env.get('cuda_driver', '-')}; NumPy {env.get('numpy')}, Python {env.get('python')}, "
        f"{env.get('cpu_count')} CPUs; commit {env.get('commit')}; {env.get('date')}; "
        f"{time.perf_counter() - check.start:.0f} s",
        "",
        f"Command: `{env.get('command')}`",
        "",
        "## Targets",
        "",
    ] + [f"* {line}" for line in targets(check)]
    out += ["", "## Correctness", ""]
    tests = check.tests
    if tests is None:
        out.append("GPU tests: not run")
    else:
        out.append(
            f"GPU tests (`pytest -m gpu`): **{tests['verdict']}**, {tests['why']} "
            f"[{tests['seconds']} s, exit {tests['exit']}]"
        )
        out += [f"* failed: `{name}`" for name in tests.get("failed", [])[:20]]
        out += [f"* skipped: {reason}" for reason in tests.get("skip_reasons", [])[:5]]
        if tests["verdict"] != "PASS":
            out += ["", "```", *tests["tail"], "```"]
    if check.estimators:
        out += [
            "",
            markdown_table(
                ["estimator", "relative error of the device fit", "tolerance", "ok"],
                [
                    [
                        e["estimator"],
                        "-" if e["error"] is None else f"{e['error']:.1e}",
                        e["tol"],
                        ("ok" if e["ok"] else "FAIL") + (f" {e['detail']}" if e["detail"] else ""),
                    ]
                    for e in check.estimators
                ],
            ),
        ]
    if check.graphs:
        out += [
            "",
            "## CUDA-graph replay vs eager kernels (per iteration)",
            "",
            markdown_table(
                ["workload", "step", "iterations", "eager ms/it", "replay ms/it", "less", "note"],
                [
                    [
                        r["workload"],
                        r["step"],
                        r["iterations"],
                        f"{r['eager'] * 1e3:.4f}",
                        f"{r['replay'] * 1e3:.4f}",
                        f"{100 * (1 - r['replay'] / r['eager']):.0f}%",
                        f"capture failed: {r['fallback']}" if r["fallback"] else "",
                    ]
                    for r in check.graphs
                ],
            ),
        ]
    if check.operators:
        out += [
            "",
            "## Operators: factorized vs materialized",
            "",
            "speed-up = materialized / factorized (> 1: factorized faster); the join is "
            "timed apart; chooser: F factorize, M materialize.",
            "",
            markdown_table(
                [
                    "workload",
                    "operator",
                    "factorized ms",
                    "materialized ms",
                    "materialized form",
                    "speed-up",
                    "chooser",
                    "join ms",
                ],
                [
                    [
                        r["workload"],
                        r["op"],
                        f"{r['fact'] * 1e3:.3f}",
                        f"{r['mat'] * 1e3:.3f}",
                        r["form"],
                        f"{r['mat'] / r['fact']:.2f}",
                        "F" if r["factorize"] else "M",
                        f"{r['join'] * 1e3:.1f}",
                    ]
                    for r in check.operators
                ],
            ),
        ]
    if check.gramvec:
        out += [
            "",
            "## Fused gramvec vs the unfused operator chain",
            "",
            markdown_table(
                ["workload", "fused ms", "chain ms", "speed-up"],
                [
                    [
                        r["workload"],
                        f"{r['fused'] * 1e3:.3f}",
                        f"{r['chain'] * 1e3:.3f}",
                        f"{r['chain'] / r['fused']:.2f}",
                    ]
                    for r in check.gramvec
                ],
            ),
        ]
    if check.chooser is not None and check.chooser.rows:
        out += ["", "## Chooser on held-out data", "", check.chooser.detail()]
        for case, title in (
            ("iterative", "Iterative (join amortized)"),
            ("one_shot", "One-shot (join charged)"),
        ):
            out += ["", title, "", check.chooser.summary(case)]
    if check.notes or check.errors:
        out += ["", "## Notes and section errors", ""]
        out += [f"* {note}" for note in check.notes] + [f"* ERROR {e}" for e in check.errors]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------


def datasets_root(args):
    """The folder holding hamlet/ and santoku/: --datasets, the ``datasets_dir`` setting
    ($ILARGI_DATASETS), or shared/datasets inside or next to the checkout."""
    candidates = [
        args.datasets,
        ilargi.get_config()["datasets_dir"],
        REPO / "shared" / "datasets",
        bench_chooser.DEFAULT_DATASETS,
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return bench_chooser.DEFAULT_DATASETS


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    out_default = (
        Path(os.environ["OUT"]) / "gpu_check.md" if os.environ.get("OUT") else Path("gpu_check.md")
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=out_default,
        help="markdown report to write (default $OUT/gpu_check.md)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small stars (n_R = 1e4), Hamlet Flights only, a short chooser run",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        help="sections to run (default: all)",
    )
    parser.add_argument(
        "--datasets", type=Path, default=None, help="folder holding hamlet/ and santoku/"
    )
    parser.add_argument(
        "--n-r",
        type=float,
        nargs="+",
        default=[1e5, 1e6],
        help="dimension rows of the star grid (default 1e5 1e6)",
    )
    parser.add_argument(
        "--tpch-sf",
        type=float,
        default=None,
        help="TPC-H scale factor of the chooser run (default 0.1; --quick 0.01)",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for the whole run, tests included (default 540; --quick 240)",
    )
    parser.add_argument(
        "--test-timeout",
        type=float,
        default=None,
        help="seconds for the pytest run (default 240; --quick 180)",
    )
    parser.add_argument(
        "--device",
        choices=("gpu", "cpu"),
        default="gpu",
        help="cpu: a dry run of the timed tables on the CPU backend (the "
        "GPU-only sections are skipped)",
    )
    args = parser.parse_args(argv)
    args.n_r = [int(n) for n in args.n_r]
    args.budget = args.budget or (240.0 if args.quick else 540.0)
    args.test_timeout = args.test_timeout or (180.0 if args.quick else 240.0)
    check = Check(args)
    root = datasets_root(args)

    if args.device == "gpu":
        check.device_problem = gpu_problem()
        if check.device_problem is None:
            import cupy as cp

            check.sync = cp.cuda.Device().synchronize
    check.section("environment", environment, check)
    if check.wants("tests"):
        check.section("GPU tests", gpu_tests, check)
    if check.device_problem is not None:
        check.note(f"no usable GPU ({check.device_problem}): estimators and timed sections skipped")
    else:
        if check.wants("estimators"):
            check.section("estimators", estimator_checks, check)
        first, rest = workloads(args, root)
        for workload in first:
            run_workload(check, *workload)
        if check.wants("chooser"):
            check.section("chooser held-out evaluation", chooser_evaluation, check, root)
        for workload in rest:
            run_workload(check, *workload)
    check.save()
    print("\n" + report(check), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
