"""Reliability catalogue (issue 12, matrices and estimators): bad and edge inputs vs NumPy/scikit-learn.

Each case runs an operation on a NormalizedMatrix (or an ilargi estimator on one) and a reference on
the same data as a plain array: NumPy on the materialized table, scikit-learn (or ilargi's estimator
on the array, which scikit-learn validates), or the matrix's own answer before the caller edited its
inputs. The outcome is one of

* **same as reference** -- the same values (NaN and inf cells included), or both refuse;
* **refused with a clear error** -- the reference answers, ilargi raises a ValueError / TypeError /
  IndexError / MemoryError whose message names what is wrong (the case's key words);
* **unhelpful error** -- an error of those types whose message does not say what is wrong (no key
  word, the repr of an array, over 1,000 characters);
* **silent difference** -- a value that differs from the reference, or a value where the reference
  refuses (e.g. a model fitted on NaN), or a caller's array modified;
* **crash** -- any other exception (AttributeError, KeyError, a MemoryError of a plan the chooser
  picked, ...).

Classes (issue 12): 1 NaN/inf reaching estimators, 2 index vectors owned by the matrix, 5 array
semantics, 7 plans that do not fit in memory, 8 scikit-learn model selection, 9 error messages.
Classes (issue 43): S the scikit-learn contract (every check of ``check_estimator`` for every
estimator, KMeans' ``init``, ``set_output``, ``threads()`` blocks in two Python threads, the memory
guard under cgroup and ``ulimit`` limits), D DuckDB sources changed after the merge, E encoding and
arguments (categoricals of numbers, ``columns=`` as one label, complex columns, booleans and strings
in one column, column labels that a save cannot load back), N numerics at the edges of float64 (sums
and means of huge columns, var/std of huge values, a large mean with a small spread, subnormals,
``keepdims``/``out=``, min/max/sum/var over row and column selections that leave a source
without columns or rows; a case whose NumPy answer depends on NumPy's order of summation, its
partial sums overflowing, or whose variance is more than 1e-9 off the one about the correctly
rounded mean, is left out: its reference would be an accident of NumPy's rounding).

The script uses only the public API that existed before the fixes, so the same file runs on an older
checkout for a "before" count: ``cd OLD_CHECKOUT && python PATH/TO/reliability_matrices.py``. Large
allocations fail fast: the address space is limited to 32 GiB (a plan that tries to materialize a
298 GiB table raises MemoryError instead of swapping).

Usage: ``python benchmarks/reliability_matrices.py [--details] [--json FILE]``
"""

import argparse
import json
import os
import pickle
import re
import resource
import sys
import time
import traceback
import warnings
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

# The checkout in the working directory, not an installed copy: the same file measures any checkout.
sys.path.insert(0, os.getcwd())

OUTCOMES = (
    "same as reference",
    "refused with a clear error",
    "unhelpful error",
    "silent difference",
    "crash",
)
CLEAR_TYPES = (ValueError, TypeError, IndexError, MemoryError)
MAX_MESSAGE = 1000  # scikit-learn's own NaN message, with its advice, is ~600 characters


class Refused(Exception):
    """Raised by a reference that refuses too (re-raises the reference library's error)."""


@dataclass
class Case:
    klass: str
    name: str
    run: object  # () -> value; the ilargi side
    reference: object  # () -> value; the NumPy / scikit-learn side
    words: str = r"."  # a clear error's message matches this (case-insensitive)
    compare: object = None  # (got, expected) -> bool; default: close, NaN/inf exact
    crash_on_memory: bool = False  # a MemoryError here is a plan that should not have been chosen
    outcome: str = ""
    detail: str = ""
    extra: dict = field(default_factory=dict)


def dense(x):
    if hasattr(x, "materialize"):
        x = x.materialize()
    if sp.issparse(x):
        x = x.toarray()
    return np.asarray(x)


def close(got, expected, rtol=1e-9):
    """Same shape and dtype kind, the same NaN and ±inf cells, finite cells within rtol."""
    if isinstance(expected, (bool, np.bool_)) or isinstance(got, (bool, np.bool_)):
        return type(got) in (bool, np.bool_) and bool(got) == bool(expected)
    got, expected = dense(got), dense(expected)
    if got.shape != expected.shape or (got.dtype == bool) != (expected.dtype == bool):
        return False
    if expected.dtype == bool:
        return bool(np.array_equal(got, expected))
    if np.iscomplexobj(got) or np.iscomplexobj(expected):  # both parts, never a cast
        return close(np.real(got), np.real(expected), rtol) and close(
            np.imag(got), np.imag(expected), rtol
        )
    got, expected = got.astype(float), expected.astype(float)
    if not np.array_equal(np.isnan(got), np.isnan(expected)):
        return False
    infinite = np.isinf(expected)
    if not np.array_equal(np.isinf(got), infinite) or not np.array_equal(
        got[infinite], expected[infinite]
    ):
        return False
    finite = np.isfinite(expected)
    if not finite.any():
        return True
    scale = max(1.0, float(np.abs(expected[finite]).max()))
    return float(np.abs(got[finite] - expected[finite]).max()) <= rtol * scale


def judge(case):
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            expected, reference_error = case.reference(), None
        except Exception as error:  # the reference refuses
            expected, reference_error = None, error
        try:
            got, error = case.run(), None
        except Exception as caught:
            got, error = None, caught
    if error is not None:
        message = f"{type(error).__name__}: {error}"
        case.detail = message[:200].replace("\n", " ")
        if isinstance(error, MemoryError) and case.crash_on_memory:
            return "crash"
        if not isinstance(error, CLEAR_TYPES):
            case.detail += " | " + traceback.format_exception(error)[-2].strip()[:150]
            return "crash"
        text = str(error)
        clear = (
            len(text) <= MAX_MESSAGE
            and "array([" not in text
            and re.search(case.words, text, re.IGNORECASE | re.DOTALL) is not None
        )
        if not clear:
            return "unhelpful error"
        return "same as reference" if reference_error is not None else "refused with a clear error"
    if reference_error is not None:
        case.detail = (
            f"returned a value where the reference raised {type(reference_error).__name__}"
        )
        return "silent difference"
    try:
        same = (case.compare or close)(got, expected)
    except Exception as comparison_error:  # e.g. shapes that cannot be compared
        same, case.detail = False, f"comparison failed: {comparison_error}"
    if not same:
        case.detail = case.detail or "values differ from the reference"
        return "silent difference"
    return "same as reference"


# ---------------------------------------------------------------------------------------------
# Data


def build(kind="star", sparse=False, index_dtype=np.int64, n=40, seed=0, left_fraction=0.2):
    """(nm, table, caller arrays) for a join kind: star (inner FK), left (misses), union (two
    sources stacked, -1 elsewhere), snowflake (a dimension through another)."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(seed)
    fact = rng.uniform(0.5, 2.0, (n, 2))
    dim = rng.uniform(0.5, 2.0, (5, 3))
    dim[0, 1] = 0.0
    as_source = (lambda a: sp.csr_array(a)) if sparse else (lambda a: a)
    if kind in ("star", "left"):
        fk = rng.integers(0, 5, n)
        if kind == "left":
            fk[rng.random(n) < left_fraction] = -1
            fk[0] = -1
        fk = fk.astype(index_dtype) if (kind == "star" or np.dtype(index_dtype).kind == "i") else fk
        rows, cols = [None, fk], [[0, 1], [2, 3, 4]]
        sources, shape = [fact, as_source(dim)], (n, 5)
    elif kind == "union":
        half = n // 2
        top = np.where(np.arange(n) < half, np.arange(n), -1).astype(np.int64)
        bottom = np.where(np.arange(n) >= half, np.arange(n) - half, -1).astype(np.int64)
        sources = [
            rng.uniform(0.5, 2.0, (half, 3)),
            as_source(rng.uniform(0.5, 2.0, (n - half, 3))),
        ]
        # Column 3 belongs to no source: NULL in every row.
        rows, cols, shape = [top, bottom], [[0, 1, 2], [0, 1, 2]], (n, 4)
    else:  # snowflake: orders -> customers
        orders = rng.integers(0, 8, n).astype(index_dtype)
        customer_of_order = rng.integers(0, 3, 8)
        customers = customer_of_order[orders.astype(np.int64)].astype(index_dtype)
        sources = [fact, as_source(rng.uniform(0.5, 2.0, (8, 2))), rng.uniform(0.5, 2.0, (3, 2))]
        rows, cols, shape = [None, orders, customers], [[0, 1], [2, 3], [4, 5]], (n, 6)
    nm = NormalizedMatrix.from_parts(sources, rows, cols, shape)
    return nm, nm.toarray(), (sources, rows, cols)


def classification(n=300, seed=0):
    from ilargi.datasets import make_star

    return make_star(n, tuple_ratio=10, d_fact=3, target="logistic", noise=0.1, random_state=seed)


# ---------------------------------------------------------------------------------------------
# Class 1: NaN/inf reaching the estimators


def estimator_factories():
    from ilargi.models import (
        GNMF,
        KMeans,
        LinearRegression,
        LogisticRegression,
        Ridge,
        StandardScaler,
    )

    return {
        "LinearRegression": lambda: LinearRegression(plan="factorized"),
        "Ridge": lambda: Ridge(plan="factorized"),
        "LogisticRegression": lambda: LogisticRegression(plan="factorized"),
        "KMeans": lambda: KMeans(2, random_state=0, plan="factorized"),
        "GNMF": lambda: GNMF(2, random_state=0, max_iter=10, plan="factorized"),
        "StandardScaler": lambda: StandardScaler(),
    }


NONFINITE = {
    "log (NULL cells -> -inf)": lambda t: np.log(t),
    "sqrt of negatives": lambda t: np.sqrt(t - 1.0),
    "division by a zero column": lambda t: t / np.r_[1.0, 0.0, np.ones(t.shape[1] - 2)],
    "reciprocal (NULL cells)": lambda t: 1.0 / t,
    "overflowing scale": lambda t: t * 1e308 * 10.0,
}


def sklearn_fit_reference(name, table, y):
    """What scikit-learn's estimator does with the same array (it refuses NaN/inf)."""
    import sklearn.cluster
    import sklearn.linear_model
    import sklearn.preprocessing

    reference = {
        "LinearRegression": sklearn.linear_model.LinearRegression(),
        "Ridge": sklearn.linear_model.Ridge(),
        "LogisticRegression": sklearn.linear_model.LogisticRegression(),
        "KMeans": sklearn.cluster.KMeans(2, n_init=1, random_state=0),
        "GNMF": sklearn.decomposition.NMF(2, init="random", random_state=0, max_iter=10),
        "StandardScaler": sklearn.preprocessing.StandardScaler(),
    }[name]
    if name == "StandardScaler" and np.isnan(table).any():
        raise Refused(
            "ilargi's scaler refuses NaN as its array path does (scikit-learn's skips it)"
        )
    return reference.fit(table, y)


def class1_cases():
    import sklearn.decomposition  # noqa: F401  (NMF for the GNMF reference)

    cases = []
    factories = estimator_factories()
    for kind, sparse in (("left", False), ("left", True), ("union", False)):
        nm, table, _ = build(kind, sparse=sparse)
        y = (table.sum(axis=1) > np.median(table.sum(axis=1))).astype(int)
        for transform_name, transform in NONFINITE.items():
            for name, factory in factories.items():

                def run(nm=nm, transform=transform, factory=factory, y=y):
                    model = factory().fit(transform(nm), y)
                    return _fitted_values(model)

                def reference(table=table, transform=transform, name=name, y=y):
                    data = transform(table)
                    if np.isfinite(data).all():
                        raise AssertionError("transform left the table finite")
                    return _fitted_values(sklearn_fit_reference(name, data, y))

                cases.append(
                    Case(
                        "1",
                        f"{name}.fit({transform_name}), {kind}{' sparse' if sparse else ''}",
                        run,
                        reference,
                        words=r"Input X contains (NaN|infinity)|not finite.*materialize",
                        compare=lambda got, expected: False,
                    )
                )
    # Every entry point of a fitted estimator.
    nm, table, _ = build("left")
    y = (table.sum(axis=1) > np.median(table.sum(axis=1))).astype(int)
    for name, factory in factories.items():
        fitted = factory().fit(nm + 0.1, y)
        for method in ("predict", "transform", "score", "predict_proba", "fit_transform"):
            if not hasattr(fitted, method):
                continue

            def run(fitted=fitted, method=method, nm=nm, y=y):
                args = (
                    (np.log(nm), y)
                    if method == "score"
                    and hasattr(fitted, "predict")
                    and not hasattr(fitted, "cluster_centers_")
                    else (np.log(nm),)
                )
                return _fitted_values(getattr(fitted, method)(*args))

            def reference(table=table):
                raise Refused(f"scikit-learn refuses -inf in X: {np.isinf(np.log(table)).any()}")

            cases.append(
                Case(
                    "1",
                    f"{name}.{method}(log with NULL cells)",
                    run,
                    reference,
                    words=r"Input X contains (NaN|infinity)",
                    compare=lambda got, expected: False,
                )
            )
    return cases


def _fitted_values(model):
    if hasattr(model, "coef_"):
        return np.asarray(model.coef_)
    if hasattr(model, "cluster_centers_"):
        return model.cluster_centers_
    if hasattr(model, "components_"):
        return model.components_
    if hasattr(model, "scale_"):
        return model.scale_
    return dense(model)


# ---------------------------------------------------------------------------------------------
# Class 2: index vectors owned by the matrix


def class2_cases():
    cases = []
    edits = {
        "in-range permutation": lambda r: r.__setitem__(slice(None), r[::-1].copy()),
        "one in-range value": lambda r: r.__setitem__(1, 0 if r[1] != 0 else 1),
        "out-of-range value": lambda r: r.__setitem__(2, min(np.iinfo(r.dtype).max, 10**6)),
        "-1 written (signed)": lambda r: (
            r.__setitem__(3, -1) if r.dtype.kind == "i" else r.__setitem__(3, 0)
        ),
    }
    observed = {
        "sum(axis=0)": lambda m: m.sum(axis=0),
        "T @ x": lambda m: m @ np.arange(1.0, 6.0),
        "toarray": lambda m: m.toarray(),
        "T.T @ y": lambda m: m.T @ np.ones(m.shape[0]),
    }
    for kind in ("star", "left"):
        for index_dtype in (np.int32, np.int64, np.uint16):
            for edit_name, edit in edits.items():
                for what, observe in observed.items():
                    if kind == "left" and np.dtype(index_dtype).kind == "u":
                        continue  # an unsigned vector cannot hold -1

                    def run(kind=kind, index_dtype=index_dtype, edit=edit, observe=observe):
                        nm, _, (_, rows, _) = build(kind, index_dtype=index_dtype)
                        observe(nm)  # caches built from the index vector before the edit
                        edit(rows[1])
                        return observe(nm)

                    def reference(kind=kind, index_dtype=index_dtype, observe=observe):
                        nm, _, _ = build(kind, index_dtype=index_dtype)
                        return observe(nm)

                    cases.append(
                        Case(
                            "2",
                            f"{edit_name} in a {np.dtype(index_dtype).name} FK "
                            f"after use, {kind}: {what}",
                            run,
                            reference,
                        )
                    )
    for what, observe in observed.items():

        def run(observe=observe):
            nm, _, (_, _, cols) = build("star")
            cols[1] = np.asarray(cols[1])
            from ilargi import NormalizedMatrix

            sources, rows, _ = build("star")[2]
            mapping = np.array([2, 3, 4])
            nm = NormalizedMatrix.from_parts(sources, rows, [[0, 1], mapping], (40, 5))
            observe(nm)
            mapping[:] = [4, 3, 2]
            return observe(nm)

        def reference(observe=observe):
            return observe(build("star")[0])

        cases.append(Case("2", f"mapping edited after use: {what}", run, reference))
    for what, observe in observed.items():

        def run(observe=observe):
            from ilargi import NormalizedMatrix

            nm, _, (sources, _, _) = build("snowflake")
            meta = nm.metadata
            meta.rows = [None if r is None else np.array(r) for r in meta.rows]
            back = NormalizedMatrix.from_metadata(meta, sources)
            observe(back)
            meta.rows[1][:] = 0
            return observe(back)

        def reference(observe=observe):
            return observe(build("snowflake")[0])

        cases.append(
            Case("2", f"metadata index vector edited after from_metadata: {what}", run, reference)
        )

    # Inputs never mutated: the caller's sources, index vectors and operands after each operation.
    def untouched(operation):
        from ilargi.models import LogisticRegression, StandardScaler  # noqa: F401

        nm, _, inputs = build("left")
        snapshot = pickle.dumps(inputs)
        operands = [np.linspace(-1, 1, 5), np.linspace(0, 1, 40), np.ones(40)]
        before = [o.copy() for o in operands]
        operation(nm, *operands)
        return pickle.dumps(inputs) == snapshot and all(
            np.array_equal(a, b) for a, b in zip(operands, before)
        )

    for name, operation in (
        ("T @ x", lambda nm, x, y, w: nm @ x),
        ("T.T @ y", lambda nm, x, y, w: nm.T @ y),
        ("crossprod(w)", lambda nm, x, y, w: nm.crossprod(w)),
        ("gramvec(x, v)", lambda nm, x, y, w: nm.gramvec(x, v=w)),
        ("dot(x, out)", lambda nm, x, y, w: nm.dot(x, out=np.empty(40))),
        ("np.log, then @", lambda nm, x, y, w: np.log(nm) @ x),
        (
            "(nm - mean) / std, then materialize",
            lambda nm, x, y, w: ((nm - nm.mean(axis=0)) / nm.std(axis=0)).materialize(),
        ),
        ("row selection, then T.T @ y", lambda nm, x, y, w: nm[::2].T @ y[::2]),
        (
            "StandardScaler + LogisticRegression fit",
            lambda nm, x, y, w: (
                __import__("ilargi")
                .models.LogisticRegression(plan="factorized")
                .fit(
                    __import__("ilargi").models.StandardScaler().fit_transform(nm),
                    (y > 0.5).astype(int),
                    sample_weight=w,
                )
            ),
        ),
    ):
        cases.append(
            Case(
                "2",
                f"inputs unchanged by {name}",
                lambda operation=operation: untouched(operation),
                lambda: True,
                compare=lambda g, e: g is True,
            )
        )

    def run_pickle():
        nm, _, _ = build("snowflake")
        back = pickle.loads(pickle.dumps(nm[::2]))
        return back.toarray(), back.parts[1].indicator is not None

    def reference_pickle():
        return build("snowflake")[1][::2], True

    cases.append(
        Case(
            "2",
            "pickle round trip of a row selection",
            run_pickle,
            reference_pickle,
            compare=lambda g, e: close(g[0], e[0]) and g[1] == e[1],
        )
    )
    return cases


# ---------------------------------------------------------------------------------------------
# Class 5: array semantics


def class5_cases():
    import operator

    cases = []
    nm, table, _ = build("left")
    per_column = table[3]
    for op_name in ("eq", "ne", "lt", "le", "gt", "ge"):
        op = getattr(operator, op_name)
        for operand_name, operand in (
            ("scalar 0.5", 0.5),
            ("scalar 0 (NULL cells)", 0.0),
            ("per-column vector", per_column),
            ("n x d array", table),
        ):
            cases.append(
                Case(
                    "5",
                    f"nm {op_name} {operand_name}",
                    lambda op=op, operand=operand: op(nm, operand),
                    lambda op=op, operand=operand: op(table, operand),
                    words="compar|materialize",
                )
            )
    for ufunc in (np.equal, np.less, np.greater_equal, np.isnan, np.isinf, np.isfinite, np.signbit):
        args = (0.5,) if ufunc.nin == 2 else ()
        cases.append(
            Case(
                "5",
                f"np.{ufunc.__name__}(nm{', 0.5' if args else ''})",
                lambda ufunc=ufunc, args=args: ufunc(nm, *args),
                lambda ufunc=ufunc, args=args: ufunc(table, *args),
                words="materialize",
            )
        )
    for name, matrix, ref in (
        ("bool(nm) of 40 x 5", nm, table),
        ("bool(nm[:0])", nm[:0], table[:0]),
        ("bool(nm[[0]][:, [0]])", nm[[0]][:, [0]], table[[0]][:, [0]]),
        ("bool(nm.T)", nm.T, table.T),
    ):
        cases.append(
            Case("5", name, lambda m=matrix: bool(m), lambda r=ref: bool(r), words="ambiguous")
        )
    for key_name, key in (
        ("[[0, 1, 2], [0, 1, 2]]", ([0, 1, 2], [0, 1, 2])),
        ("[[3, 0], [4, -1]]", ([3, 0], [4, -1])),
        ("np.ix_([1, 2], [0, 3])", np.ix_([1, 2], [0, 3])),
        ("[rows (2, 1), cols (3,)]", (np.array([[0], [5]]), np.array([1, 2, 4]))),
        ("[mask, [0, 1, ...]]", (np.arange(40) % 10 == 0, [0, 1, 2, 3])),
        ("[[0, 1], [0, 1, 2]] (no broadcast)", ([0, 1], [0, 1, 2])),
        ("[7, [0, 4]]", (7, [0, 4])),
        ("[[7, 8], 2]", ([7, 8], 2)),
        ("[..., 2]", (Ellipsis, 2)),
        ("[None]", (None,)),
        ("[True]", True),
        ("[0.5]", 0.5),
        ("[40]", 40),
        ("[-41]", -41),
    ):
        cases.append(
            Case(
                "5",
                f"nm{key_name}",
                lambda key=key: nm[key],
                lambda key=key: table[key],
                words="index|bounds|broadcast|axis|None|boolean|integer",
            )
        )
    for view_name, view, ref in (
        ("nm.T", nm.T, table.T),
        ("(nm * 2 + 1)", nm * 2.0 + 1.0, table * 2.0 + 1.0),
    ):
        cases.append(
            Case(
                "5",
                f"{view_name}[[0, 1], [1, 0]]",
                lambda v=view: v[[0, 1], [1, 0]],
                lambda r=ref: r[[0, 1], [1, 0]],
            )
        )
    complex_cases = {
        "nm * 1j": (lambda m: m * 1j, lambda t: t * 1j),
        "nm + complex vector": (lambda m: m + np.ones(5) * 1j, lambda t: t + np.ones(5) * 1j),
        "np.multiply(nm, 1j)": (lambda m: np.multiply(m, 1j), lambda t: t * 1j),
        "nm @ complex x": (lambda m: m @ (np.ones(5) * 1j), lambda t: t @ (np.ones(5) * 1j)),
        "complex y @ nm": (lambda m: (np.ones(40) * 1j) @ m, lambda t: (np.ones(40) * 1j) @ t),
        "crossprod(complex w)": (
            lambda m: m.crossprod(np.ones(40) + 1j),
            lambda t: t.T @ (t * (np.ones(40) + 1j)[:, None]),
        ),
        "np.power(nm - 1, 0.5 + 0j)": (
            lambda m: np.power(m - 1.0, 0.5 + 0j),
            lambda t: np.power(t - 1.0, 0.5 + 0j),
        ),
    }
    for name, (run, reference) in complex_cases.items():
        cases.append(
            Case(
                "5",
                name,
                lambda run=run: run(nm),
                lambda reference=reference: reference(table),
                words="complex",
            )
        )
    for sparse in (False, True):

        def run_complex_source(sparse=sparse):
            from ilargi import NormalizedMatrix

            source = np.array([[1.0 + 2.0j], [3.0 + 0.0j]])
            source = sp.csr_array(source) if sparse else source
            return NormalizedMatrix.from_parts([source], [None], [[0]], (2, 1)).toarray()

        cases.append(
            Case(
                "5",
                f"complex {'sparse ' if sparse else ''}source",
                run_complex_source,
                lambda: np.array([[1.0 + 2.0j], [3.0 + 0.0j]]),
                words="complex",
            )
        )
    # NaN/inf through the affine state and the operators, as on the materialized table.
    operators = {
        "materialize": (lambda m: m.materialize(), lambda t: t),
        "T @ x": (
            lambda m: m @ np.arange(1.0, m.shape[1] + 1),
            lambda t: t @ np.arange(1.0, t.shape[1] + 1),
        ),
        "T.T @ y": (
            lambda m: m.T @ np.linspace(-1, 1, m.shape[0]),
            lambda t: t.T @ np.linspace(-1, 1, t.shape[0]),
        ),
        "sum(axis=0)": (lambda m: m.sum(axis=0), lambda t: t.sum(axis=0)),
        "crossprod": (lambda m: m.crossprod(), lambda t: t.T @ t),
    }
    transforms = {
        "t / c, c with a zero": lambda t: t / np.r_[1.0, 0.0, 2.0, np.ones(t.shape[1] - 3)],
        "t / 1e-320": lambda t: t / 1e-320,
        "t * 1e308 * 10": lambda t: t * 1e308 * 10.0,
        "log": lambda t: np.log(t),
        "(t - 1.5) ** 0.5": lambda t: (t - 1.5) ** 0.5,
    }
    for kind in ("left", "union"):
        nm_k, table_k, _ = build(kind)
        for t_name, f in transforms.items():
            for op_name, (op, ref_op) in operators.items():
                cases.append(
                    Case(
                        "5",
                        f"({t_name}).{op_name}, {kind}",
                        lambda f=f, op=op, m=nm_k: op(f(m)),
                        lambda f=f, ref_op=ref_op, t=table_k: ref_op(f(t)),
                        words="NaN|inf",
                    )
                )
    rng = np.random.default_rng(0)
    for name, run, reference in (
        (
            "T @ x with inf in x",
            lambda: nm @ np.r_[np.inf, np.ones(4)],
            lambda: table @ np.r_[np.inf, np.ones(4)],
        ),
        (
            "T.T @ y with NaN in y",
            lambda: nm.T @ np.r_[np.nan, rng.random(39)],
            lambda: table.T @ np.r_[np.nan, rng.random(39)],
        ),
        (
            "y @ T with -inf in y",
            lambda: np.r_[-np.inf, np.ones(39)] @ nm,
            lambda: np.r_[-np.inf, np.ones(39)] @ table,
        ),
        (
            "crossprod(w with inf)",
            lambda: nm.crossprod(np.r_[np.inf, np.ones(39)]),
            lambda: table.T @ (table * np.r_[np.inf, np.ones(39)][:, None]),
        ),
        (
            "gramvec(x with NaN)",
            lambda: nm.gramvec(np.r_[np.nan, np.ones(4)]),
            lambda: table.T @ (table @ np.r_[np.nan, np.ones(4)]),
        ),
    ):
        cases.append(Case("5", name, run, reference))
    return cases


# ---------------------------------------------------------------------------------------------
# Class 7: plans that do not fit in memory


def one_hot_table(levels, n):
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(0)
    fk = rng.integers(0, levels, n)
    numeric = rng.standard_normal((n, 1))
    nm = NormalizedMatrix.from_parts(
        [numeric, sp.identity(levels, format="csr")],
        [None, fk],
        [[0], np.arange(1, levels + 1)],
        (n, levels + 1),
    )
    return nm, (numeric[:, 0] + fk % 2 > 0.5).astype(int)


def class7_cases():
    from ilargi.models import LinearRegression, LogisticRegression, StandardScaler

    cases = []
    for levels in (100_000, 200_000):
        nm, y = one_hot_table(levels, levels)
        scaled = StandardScaler().fit(nm).transform(nm)
        for data_name, X in (
            ("one-hot + numeric", nm),
            ("standardized (dense when built)", scaled),
        ):
            for model_name, factory in (
                ("LogisticRegression(max_iter=3)", lambda: LogisticRegression(max_iter=3)),
                (
                    "LinearRegression(solver='lsqr', max_iter=3)",
                    lambda: LinearRegression(solver="lsqr", max_iter=3),
                ),
            ):

                def run(X=X, factory=factory, y=y):
                    return factory().fit(X, y).coef_.shape

                def reference(X=X, factory=factory, y=y):  # the factorized plan always fits
                    model = factory()
                    model.set_params(plan="factorized")
                    return model.fit(X, y).coef_.shape

                cases.append(
                    Case(
                        "7",
                        f"{model_name} plan='auto', {levels:,}-level {data_name}",
                        run,
                        reference,
                        crash_on_memory=True,
                        compare=lambda g, e: g == e,
                    )
                )
        cases.append(
            Case(
                "7",
                f"matmul(plan='auto'), {levels:,}-level standardized",
                lambda X=scaled: X.matmul(np.ones(X.shape[1]), plan="auto")[:3],
                lambda X=scaled: X.matmul(np.ones(X.shape[1]), plan="factorized")[:3],
                crash_on_memory=True,
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------
# Class 8: scikit-learn model selection


def class8_cases():
    from sklearn.model_selection import GridSearchCV, KFold, cross_val_score, cross_validate
    from sklearn.pipeline import Pipeline
    from sklearn.utils import _safe_indexing

    from ilargi.models import KMeans, LogisticRegression, Ridge, StandardScaler

    X, y = classification()
    table = X.toarray()
    cases = []

    def logistic():
        return LogisticRegression(plan="factorized", tol=1e-10, max_iter=1000)

    def pipe():
        return Pipeline([("scale", StandardScaler()), ("model", logistic())])

    cv = KFold(3, shuffle=True, random_state=0)
    for name, call in (
        (
            "cross_val_score(LogisticRegression)",
            lambda data: cross_val_score(logistic(), data, y, cv=cv, error_score="raise"),
        ),
        (
            "cross_val_score(Ridge)",
            lambda data: cross_val_score(
                Ridge(plan="factorized"), data, y.astype(float), cv=cv, error_score="raise"
            ),
        ),
        (
            "cross_val_score(KMeans from given centers)",
            lambda data: cross_val_score(
                KMeans(2, init=table[:2], plan="factorized"), data, cv=cv, error_score="raise"
            ),
        ),
        (
            "GridSearchCV(Pipeline(StandardScaler, LogisticRegression))",
            lambda data: (
                GridSearchCV(pipe(), {"model__C": [0.1, 1.0]}, cv=3, error_score="raise")
                .fit(data, y)
                .cv_results_["mean_test_score"]
            ),
        ),
        (
            "cross_validate(Pipeline, n_jobs=2)",
            lambda data: cross_validate(pipe(), data, y, cv=3, n_jobs=2, error_score="raise")[
                "test_score"
            ],
        ),
        (
            "cross_val_score(Pipeline) with stratified folds",
            lambda data: cross_val_score(pipe(), data, y, cv=4, error_score="raise"),
        ),
    ):
        cases.append(
            Case(
                "8",
                name,
                lambda call=call: call(X),
                lambda call=call: call(table),
                compare=lambda g, e: close(g, e, rtol=1e-9),
            )
        )
    idx = np.array([5, 0, 17, 17, 299])
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64):
        key = (
            idx.astype(dtype)
            if np.iinfo(dtype).max >= 299
            else np.array([5, 0, 17, 17, 99], dtype=dtype)
        )
        cases.append(
            Case(
                "8",
                f"_safe_indexing(X, {np.dtype(dtype).name} indices)",
                lambda key=key: _safe_indexing(X, key),
                lambda key=key: _safe_indexing(table, key),
            )
        )
    mask = np.arange(300) % 7 == 0
    for name, key in (
        ("X[idx, ...]", (idx, Ellipsis)),
        ("X[idx, :]", (idx, slice(None))),
        ("X[list]", list(idx)),
        ("X[mask]", mask),
        ("X[list of bools]", list(mask)),
        ("X[mask, ...]", (mask, Ellipsis)),
        ("X[:, idx_small]", (slice(None), [0, 2])),
    ):
        cases.append(Case("8", name, lambda key=key: X[key], lambda key=key: table[key]))
    cases.append(
        Case(
            "8",
            "pickle keeps parts of one table sharing one indicator",
            lambda: _shared_after_pickle(),
            lambda: True,
            compare=lambda g, e: g == e,
        )
    )
    return cases


def _shared_after_pickle():
    from ilargi import NormalizedMatrix

    fk = np.array([0, 1, 1, 0, 2])
    nm = NormalizedMatrix.from_parts(
        [np.ones((5, 1)), np.eye(3), np.ones((3, 2))],
        [None, fk, fk.copy()],
        [[0], [1, 2, 3], [4, 5]],
        (5, 6),
    )
    back = pickle.loads(pickle.dumps(nm))
    return back.parts[1].indicator is back.parts[2].indicator


# ---------------------------------------------------------------------------------------------
# Class 9: error messages


def class9_cases():
    from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge

    nm, table, _ = build("star")
    y = (table.sum(axis=1) > np.median(table.sum(axis=1))).astype(int)
    buffer = np.empty(table.shape)

    def refuse():
        raise Refused("the reference refuses too")

    cases = []
    for name, run, words in (
        ("KMeans(n_clusters=2.5).fit", lambda: KMeans(n_clusters=2.5).fit(nm), "n_clusters"),
        ("KMeans(n_clusters=0).fit", lambda: KMeans(n_clusters=0).fit(nm), "n_clusters"),
        ("KMeans(init=3 x 4 array).fit", lambda: KMeans(2, init=np.zeros((3, 4))).fit(nm), "init"),
        ("GNMF(n_components=1.5).fit", lambda: GNMF(n_components=1.5).fit(nm), "n_components"),
        ("Ridge(alpha=-1).fit", lambda: Ridge(alpha=-1).fit(nm, y), "alpha"),
        ("LogisticRegression(C=0).fit", lambda: LogisticRegression(C=0).fit(nm, y), r"\bC\b"),
        (
            "LinearRegression(plan='fast').fit",
            lambda: LinearRegression(plan="fast").fit(nm, y),
            "plan",
        ),
        (
            "fit with y of the wrong length",
            lambda: LinearRegression().fit(nm, y[:-1]),
            "rows|samples",
        ),
        ("gramvec(v of the wrong length)", lambda: nm.gramvec(np.ones(5), v=np.ones(3)), r"\bv\b"),
        ("gramvec(y of the wrong length)", lambda: nm.gramvec(np.ones(3)), r"\by\b"),
        (
            "gramvec(z of the wrong shape)",
            lambda: nm.gramvec(np.ones(5), beta=1.0, z=np.ones(4)),
            r"\bz\b",
        ),
        ("gramvec(alpha='2')", lambda: nm.gramvec(np.ones(5), alpha="2"), "alpha"),
        ("crossprod(w of the wrong length)", lambda: nm.crossprod(np.ones(3)), r"\bw\b"),
        ("np.add(nm, 1, out=buf)", lambda: np.add(nm, 1, out=buffer), "out"),
        ("np.add.reduce(nm)", lambda: np.add.reduce(nm), "reduce"),
        ("np.add(nm, 'a')", lambda: np.add(nm, "a"), "str|operand"),
        ("nm @ wrong length", lambda: nm @ np.ones(4), "dimension|shape"),
        ("nm.dot(x, out=wrong shape)", lambda: nm.dot(np.ones(5), out=np.empty(3)), "out"),
        ("nm[:, [0, 9]]", lambda: nm[:, [0, 9]], "bounds|column"),
        ("nm[[0.5]]", lambda: nm[[0.5]], "integer"),
        ("from_parts: rows out of range", lambda: _from_parts_bad_rows(), "range|rows"),
        ("from_parts: float index vector", lambda: _from_parts_float_rows(), "integer|rows"),
    ):
        cases.append(Case("9", name, run, refuse, words=words))
    return cases


def _from_parts_bad_rows():
    from ilargi import NormalizedMatrix

    return NormalizedMatrix.from_parts([np.ones((3, 1))], [np.array([0, 5])], [[0]], (2, 1))


def _from_parts_float_rows():
    from ilargi import NormalizedMatrix

    return NormalizedMatrix.from_parts([np.ones((3, 1))], [np.array([0.0, 1.0])], [[0]], (2, 1))


# ---------------------------------------------------------------------------------------------
# Class S: the scikit-learn contract


def classS_cases():
    cases = []
    cases += _estimator_check_cases()
    cases += _kmeans_init_cases()
    cases += _set_output_cases()
    cases += _thread_cases()
    cases += _memory_guard_cases()
    return cases


def _estimator_check_cases():
    """Every check of scikit-learn's check_estimator, for every estimator at its defaults (and a
    GNMF stopped early): a failed check is a broken contract (a silent difference)."""
    from sklearn.utils.estimator_checks import check_estimator

    from ilargi.models import (
        GNMF,
        KMeans,
        LinearRegression,
        LogisticRegression,
        Ridge,
        StandardScaler,
    )

    cases = []
    os.environ.setdefault("SCIPY_ARRAY_API", "1")  # runs the array API check instead of skipping
    for estimator in (
        LinearRegression(),
        Ridge(),
        LogisticRegression(),
        KMeans(),
        GNMF(),
        GNMF(n_components=3, max_iter=5),
        StandardScaler(),
        StandardScaler(with_mean=False),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = check_estimator(estimator, on_fail=None)
        for result in results:

            def run(result=result):
                return (
                    result["status"]
                    if result["status"] != "failed"
                    else f"failed: {str(result['exception'])[:150]}"
                )

            cases.append(
                Case(
                    "S",
                    f"check_estimator({result['estimator']!r}): {result['check_name']}",
                    run,
                    lambda: "passed",
                    compare=lambda got, expected: got in ("passed", "skipped"),
                )
            )
    return cases


def _kmeans_init_cases():
    """A given init is checked as X is: the reference is scikit-learn's KMeans."""
    import sklearn.cluster

    from ilargi.models import KMeans

    X = np.random.default_rng(0).random((30, 2))
    cases = []
    for name, init in (
        ("NaN", [[np.nan, 0.0], [1.0, 1.0]]),
        ("inf", [[np.inf, 0.0], [1.0, 1.0]]),
        ("-inf", [[0.0, -np.inf], [1.0, 1.0]]),
        ("a string", [[0.0, 0.0], [1.0, "a"]]),
        ("3 x 2", np.zeros((3, 2))),
        ("1-D", np.zeros(2)),
        ("ragged", [[0.0], [1.0, 2.0]]),
        ("2 x 3", np.zeros((2, 3))),
    ):

        def reference(init=init):
            try:
                return (
                    sklearn.cluster.KMeans(2, init=np.asarray(init, dtype=float), n_init=1)
                    .fit(X)
                    .cluster_centers_
                )
            except Exception as error:
                raise Refused(str(error)) from error

        cases.append(
            Case(
                "S",
                f"KMeans(init={name}).fit",
                lambda init=init: KMeans(2, init=init).fit(X).cluster_centers_,
                reference,
                words=r"\binit\b",
            )
        )
    return cases


def _set_output_cases():
    """set_output(transform="pandas") (and scikit-learn's global config): a DataFrame of the
    default output's values, named by get_feature_names_out, for arrays, frames and matrices."""
    import pandas as pd
    import sklearn

    from ilargi.datasets import make_star
    from ilargi.models import GNMF, KMeans, StandardScaler

    frame = pd.DataFrame(np.random.default_rng(0).random((30, 3)), columns=["a", "b", "c"])
    nm, _ = make_star(40, tuple_ratio=4, d_fact=2, target=None, random_state=0)
    inputs = {"array": frame.to_numpy(), "DataFrame": frame, "NormalizedMatrix": abs(nm)}
    cases = []
    for factory in (
        lambda: GNMF(2, random_state=0),
        lambda: KMeans(2, random_state=0),
        lambda: StandardScaler(),
        lambda: StandardScaler(with_mean=False),
    ):
        for input_name, X in inputs.items():
            for method in ("fit_transform", "fit(X).transform"):
                for how in ("set_output", "config_context"):

                    def call(model, X=X, method=method):
                        return (
                            model.fit_transform(X)
                            if method == "fit_transform"
                            else model.fit(X).transform(X)
                        )

                    def run(factory=factory, X=X, call=call, how=how):
                        model = factory()
                        if how == "set_output":
                            out = call(model.set_output(transform="pandas"))
                        else:
                            with sklearn.config_context(transform_output="pandas"):
                                out = call(model)
                        if not isinstance(out, pd.DataFrame):
                            return f"a {type(out).__name__}, not a DataFrame"
                        return out.to_numpy(), list(out.columns)

                    def reference(factory=factory, call=call):
                        model = factory()
                        out = call(model)
                        return dense(out), list(model.get_feature_names_out())

                    cases.append(
                        Case(
                            "S",
                            f"{factory().__class__.__name__}.{method} of a "
                            f"{input_name} under {how}(transform='pandas')",
                            run,
                            reference,
                            words="set_output|pandas|memory",
                            compare=lambda g, e: (
                                not isinstance(g, str) and g[1] == e[1] and close(g[0], e[0])
                            ),
                        )
                    )
    return cases


def _thread_cases():
    """Two Python threads open and close threads() blocks in every interleaving: each sees its
    own count inside, and the setting they found is back afterwards."""
    import itertools
    import threading

    from ilargi.backend import threads as thread_control

    top = min(2, thread_control.max_num_threads())
    cases = []
    steps = [("a", "enter"), ("a", "exit"), ("b", "enter"), ("b", "exit")]
    orders = [
        order
        for order in itertools.permutations(steps)
        if order.index(("a", "enter")) < order.index(("a", "exit"))
        and order.index(("b", "enter")) < order.index(("b", "exit"))
    ]
    for order in orders:
        for ka, kb in ((1, top), (top, 1), (1, 1)):
            for base in (None, 1):

                def run(order=order, ka=ka, kb=kb, base=base):
                    thread_control.set_num_threads(base)
                    try:
                        return _interleave(order, {"a": ka, "b": kb}, thread_control, threading)
                    finally:
                        thread_control.set_num_threads(None)

                def reference(ka=ka, kb=kb, base=base):
                    found = thread_control.default_num_threads() if base is None else base
                    return {"a": ka, "b": kb, "after": found}

                cases.append(
                    Case(
                        "S",
                        f"threads({ka}) in thread a, threads({kb}) in b, "
                        f"{' '.join(t + ':' + s for t, s in order)}, "
                        f"set_num_threads({base}) before",
                        run,
                        reference,
                        compare=lambda g, e: g == e,
                    )
                )
    return cases


def _interleave(order, counts, thread_control, threading):
    """Run the steps of two threads' blocks in ``order``; what each saw inside (just before its
    exit) and the main thread's count afterwards."""
    go = {name: [threading.Event(), threading.Event()] for name in counts}
    done = {name: [threading.Event(), threading.Event()] for name in counts}
    seen = {}

    def worker(name):
        block = thread_control.threads(counts[name])
        go[name][0].wait(10)
        block.__enter__()
        done[name][0].set()
        go[name][1].wait(10)
        seen[name] = thread_control.get_num_threads()
        block.__exit__(None, None, None)
        done[name][1].set()

    workers = [threading.Thread(target=worker, args=(name,)) for name in counts]
    for w in workers:
        w.start()
    for name, step in order:
        index = 0 if step == "enter" else 1
        go[name][index].set()
        done[name][index].wait(10)
    for w in workers:
        w.join(10)
    seen["after"] = thread_control.get_num_threads()
    return seen


def _memory_guard_cases():
    """The memory the guard sees under a cgroup (v1, v2, a parent's limit, a container root) or
    a ulimit is at most what those allow; a table that does not fit there is refused."""
    import tempfile
    from pathlib import Path

    from ilargi.chooser import memory

    cases = []
    gib = 1 << 30

    def with_fake_host(lines, groups, check):
        saved = {name: getattr(memory, name, None) for name in ("CGROUP_ROOT", "PROC_SELF")}
        with tempfile.TemporaryDirectory() as folder:
            root, proc = Path(folder) / "cgroup", Path(folder) / "proc"
            proc.mkdir()
            (proc / "cgroup").write_text("\n".join(lines) + "\n")
            (proc / "statm").write_text("1000 10 5 1 0 200 0\n")
            for relative, files in groups.items():
                (root / relative).mkdir(parents=True, exist_ok=True)
                for name, text in files.items():
                    (root / relative / name).write_text(text)
            memory.CGROUP_ROOT, memory.PROC_SELF = str(root), str(proc)
            try:
                return check()
            finally:
                for name, value in saved.items():
                    setattr(memory, name, value)

    hosts = {
        "cgroup v2 memory.max 1 GiB": (
            ["0::/"],
            {".": {"memory.max": str(gib), "memory.current": "0"}},
            gib,
        ),
        "cgroup v2, a parent's limit": (
            ["0::/a/b"],
            {
                "a": {"memory.max": str(gib // 2), "memory.current": "0"},
                "a/b": {"memory.max": str(gib), "memory.current": "0"},
            },
            gib // 2,
        ),
        "cgroup v2 under unified/ (hybrid)": (["0::/"], {"unified": {"memory.max": str(gib)}}, gib),
        "cgroup v1 memory.limit_in_bytes": (
            ["4:memory:/job"],
            {
                "memory/job": {
                    "memory.limit_in_bytes": str(gib),
                    "memory.usage_in_bytes": str(gib // 4),
                }
            },
            gib - gib // 4,
        ),
        "cgroup v1, a container root": (
            ["4:memory:/hidden/path"],
            {"memory": {"memory.limit_in_bytes": str(gib), "memory.usage_in_bytes": "0"}},
            gib,
        ),
    }
    nm, _ = one_hot_table(3000, 3000)
    shifted = nm - 0.5  # 69 MiB dense when built: does not fit in 1 MiB
    for name, (lines, groups, bound) in hosts.items():
        cases.append(
            Case(
                "S",
                f"available memory under a {name}",
                lambda lines=lines, groups=groups, bound=bound: with_fake_host(
                    lines, groups, lambda: (memory.available_bytes() or 0) <= bound
                ),
                lambda: True,
                compare=lambda g, e: g is True,
            )
        )

        def run_refusal(lines=lines, groups=groups, shifted=shifted):
            small = {
                k: {
                    f: (str(1 << 20) if f in ("memory.max", "memory.limit_in_bytes") else t)
                    for f, t in v.items()
                }
                for k, v in groups.items()
            }
            return with_fake_host(lines, small, lambda: shifted.materialize().shape)

        def refused():
            raise Refused("the table does not fit in the 1 MiB the cgroup allows")

        cases.append(
            Case(
                "S",
                f"materialize() of a 69 MiB table under a 1 MiB {name}",
                run_refusal,
                refused,
                words="available",
            )
        )
    for limit_name in ("RLIMIT_AS", "RLIMIT_DATA"):

        def run(limit_name=limit_name):
            kind = getattr(resource, limit_name)
            soft, hard = resource.getrlimit(kind)
            statm = open("/proc/self/statm").read().split()
            used = int(statm[0 if limit_name == "RLIMIT_AS" else 5]) * os.sysconf("SC_PAGE_SIZE")
            resource.setrlimit(kind, (used + gib, hard))
            try:
                return (memory.available_bytes() or 0) <= 1.05 * gib
            finally:
                resource.setrlimit(kind, (soft, hard))

        cases.append(
            Case(
                "S",
                f"available memory under ulimit ({limit_name}) of 1 GiB headroom",
                run,
                lambda: True,
                compare=lambda g, e: g is True,
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------
# Class D: DuckDB sources changed after the merge

DUCKDB_CHANGES = {
    "delete the first row": "DELETE FROM {t} WHERE rowid = (SELECT min(rowid) FROM {t})",
    "delete the last row": "DELETE FROM {t} WHERE rowid = (SELECT max(rowid) FROM {t})",
    "delete every row": "DELETE FROM {t}",
    "insert two rows": "INSERT INTO {t} SELECT * FROM {t} LIMIT 2",
    "update the keys": "UPDATE {t} SET k = k + 1",
    "update the values": "UPDATE {t} SET v = -v",
    "drop the table": "DROP TABLE {t}",
    "replace it shuffled": "CREATE OR REPLACE TABLE {t} AS SELECT * FROM {t} ORDER BY random()",
    "add a column": "ALTER TABLE {t} ADD COLUMN extra INTEGER DEFAULT 1",
}


def classD_cases():
    """A merged Table (its frame and its matrix) after the database changed one of its tables:
    the reference is pandas' merge of the tables as they were."""
    import pandas as pd

    fact = pd.DataFrame({"k": [0, 1, 1, 2, 3, 0], "u": np.arange(6.0)})
    dim = pd.DataFrame(
        {"k": [0, 1, 2, 4], "v": [10.0, 20.0, 30.0, 40.0], "c": ["w", "x", "y", "z"]}
    )
    cases = []
    for change_name, sql in DUCKDB_CHANGES.items():
        for changed in ("fact", "dim"):
            change = sql.replace("v = -v", "u = -u") if changed == "fact" else sql
            for how in ("inner", "left", "outer"):
                for observe in ("to_pandas", "to_matrix"):

                    def run(change=change, changed=changed, how=how, observe=observe):
                        connection, table = _duckdb_join(fact, dim, how)
                        connection.execute(change.format(t=changed))
                        return _observed(table, observe)

                    def reference(how=how, observe=observe):
                        from ilargi.table import Table

                        return _observed(
                            Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how=how),
                            observe,
                        )

                    cases.append(
                        Case(
                            "D",
                            f"{change_name} of {changed} after a {how} merge: {observe}",
                            run,
                            reference,
                            compare=_same_observation,
                            words="changed|DuckDB",
                        )
                    )
    return cases


def _duckdb_join(fact, dim, how):
    import duckdb

    from ilargi.table import Table

    connection = duckdb.connect()
    for name, frame in (("fact", fact), ("dim", dim)):
        connection.register("incoming", frame)
        connection.execute(f"CREATE TABLE {name} AS SELECT * FROM incoming")
        connection.unregister("incoming")
    table = Table.from_duckdb(connection, "fact").merge(
        Table.from_duckdb(connection, "dim"), on="k", how=how
    )
    return connection, table


def _observed(table, observe):
    if observe == "to_pandas":
        return table.to_pandas().astype({"c": object})
    matrix, _ = table.to_matrix(columns=["u", "v", "c"])
    return matrix.columns, np.asarray(matrix)


def _same_observation(got, expected):
    import pandas as pd

    if isinstance(expected, pd.DataFrame):
        try:
            pd.testing.assert_frame_equal(got, expected, check_dtype=False)
            return True
        except AssertionError:
            return False
    return got[0] == expected[0] and close(got[1], expected[1])


# ---------------------------------------------------------------------------------------------
# Class E: encoding and arguments


def _encoded(frame, columns, categorical="onehot"):
    """The documented encoding of a materialized frame: categoricals (of any categories),
    strings and booleans by level (sorted by type, then value), numbers as they are."""
    import pandas as pd

    out = {}
    for column in columns:
        values = frame[column]
        by_level = (
            not pd.api.types.is_numeric_dtype(values)
            or pd.api.types.is_bool_dtype(values)
            or isinstance(values.dtype, pd.CategoricalDtype)
        )
        if not by_level:
            out[str(column)] = values.to_numpy(dtype=float, na_value=np.nan)
            continue
        present = list(pd.unique(values.dropna()))
        levels = sorted(
            present,
            key=lambda v: (
                0
                if isinstance(v, (bool, np.bool_))
                else 1
                if isinstance(v, (int, float, np.number))
                else 2
                if isinstance(v, str)
                else 3,
                v,
            ),
        )
        if categorical == "ordinal":
            codes = [np.nan if pd.isna(v) else levels.index(v) for v in values.astype(object)]
            out[str(column)] = np.nan_to_num(np.array(codes, dtype=float))
            continue
        for level in levels:
            out[f"{column}={level}"] = np.array(
                [
                    float(not pd.isna(v) and type(v) is type(level) and v == level)
                    if not isinstance(level, (bool, np.bool_))
                    else float(isinstance(v, (bool, np.bool_)) and v == level)
                    for v in values.astype(object)
                ]
            )
    return list(out), np.column_stack(list(out.values())) if out else np.zeros((len(frame), 0))


def _matrix(result):
    matrix = result[0]
    return matrix.columns, np.nan_to_num(np.asarray(matrix))


def _same_matrix(got, expected):
    return list(got[0]) == list(expected[0]) and close(got[1], np.nan_to_num(expected[1]))


def classE_cases():
    import pandas as pd

    from ilargi.table import Table, concat

    cases = []
    # A pandas categorical is encoded by level whatever its categories hold.
    codes = [3, 10, 3, 25, 10, 3]
    categories = {
        "int": codes,
        "float": [c / 2 for c in codes],
        "bool": [c > 5 for c in codes],
        "date": list(pd.to_datetime([f"2020-01-{c:02d}" for c in codes])),
        "str": [f"s{c}" for c in codes],
    }
    for kind, values in categories.items():
        for missing in (False, True):
            column = pd.Categorical(
                [None if missing and i == 2 else v for i, v in enumerate(values)]
            )
            dim = pd.DataFrame({"k": np.arange(6), "c": column})
            fact = pd.DataFrame({"k": [0, 1, 5, 7, 2], "x": np.arange(5.0)})
            for where in ("the table", "a dimension (left merge)"):
                for categorical in ("onehot", "ordinal"):

                    def table(dim=dim, fact=fact, where=where):
                        if where == "the table":
                            return Table(dim, name="dim")
                        return Table(fact, name="fact").merge(
                            Table(dim, name="dim"), on="k", how="left"
                        )

                    cases.append(
                        Case(
                            "E",
                            f"categorical of {kind}{' with NaN' if missing else ''}"
                            f" in {where}, {categorical}",
                            lambda table=table, categorical=categorical: _matrix(
                                table().to_matrix(columns=["c"], categorical=categorical)
                            ),
                            lambda table=table, categorical=categorical: _encoded(
                                table().to_pandas(), ["c"], categorical
                            ),
                            compare=_same_matrix,
                        )
                    )
            cases.append(
                Case(
                    "E",
                    f"categorical of {kind}{' with NaN' if missing else ''} as "
                    "the target: codes of its sorted levels",
                    lambda dim=dim: Table(dim, name="dim").to_matrix(columns=["k"], target="c")[1],
                    lambda dim=dim: (
                        _encoded(dim, ["c"], "ordinal")[1][:, 0]
                        + np.where(dim["c"].isna(), np.nan, 0.0)
                    ),
                )
            )
    # columns= takes a list of names or one name (a string is a name, not its characters).
    frame = pd.DataFrame(
        {"ab": [1.0, 2.0], "a": [3.0, 4.0], "b": [5.0, 6.0], ("t", 1): [7.0, 8.0], 7: [9.0, 10.0]}
    )
    for name, columns, expected in (
        ("'ab'", "ab", ["ab"]),
        ("'a'", "a", ["a"]),
        ("['a', 'b']", ["a", "b"], ["a", "b"]),
        ("('t', 1) (a tuple label)", ("t", 1), [("t", 1)]),
        ("7 (an int label)", 7, [7]),
        ("np.array(['b', 'a'])", np.array(["b", "a"]), ["b", "a"]),
        ("pd.Index(['a'])", pd.Index(["a"]), ["a"]),
    ):
        cases.append(
            Case(
                "E",
                f"to_matrix(columns={name})",
                lambda columns=columns, frame=frame: np.asarray(
                    Table(frame, name="t").to_matrix(columns=columns)[0]
                ),
                lambda expected=expected, frame=frame: frame[expected].to_numpy(),
            )
        )
    for name, columns, words in (
        ("'zz' (not a column)", "zz", r"\['zz'\] are not columns"),
        ("{'a', 'b'} (a set)", {"a", "b"}, "set.*order"),
        ("['a', 'a']", ["a", "a"], "twice"),
        ("[['a']] (a nested list)", [["a"]], "not columns"),
    ):

        def refused(columns=columns, frame=frame):  # pandas' selection of the same columns
            try:
                return frame[columns].to_numpy()
            except Exception as error:
                raise Refused(str(error)) from error

        cases.append(
            Case(
                "E",
                f"to_matrix(columns={name})",
                lambda columns=columns, frame=frame: np.asarray(
                    Table(frame, name="t").to_matrix(columns=columns)[0]
                ),
                refused,
                words=words,
            )
        )
    # Complex columns are refused (a real matrix would drop the imaginary part).
    complex_columns = {
        "complex128": np.array([1 + 2j, 3 + 0j, 1j]),
        "complex64": np.array([1 + 2j, 3 + 0j, 1j], dtype=np.complex64),
        "object of complex": pd.Series([1 + 2j, None, 3 + 0j], dtype=object),
    }
    for kind, values in complex_columns.items():
        dim = pd.DataFrame({"k": [0, 1, 2], "z": values, "x": [1.0, 2.0, 3.0]})
        for where, make in (
            ("a table", lambda dim=dim: Table(dim, name="dim")),
            (
                "a dimension",
                lambda dim=dim: Table(pd.DataFrame({"k": [2, 0]}), name="f").merge(dim, on="k"),
            ),
            ("a union", lambda dim=dim: concat([Table(dim, name="dim"), Table(dim, name="dim2")])),
        ):
            for call_name, call in (
                ("to_matrix()", lambda t: t.to_matrix()),
                ("to_matrix(columns=['z'])", lambda t: t.to_matrix(columns=["z"])),
                ("target='z'", lambda t: t.to_matrix(columns=["x"], target="z")),
            ):

                def refused():
                    raise Refused("a real matrix cannot hold complex values")

                cases.append(
                    Case(
                        "E",
                        f"{kind} column in {where}: {call_name}",
                        lambda make=make, call=call: _matrix(call(make())),
                        refused,
                        words=r"column 'z' \(table .*complex",
                    )
                )
    # Booleans and strings in one column: by level, sorted by type then value.
    mixed = {
        "a union of a bool and a str column": lambda: concat(
            [
                Table(pd.DataFrame({"m": [True, False, True], "x": [0.0, 1.0, 2.0]}), name="a"),
                Table(pd.DataFrame({"m": ["b", None, "a"], "x": [3.0, 4.0, 5.0]}), name="b"),
            ]
        ),
        "an object column": lambda: Table(
            pd.DataFrame(
                {
                    "m": pd.Series([True, False, True, "b", None, "a"], dtype=object),
                    "x": np.arange(6.0),
                }
            ),
            name="t",
        ),
        "a categorical": lambda: Table(
            pd.DataFrame(
                {"m": pd.Categorical([True, False, True, "b", None, "a"]), "x": np.arange(6.0)}
            ),
            name="t",
        ),
        "a boolean (nullable) and a str column": lambda: concat(
            [
                Table(
                    pd.DataFrame(
                        {"m": pd.array([True, None, False], dtype="boolean"), "x": [0.0, 1.0, 2.0]}
                    ),
                    name="a",
                ),
                Table(pd.DataFrame({"m": ["b", "a", "b"], "x": [3.0, 4.0, 5.0]}), name="b"),
            ]
        ),
    }
    for name, make in mixed.items():
        for categorical in ("onehot", "ordinal"):
            cases.append(
                Case(
                    "E",
                    f"booleans and strings in {name}: {categorical}",
                    lambda make=make, categorical=categorical: _matrix(
                        make().to_matrix(columns=["m"], categorical=categorical)
                    ),
                    lambda make=make, categorical=categorical: _encoded(
                        make().to_pandas(), ["m"], categorical
                    ),
                    compare=_same_matrix,
                )
            )
        cases.append(
            Case(
                "E",
                f"booleans and strings in {name}: levels",
                lambda make=make: list(make().levels("m")),
                lambda make=make: _encoded(make().to_pandas(), ["m"])[0],
                compare=lambda g, e: [f"m={v}" for v in g] == e,
            )
        )
    ints_and_strings = pd.Series([1, "a", 2], dtype=object)
    cases.append(
        Case(
            "E",
            "ints and strings in an object column (pd.get_dummies answers)",
            lambda: _matrix(Table(pd.DataFrame({"m": ints_and_strings}), name="t").to_matrix()),
            lambda: pd.get_dummies(ints_and_strings).to_numpy(),
            words=r"column 'm' \(table 't'.*mixed",
        )
    )
    # Column labels a save could not load back: refused before writing, naming column and table.
    for label in (0, 1.5, True, -3, np.int64(3), ("a", 1), None, pd.Timestamp("2020-01-01"), "0"):
        for sources in (False, True):

            def run(label=label, sources=sources):
                import tempfile

                frame = pd.DataFrame({label: [1.0, 2.0], "k": [0, 1]})
                with tempfile.TemporaryDirectory() as folder:
                    Table(frame, name="t").save(folder, sources=sources)
                    return Table.load(folder, None if sources else {"t": frame}).to_pandas()

            def reference(label=label):
                return pd.DataFrame({label: [1.0, 2.0], "k": [0, 1]})

            cases.append(
                Case(
                    "E",
                    f"save(sources={sources}) and load of a column labelled {label!r}",
                    run,
                    reference,
                    words=r"column .* of table 't'.*"
                    r"cannot be saved",
                    compare=lambda g, e: (
                        list(g.columns) == list(e.columns)
                        and close(g.to_numpy(dtype=float), e.to_numpy(dtype=float))
                    ),
                )
            )
    # Inputs never mutated by the calls above.
    frames = {
        "categorical": pd.DataFrame({"c": pd.Categorical([3, 1, 3]), "x": [1.0, 2.0, 3.0]}),
        "mixed": pd.DataFrame(
            {"m": pd.Series([True, "a", None], dtype=object), "x": [1.0, 2.0, 3.0]}
        ),
    }
    for name, frame in frames.items():

        def run(frame=frame):
            before = pickle.dumps(frame)
            Table(frame, name="t").to_matrix(columns=list(frame.columns)[:1])
            Table(frame, name="t").to_matrix(columns=["x"], target=frame.columns[0])
            return pickle.dumps(frame) == before

        cases.append(
            Case(
                "E",
                f"inputs unchanged by to_matrix of a {name} column",
                run,
                lambda: True,
                compare=lambda g, e: g is True,
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------------
# Class N (issue 43): numerics against NumPy at the edges of float64


NUMERIC_EDGES = {
    # each maps (fact, dim) of build() (values in [0.5, 2], dim[0, 1] = 0) to an edge of float64
    "huge, cancelling": lambda f, g, rng: (
        f * 1e300,
        np.where(np.arange(g.shape[0])[:, None] % 2, -1.5e308, 1.5e308) + 0 * g,
    ),
    "huge, overflowing": lambda f, g, rng: (f * 8.5e307, g * 8.5e307),
    "huge, squares overflow": lambda f, g, rng: (
        f * 1e200 * rng.choice([-1, 1], f.shape),
        g * 1e200,
    ),
    "large mean, small spread": lambda f, g, rng: (1e8 + f * 1e-3, -3e9 + g * 1e-2),
    "subnormal": lambda f, g, rng: (f * 1e-310, g * 1e-312),
    "mixed signs and magnitudes": lambda f, g, rng: (
        f * 10.0 ** rng.uniform(-300, 300, f.shape) * rng.choice([-1, 1], f.shape),
        g * 10.0 ** rng.uniform(-300, 300, g.shape),
    ),
}


def edge_matrix(kind, sparse, edge, n=40, seed=0):
    """(nm, table): build()'s join kinds with the sources' values at an edge of float64; in the
    cancelling case the dimension rows alternate in sign (±1.5e308) and so do the foreign keys,
    so that a column's sum, in NumPy's order, never overflows."""
    from ilargi import NormalizedMatrix

    _, table, (sources, rows, cols) = build(kind, sparse=False, n=n, seed=seed)
    rng = np.random.default_rng(seed + 1)
    as_source = (lambda a: sp.csr_array(a)) if sparse else (lambda a: a)
    edged = [NUMERIC_EDGES[edge](np.asarray(sources[0], dtype=float), sources[1], rng)[0]]
    for source in sources[1:]:
        edged.append(
            as_source(NUMERIC_EDGES[edge](edged[0], np.asarray(source, dtype=float), rng)[1])
        )
    if edge == "huge, cancelling" and kind in ("star", "left"):
        rows = list(rows)
        rows[1] = np.where(np.asarray(rows[1]) >= 0, np.arange(n) % 2, -1)
    nm = NormalizedMatrix.from_parts(edged, rows, cols, table.shape)
    return nm, nm.toarray()


def _order_free(table, name, axis, ddof=0):
    """Whether NumPy's answer does not depend on its order of summation: the same as NumPy's
    on the table divided by a power of two and multiplied back (no partial sum can overflow)."""
    with np.errstate(all="ignore"):
        kwargs = {"ddof": ddof} if name in ("var", "std") else {}
        plain = getattr(np, name)(table, axis=axis, **kwargs)
        k = 12
        scaled = getattr(np, name)(np.ldexp(table, -k), axis=axis, **kwargs)
        scaled = np.ldexp(scaled, 2 * k if name == "var" else k)
        if name in ("var", "std") and np.abs(table).max() < 1e300:
            # NumPy's mean rounds (its order of summation); its variance must match the one
            # about the correctly rounded mean to 1e-9, or the case's reference is an accident
            import math

            moved = np.moveaxis(table, 0, -1) if axis == 0 else table
            lines = [table.ravel()] if axis is None else list(moved)
            means = [math.fsum(line) / line.size if line.size else np.nan for line in lines]
            exact = np.array(
                [
                    ((line - m) ** 2).sum() / max(line.size - ddof, 0)
                    for line, m in zip(lines, means)
                ]
            )
            exact = np.sqrt(exact) if name == "std" else exact
            if not close(np.ravel(plain), exact):
                return False
        if name in ("var", "std") and np.abs(table).max() > 1e150:
            return (
                close(plain, scaled)
                and not (np.isinf(plain) & (np.ptp(table, axis=axis) == 0)).any()
            )
        return close(plain, scaled) and (
            np.abs(table[table != 0]).min(initial=1.0) > 1e-290 or name in ("sum", "mean")
        )


def classN_cases():
    cases = []
    for kind in ("star", "left", "union", "snowflake"):
        for sparse in (False, True):
            for edge in NUMERIC_EDGES:
                nm, table = edge_matrix(kind, sparse, edge)
                label = f"{kind}{' sparse' if sparse else ''}, {edge}"
                for name in ("sum", "mean", "var", "std"):
                    for axis in (None, 0, 1):
                        for ddof in (0, 1) if name in ("var", "std") else (0,):
                            if not _order_free(table, name, axis, ddof):
                                continue
                            kwargs = {"axis": axis, **({"ddof": ddof} if ddof else {})}
                            cases.append(
                                Case(
                                    "N",
                                    f"{name}({kwargs}), {label}",
                                    lambda nm=nm, name=name, kwargs=kwargs: getattr(nm, name)(
                                        **kwargs
                                    ),
                                    lambda t=table, name=name, kwargs=kwargs: getattr(t, name)(
                                        **kwargs
                                    ),
                                )
                            )
                for name in ("mean", "std"):  # keepdims, out= and np.<name>(nm)
                    if not _order_free(table, name, 0):
                        continue
                    cases.append(
                        Case(
                            "N",
                            f"np.{name}(nm, axis=0, keepdims=True), {label}",
                            lambda nm=nm, name=name: getattr(np, name)(nm, axis=0, keepdims=True),
                            lambda t=table, name=name: getattr(np, name)(t, axis=0, keepdims=True),
                        )
                    )

                    def run_out(nm=nm, name=name):
                        buf = np.full(nm.shape[1], -1.0)
                        returned = getattr(nm, name)(axis=0, out=buf)
                        return returned is buf, buf

                    def reference_out(t=table, name=name):
                        with np.errstate(all="ignore"):
                            buf = np.full(t.shape[1], -1.0)
                            return getattr(t, name)(axis=0, out=buf) is buf, buf

                    cases.append(
                        Case(
                            "N",
                            f"{name}(axis=0, out=buf) holds the {name} and is buf, {label}",
                            run_out,
                            reference_out,
                            compare=lambda g, e: g[0] == e[0] and close(g[1], e[1]),
                        )
                    )
            # min / max along rows and down columns over selections that empty a source
            nm, table = build(kind, sparse=sparse)[:2]
            n, d = table.shape
            selections = {
                "the fact's columns only": (slice(None), [0, 1]),
                "the last column only": (slice(None), [d - 1]),
                "first and last columns": (slice(None), [0, d - 1]),
                "rows 0-2": (slice(0, 3), slice(None)),
                "the last half of the rows": (slice(n // 2, n), slice(None)),
                "rows 0-4, the last column": (slice(0, 5), [d - 1]),
            }
            for what, (row_key, col_key) in selections.items():
                for name in ("min", "max", "sum", "var"):
                    for axis in (0, 1):
                        cases.append(
                            Case(
                                "N",
                                f"{name}(axis={axis}) of {what}, {kind}{' sparse' if sparse else ''}",
                                lambda nm=nm, r=row_key, c=col_key, name=name, axis=axis: getattr(
                                    nm[r][:, c], name
                                )(axis=axis),
                                lambda t=table, r=row_key, c=col_key, name=name, axis=axis: getattr(
                                    t[r][:, c], name
                                )(axis=axis),
                            )
                        )
    return cases


CLASSES = {
    "1": "NaN/inf reaching estimators",
    "2": "index vectors owned by the matrix",
    "5": "array semantics (comparisons, truth, indexing, complex, IEEE)",
    "7": "plans that do not fit in memory",
    "8": "scikit-learn model selection",
    "9": "error messages",
    "S": "scikit-learn contract (checks, set_output, threads, memory limits)",
    "D": "DuckDB sources changed after the merge",
    "E": "encoding and arguments",
    "N": "numerics at the edges of float64 (sums, means, var/std, min/max over selections)",
}


def all_cases():
    cases = []
    for make in (
        class1_cases,
        class2_cases,
        class5_cases,
        class7_cases,
        class8_cases,
        class9_cases,
        classS_cases,
        classD_cases,
        classE_cases,
        classN_cases,
    ):
        try:
            cases += make()
        except Exception as error:  # a catalogue an old checkout cannot even build
            cases.append(
                Case(
                    make.__name__[5],
                    f"building {make.__name__}",
                    lambda e=error: (_ for _ in ()).throw(e),
                    lambda: None,
                )
            )
    return cases


def table_markdown(counts_by_class, total):
    header = ["class", "cases"] + list(OUTCOMES)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for klass, name in CLASSES.items():
        counts = counts_by_class.get(klass, Counter())
        lines.append(
            f"| {klass} {name} | {sum(counts.values())} | "
            + " | ".join(str(counts.get(o, 0)) for o in OUTCOMES)
            + " |"
        )
    lines.append(
        f"| **all** | **{sum(total.values())}** | "
        + " | ".join(f"**{total.get(o, 0)}**" for o in OUTCOMES)
        + " |"
    )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--details",
        action="store_true",
        help="list every case that is not the same as the reference",
    )
    parser.add_argument("--json", help="write every case's outcome to this file")
    args = parser.parse_args()
    limit = 32 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    import ilargi

    started = time.perf_counter()
    cases = all_cases()
    by_class, total = {}, Counter()
    for case in cases:
        case.outcome = judge(case)
        by_class.setdefault(case.klass, Counter())[case.outcome] += 1
        total[case.outcome] += 1
    print(
        f"ilargi from {ilargi.__file__}; {len(cases)} cases in "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(table_markdown(by_class, total))
    if args.details:
        print()
        for case in cases:
            if case.outcome != "same as reference":
                print(f"[{case.klass}] {case.outcome}: {case.name} -- {case.detail}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                [
                    {"class": c.klass, "name": c.name, "outcome": c.outcome, "detail": c.detail}
                    for c in cases
                ],
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
