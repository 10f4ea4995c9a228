"""Issue 12, the matrix half: NumPy's answers or a clear refusal, never a silent difference.

* class 2 -- index vectors are owned by the matrix: later edits of the caller's arrays change no
  answer (cached counts and CSR forms included); gathers clip only what validation guarantees;
* class 5 -- array semantics: elementwise comparisons, NumPy's ambiguous truth value, pointwise
  fancy indexing, Ellipsis, complex refused, NaN/inf following IEEE as on the materialized table
  (or a refusal naming the reason);
* class 9 -- errors name the argument and the reason, in a short message.

References are NumPy on the materialized table; NaN and inf cells must match exactly
(``assert_close`` compares their positions and signs).
"""

import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given
from hypothesis import strategies as st

from ilargi import NormalizedMatrix
from ilargi.metadata import Indicator
from tests.strategies import (
    as_dense,
    assert_close,
    cases,
    dense_operand,
    property_settings,
    scenarios,
)

SEEDS = st.integers(0, 2**32 - 1)
INDEX_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def star(index_dtype=np.int64, sparse=False, left=False):
    """fact 6 × 2 (identity), dim 3 × 2 through fk (a left join misses one row)."""
    fact = np.arange(1.0, 13.0).reshape(6, 2)
    dim = np.array([[1.0, 0.0], [0.5, 2.0], [3.0, 0.25]])
    fk = np.array([2, 0, 1, 0, 2, 1])
    rows = fk.astype(np.int64)
    if left:
        rows[3] = -1
    rows = rows.astype(index_dtype) if not left or np.dtype(index_dtype).kind == "i" else rows
    source = sp.csr_array(dim) if sparse else dim
    return NormalizedMatrix.from_parts(
        [fact, source], [None, rows], [[0, 1], [2, 3]], (6, 4), names=["fact", "dim"]
    ), rows


def ieee(f, *args):
    with np.errstate(all="ignore"):
        return f(*args)


# --- class 2: the matrix owns its index vectors ------------------------------------------------


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("left", [False, True])
def test_caller_edits_of_index_vectors_change_nothing(index_dtype, sparse, left):
    nm, rows = star(index_dtype, sparse, left)
    x = np.arange(1.0, 5.0)
    before = (nm.toarray(), nm.sum(axis=0), nm @ x, nm.T @ np.ones(6), nm.crossprod())
    rows[:] = rows[::-1]  # an in-range edit: answers from cached counts would change
    rows[0] = 2 if not left else rows[0]
    after = (nm.toarray(), nm.sum(axis=0), nm @ x, nm.T @ np.ones(6), nm.crossprod())
    for b, a in zip(before, after):
        assert np.array_equal(
            np.asarray(b.toarray() if sp.issparse(b) else b),
            np.asarray(a.toarray() if sp.issparse(a) else a),
        )
    if np.dtype(index_dtype).kind == "i" and np.iinfo(index_dtype).max >= 100:
        rows[1] = 100  # out of range: never clipped into a silent answer
    assert np.array_equal(nm.toarray(), before[0]) and np.array_equal(nm @ x, before[2])


def test_caller_edits_of_mappings_and_metadata_change_nothing():
    fact, dim = np.ones((4, 1)), np.array([[1.0, 2.0], [3.0, 4.0]])
    fk, cols = np.array([0, 1, 1, 0]), np.array([1, 2])
    nm = NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0], cols], (4, 3))
    table = nm.toarray()
    cols[:] = [2, 1]
    fk[:] = 0
    assert np.array_equal(nm.toarray(), table)
    meta = nm.metadata
    meta.rows = [None, np.array(meta.rows[1])]  # the caller's own, writeable arrays
    meta.cols = [np.array(c) for c in meta.cols]
    back = NormalizedMatrix.from_metadata(meta, [fact, dim])
    meta.rows[1][:] = 1
    meta.cols[1][:] = [2, 1]
    assert np.array_equal(back.toarray(), table)


def test_index_vectors_handed_out_are_read_only_views_of_private_copies():
    nm, fk = star()
    assert not np.shares_memory(nm.parts[1].indicator.rows, fk)
    for handed_out in (
        nm.parts[1].rows,
        nm.metadata.rows[1],
        nm.parts[1].cols,
        nm.metadata.cols[1],
    ):
        with pytest.raises(ValueError, match="read-only"):
            handed_out[0] = 0
    assert fk.flags.writeable  # the caller's array is left as it was
    # The indicator's own copy stays writeable: np.take and np.bincount copy a read-only index
    # array on every call, which would slow every gather.
    assert nm.parts[1].indicator.rows.flags.writeable


def test_copy_false_shares_index_vectors_and_still_validates():
    """from_parts(copy=False): the caller hands its intp index vector over (no 48 MB copy per
    6M-row table); it is validated all the same, and other dtypes are still converted."""
    fact, dim = np.ones((4, 1)), np.array([[1.0], [2.0]])
    fk = np.array([1, 0, 1, -1], dtype=np.intp)
    shared = NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0], [1]], (4, 2), copy=False)
    assert shared.parts[1].indicator.rows is fk
    copied = NormalizedMatrix.from_parts([fact, dim], [None, fk], [[0], [1]], (4, 2))
    assert not np.shares_memory(copied.parts[1].indicator.rows, fk)
    assert np.array_equal(shared.toarray(), copied.toarray())
    narrow = NormalizedMatrix.from_parts(
        [fact, dim], [None, fk.astype(np.int32)], [[0], [1]], (4, 2), copy=False
    )
    assert narrow.parts[1].indicator.rows.dtype == np.intp
    with pytest.raises(ValueError, match="out of range"):
        NormalizedMatrix.from_parts([fact, dim], [None, fk + 1], [[0], [1]], (4, 2), copy=False)


def test_pickling_keeps_shared_indicators_shared_and_read_only():
    fk = np.array([0, 1, 1, 0, 2])
    nm = NormalizedMatrix.from_parts(
        [np.ones((5, 1)), np.eye(3), np.arange(6.0).reshape(3, 2)],
        [None, fk, fk.copy()],
        [[0], [1, 2, 3], [4, 5]],
        (5, 6),
    )
    nm.sum(axis=0)  # caches built on the indicator are not pickled
    assert nm.parts[1].indicator is nm.parts[2].indicator
    back = pickle.loads(pickle.dumps(nm[[4, 0, 2]]))
    assert back.parts[1].indicator is back.parts[2].indicator
    assert not back.parts[1].rows.flags.writeable
    assert np.array_equal(back.toarray(), nm.toarray()[[4, 0, 2]])


def test_gather_clips_only_where_validation_guarantees_the_range():
    """mode="clip" is used in the CPU gather, after the O(1) check that makes it safe, in the
    NumPy softmax pass (an Indicator's bucket rows into a table of n_source + 1 columns, labels
    checked once per link), and in the host probe's timed gather, whose indices are drawn in range
    (its values are never used)."""
    from ilargi.backend import cpu

    uses = []
    for path in Path(cpu.__file__).parents[1].rglob("*.py"):
        uses += [
            (path.name, line)
            for line in path.read_text().splitlines()
            if re.search(r"""take\(.*mode\s*=\s*["']clip""", line)
        ]
    assert sorted(name for name, _ in uses) == ["cpu.py", "host.py"] + ["softmax.py"] * 3
    with pytest.raises(ValueError, match="rows to gather"):
        cpu.gather(np.ones((2, 1)), Indicator(np.array([0, 2, 1]), 3))


@property_settings(40)
@given(scenario=scenarios(), seed=SEEDS)
def test_edits_after_any_operator_change_nothing(scenario, seed):
    """Every caller array edited in place after building and using the matrix: same answers."""
    rows = [None if r is None else np.array(r) for r in scenario.rows]
    cols = [np.array(c) for c in scenario.cols]
    nm = NormalizedMatrix.from_parts(scenario.sources, rows, cols, scenario.shape)
    x = dense_operand(seed, (scenario.shape[1],))
    y = dense_operand(seed + 1, (scenario.shape[0],))
    first = [nm @ x, nm.T @ y, nm.sum(axis=0), nm.sum(axis=1), nm.toarray()]
    for r in rows:
        if r is not None and r.size:
            r[:] = np.roll(r, 1)
    for c in cols:
        c[:] = c[::-1]
    second = [nm @ x, nm.T @ y, nm.sum(axis=0), nm.sum(axis=1), nm.toarray()]
    for a, b in zip(first, second):
        assert np.array_equal(a, b)


# --- class 5: comparisons, truth value, indexing, complex --------------------------------------

COMPARISONS = ["__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"]
UFUNCS = [np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal]


@property_settings(40)
@given(case=cases(), seed=SEEDS)
def test_comparisons_are_elementwise_as_in_numpy(case, seed):
    nm, table = case.build(), case.expected
    rng = np.random.default_rng(seed)
    scalar = float(table.flat[rng.integers(table.size)]) if table.size else 0.5
    per_column = table[min(1, table.shape[0] - 1)] if table.shape[0] else np.zeros(table.shape[1])
    for other in (scalar, per_column, table):
        for name in COMPARISONS:
            result = getattr(nm, name)(other)
            assert isinstance(result, np.ndarray) and result.dtype == bool
            assert np.array_equal(result, getattr(table, name)(other))
        for ufunc in UFUNCS:
            assert np.array_equal(ufunc(nm, other), ufunc(table, other))
    assert np.array_equal(nm == nm, table == table)
    assert np.array_equal(np.isnan(nm), np.isnan(table))
    assert np.array_equal(np.isinf(nm), np.isinf(table))


def test_comparisons_never_fall_back_to_identity():
    nm, _ = star()
    table = nm.toarray()
    assert (nm == 0.123).shape == table.shape and not (nm == 0.123).any()
    assert (nm != 0.123).all() and (nm == 0.5).sum() == 2
    assert np.array_equal(nm < 2.0, table < 2.0)
    assert np.array_equal(0.5 == nm, table == 0.5)
    assert np.array_equal(np.float64(1.0) >= nm, 1.0 >= table)
    assert hash(nm) == hash(nm)  # still usable as a dict key (by identity)


def test_truth_value_is_ambiguous_as_in_numpy():
    nm, _ = star()
    for matrix in (nm, nm[:2], nm[:0], nm.T):
        with pytest.raises(ValueError, match="ambiguous"):
            bool(matrix)
    with pytest.raises(ValueError, match="ambiguous"):
        if nm:
            pass
    assert bool(nm[[0]][:, [0]]) is True and bool(nm[[0]][:, [2]] * 0) is False
    assert len(nm) == 6 and len(nm.T) == 4


@property_settings(50)
@given(case=cases(), data=st.data())
def test_two_index_arrays_select_cells_pointwise(case, data):
    nm, table = case.build(), case.expected
    n, d = table.shape
    if n == 0:
        return
    k = data.draw(st.integers(1, 6))
    rows = data.draw(st.lists(st.integers(-n, n - 1), min_size=k, max_size=k))
    cols = data.draw(st.lists(st.integers(-d, d - 1), min_size=k, max_size=k))
    assert_close(nm[rows, cols], table[rows, cols], what="nm[rows, cols]")
    assert_close(
        nm[np.array(rows)[:, None], np.array(cols)[None, :]],
        table[np.array(rows)[:, None], np.array(cols)[None, :]],
        what="np.ix_-like",
    )
    assert_close(nm[np.ix_(rows, cols)], table[np.ix_(rows, cols)], what="np.ix_")
    assert_close(nm[rows[0], cols], table[rows[0], cols], what="nm[int, cols]")
    assert_close(nm[rows, cols[0]], table[rows, cols[0]], what="nm[rows, int]")
    if k > 1:
        with pytest.raises(IndexError, match="broadcast"):
            nm[rows, cols[:1] * (k + 1)]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_row_selection_accepts_what_sklearn_passes(index_dtype):
    nm, _ = star()
    table = nm.toarray()
    idx = np.array([5, 0, 3, 3], dtype=index_dtype)
    mask = np.array([True, False, True, False, False, True])
    for key, ref in [
        ((idx, Ellipsis), table[idx, ...]),
        ((idx, slice(None)), table[idx, :]),
        (idx, table[idx]),
        (list(idx), table[list(idx)]),
        ((mask, ...), table[mask]),
        (list(mask), table[list(mask)]),
        ((Ellipsis, idx[1:3]), table[..., idx[1:3]]),
        ((slice(None), idx[1:3]), table[:, idx[1:3]]),
        (Ellipsis, table[...]),
        ((idx[0],), table[idx[0]]),
        ((Ellipsis, 1), table[..., 1]),
    ]:
        assert_close(nm[key], ref, what=f"nm[{key!r}]")
    with pytest.raises(IndexError, match="single ellipsis"):
        nm[..., ...]
    with pytest.raises(IndexError, match="too many"):
        nm[0, 0, 0]
    with pytest.raises(IndexError, match="None"):
        nm[None]
    with pytest.raises(IndexError, match="boolean scalar"):
        nm[True]


def test_small_index_dtypes_wrap_negative_indices_without_overflow():
    n = 300
    nm = NormalizedMatrix.from_parts([np.arange(float(n))[:, None]], [None], [[0]], (n, 1))
    assert nm[np.array([-1, -2], dtype=np.int8)].toarray().ravel().tolist() == [n - 1.0, n - 2.0]
    assert nm[np.array([255, 3], dtype=np.uint8)].toarray().ravel().tolist() == [255.0, 3.0]


@pytest.mark.parametrize("sparse", [False, True])
def test_complex_sources_are_refused(sparse):
    value = np.array([[1.0 + 2.0j], [3.0 + 0.0j]])
    source = sp.csr_array(value) if sparse else value
    with pytest.raises(TypeError, match="complex"):
        NormalizedMatrix.from_parts([source], [None], [[0]], (2, 1))


@pytest.mark.parametrize(
    "operation",
    [
        lambda nm: nm * 1j,
        lambda nm: nm + np.ones(4) * 1j,
        lambda nm: 1j - nm,
        lambda nm: np.multiply(nm, 1j),
        lambda nm: np.add(np.complex128(1j), nm),
        lambda nm: nm @ (np.ones(4) * 1j),
        lambda nm: (np.ones(6) * 1j) @ nm,
        lambda nm: nm.crossprod(np.ones(6) * 1j),
        lambda nm: nm.gramvec(np.ones(4), v=np.ones(6) * 1j),
        lambda nm: nm.tcrossprod(np.ones(4) + 0j),
        lambda nm: nm.dot(np.ones(4, dtype=complex)),
        lambda nm: np.power(nm - 100.0, 0.5 + 0j),
    ],
)
def test_complex_operands_are_refused_not_cast(operation):
    nm, _ = star()
    with pytest.raises(TypeError, match="complex"):
        operation(nm)


# --- class 5: NaN and inf follow IEEE as on the materialized table -------------------------------

TRANSFORMS = {
    "log": lambda t: np.log(t),
    "sqrt(t - 0.5)": lambda t: np.sqrt(t - 0.5),
    "1 / t": lambda t: 1.0 / t,
    "t / c (zeros in c)": lambda t: t / np.where(np.arange(t.shape[1]) % 2 == 0, 0.0, 2.0),
    "t / 1e-320": lambda t: t / 1e-320,
    "t * 1e308 * 10": lambda t: t * 1e308 * 10.0,
    "(t - 1) / 0": lambda t: (t - 1.0) / 0.0,
}


def untransposed_cases():
    return cases(transpose=False)


@property_settings(60)
@given(case=untransposed_cases(), name=st.sampled_from(sorted(TRANSFORMS)), seed=SEEDS)
def test_nonfinite_transforms_follow_ieee(case, name, seed):
    # + 0.0: the materialized table holds zeros as +0.0 (cells are added into a table of zeros),
    # so 1 / T has +inf where a -0.0 was stored.
    nm, table = case.build(), case.expected + 0.0
    f = TRANSFORMS[name]
    reference = ieee(f, table)
    try:
        out = ieee(f, nm)
    except ValueError as error:  # f(0) non-finite on a sparse part's implicit zeros
        assert "sparse part" in str(error) and "materialize first" in str(error)
        return
    n, d = reference.shape
    x, y = dense_operand(seed, (d,)), dense_operand(seed + 1, (n,))
    what = f"{name} of {case!r}"
    table = as_dense(out.materialize())
    # Within a factor 10 of overflow the affine form's other order of rounding (s·(a·c) + b·c for
    # (s·a + b)·c) may reach ±inf where the table stays finite: those cells keep only their sign.
    edge = np.isfinite(reference) & (np.abs(reference) > 1e307)
    assert np.array_equal(np.sign(table[edge]), np.sign(reference[edge])), what
    assert_close(np.where(edge, 0.0, table), np.where(edge, 0.0, reference), what=what)
    if edge.any():
        return
    assert out.nonfinite() == (bool(np.isnan(reference).any()), bool(np.isinf(reference).any()))
    finite = np.abs(reference[np.isfinite(reference)])
    near_overflow = [finite.max() if finite.size else 0.0, np.abs(out.shift).max(initial=0.0)]
    near_overflow += [
        np.abs(
            p.source[np.isfinite(p.source)]
            if not sp.issparse(p.source)
            else p.source.data[np.isfinite(p.source.data)]
        ).max(initial=0.0)
        for p in out.parts
    ]
    if max(near_overflow) > 1e300:
        return  # sums through values near overflow: inf or NaN depends on the summation order
    assert_close(out @ x, ieee(np.matmul, reference, x), what=f"{what} @ x")
    assert_close(out.T @ y, ieee(np.matmul, reference.T, y), what=f"{what}.T @ y")
    assert_close(y @ out, ieee(np.matmul, y, reference), what=f"y @ {what}")
    assert_close(out.sum(axis=0), ieee(np.sum, reference, 0), what=f"{what}.sum(0)")
    assert_close(out.sum(axis=1), ieee(np.sum, reference, 1), what=f"{what}.sum(1)")
    if np.isfinite(reference).all():
        assert_close(out.crossprod(), reference.T @ reference, what=f"crossprod of {what}")
    else:
        with pytest.raises(ValueError, match="NaN|inf"):
            out.crossprod()
        with pytest.raises(ValueError, match="NaN|inf"):
            out.tcrossprod()


@property_settings(60)
@given(case=cases(), seed=SEEDS, kind=st.sampled_from([np.nan, np.inf, -np.inf]))
def test_nonfinite_operands_follow_ieee(case, seed, kind):
    nm, table = case.build(), case.expected
    n, d = table.shape
    rng = np.random.default_rng(seed)
    x, y = dense_operand(seed, (d,)), dense_operand(seed + 1, (n,))
    X = dense_operand(seed + 2, (d, 2))
    for vector in (x, y, X):
        if vector.size:
            vector.flat[rng.integers(vector.size)] = kind
    assert_close(nm @ x, ieee(np.matmul, table, x), what="T @ x with NaN/inf in x")
    assert_close(nm @ X, ieee(np.matmul, table, X), what="T @ X with NaN/inf in X")
    assert_close(nm.T @ y, ieee(np.matmul, table.T, y), what="T.T @ y with NaN/inf in y")
    assert_close(y @ nm, ieee(np.matmul, y, table), what="y @ T with NaN/inf in y")
    weights = np.abs(y) if kind != -np.inf else y
    assert_close(
        nm.crossprod(weights),
        ieee(lambda: table.T @ (table * weights[:, None])),
        what="crossprod with NaN/inf weights",
    )
    assert_close(
        nm.tcrossprod(np.abs(x)),
        ieee(lambda: (table * np.abs(x)) @ table.T),
        what="tcrossprod with NaN/inf weights",
    )
    reference = ieee(lambda: table.T @ (y * (table @ x)))
    assert_close(nm.gramvec(x, v=y), reference, what="gramvec with NaN/inf")


def test_affine_results_that_overflow_are_exact():
    nm, _ = star(left=True)
    table = nm.toarray()
    for f in (
        lambda t: t / 1e-320,
        lambda t: t * 1e308 * 10.0,
        lambda t: (t * 1e300 + 1e308) * 2,
        lambda t: (t - 3.0) / 1e-310,
    ):
        out, reference = ieee(f, nm), ieee(f, table)
        assert np.isfinite(out.scale).all() and np.isfinite(out.shift).all()
        assert_close(out.materialize(), reference)
        assert_close(out @ np.ones(4), ieee(np.matmul, reference, np.ones(4)))


def test_issue_example_crossprod_after_division_by_a_zero():
    nm, _ = star(left=True)
    c = np.array([1.0, 0.0, 2.0, 1.0])
    reference = ieee(lambda: (nm.toarray() / c).T @ (nm.toarray() / c))
    assert np.isnan(reference).any()
    with pytest.raises(ValueError, match="crossprod: T holds (NaN|inf) cells"):
        (nm / c).crossprod()
    assert_close((nm / c).materialize(), ieee(lambda: nm.toarray() / c))


# --- class 9: errors name the argument, briefly --------------------------------------------------


def test_ufunc_out_and_other_unsupported_forms_are_short_type_errors():
    nm, _ = star()
    buffer = np.empty((6, 4))
    for call, pattern in [
        (lambda: np.add(nm, 1, out=buffer), r"np.add\(\.\.\., out=\.\.\.\)"),
        (lambda: np.multiply(nm, 2, out=(buffer,)), "out="),
        (lambda: np.add.reduce(nm), "np.add.reduce"),
        (lambda: np.add.accumulate(nm), "np.add.accumulate"),
        (lambda: np.add(nm, 1, where=True), "where"),
        (lambda: np.add(nm, "a"), "np.add of a NormalizedMatrix and str"),
        (lambda: np.add(nm, sp.csr_array(np.ones((6, 4)))), "materialize"),
        (lambda: nm + "a", "unsupported operand"),
    ]:
        with pytest.raises(TypeError, match=pattern) as info:
            call()
        assert len(str(info.value)) < 300 and "array(" not in str(info.value)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda nm: nm.gramvec(np.ones(4), v=np.ones(3)), r"v of gramvec must have length 6"),
        (lambda nm: nm.gramvec(np.ones(3)), r"gramvec: y must have 4 rows"),
        (
            lambda nm: nm.gramvec(np.ones(4), beta=1.0, z=np.ones(5)),
            r"gramvec: z must have the shape",
        ),
        (lambda nm: nm.T.gramvec(np.ones(6), v=np.ones(6)), r"v of gramvec must have length 4"),
        (lambda nm: nm.crossprod(np.ones(5)), r"w must have length 6"),
        (lambda nm: nm.tcrossprod(np.ones(5)), r"w must have length 4"),
        (lambda nm: nm @ np.ones(5), r"inner dimensions 4 and 5"),
        (lambda nm: nm.dot(np.ones(4), out=np.empty(5)), r"out must be"),
        (lambda nm: nm[7], r"row index 7 is out of bounds"),
        (lambda nm: nm[:, [0, 9]], r"column index 9 is out of bounds"),
        (lambda nm: nm[[0, 1], [0, 9]], r"column index 9 is out of bounds"),
        (lambda nm: np.asarray(nm, copy=False), r"copy=False"),
    ],
)
def test_bad_arguments_are_named(call, pattern):
    nm, _ = star()
    with pytest.raises((ValueError, IndexError), match=pattern):
        call(nm)


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda nm: nm.gramvec(np.ones(4), alpha="2"), "alpha must be a real number"),
        (lambda nm: nm.gramvec(np.ones(4), beta=None), "beta must be a real number"),
        (lambda nm: nm.gramvec(np.array(["a"] * 4)), "y of gramvec must hold numbers"),
        (lambda nm: nm.crossprod(np.array(["a"] * 6)), "w must hold real numbers"),
        (lambda nm: nm[np.array([0.5])], "row index must be integers"),
    ],
)
def test_bad_argument_types_are_named(call, pattern):
    nm, _ = star()
    with pytest.raises(TypeError, match=pattern):
        call(nm)
