"""Hypothesis strategies for random data-integration (DI) scenarios, and their materialized references.

A scenario is the input of ``NormalizedMatrix.from_parts`` (sources, rows, cols, shape) plus the target
table T0 computed here by the obvious dense loop, independently of ilargi's kernels. A `Case` adds the
lazy state a test puts on top (affine ``nm * a + b``, a row selection, a transpose) and carries the same
operations applied to the dense reference.

Construction keeps the DI invariant (no target cell covered twice): parts are grouped; each group owns
a disjoint set of target columns; parts of one group cover disjoint row sets (union-like blocks).
Structure is drawn with hypothesis, numbers from a drawn seed (fast; the seed shrinks too).
"""

import copy
import dataclasses

import numpy as np
import scipy.sparse as sp
from hypothesis import strategies as st

from tests.backends import assert_on_device, is_device_array, is_normalized, on_backend, to_host

MAX_N = 40
MAX_D = 12
MAX_SOURCE_ROWS = 15
RTOL = 1e-9

# How a part's indicator is built (see `_part_rows`):
#   identity -- rows None (a fact table); only for a part alone in its group, all rows present
#   perm     -- a permutation of the target rows (bijection, stored as an index vector)
#   fk       -- many-to-one: random FK values, dimension rows used by many target rows or by none
#   left     -- fk with misses (-1), as a left join
#   pairs    -- sorted repeated rows: each fact row repeated for its M:N partners
#   block    -- consecutive rows of the source (union block), with unreferenced rows around it
WHOLE_KINDS = ("identity", "perm", "fk", "left", "pairs", "block")
SHARED_KINDS = ("fk", "left", "pairs", "block")
DENSE_FORMATS = ("dense", "dense_int", "dense_fortran", "dense_strided", "dense_readonly")
SPARSE_FORMATS = ("csr_matrix", "csr_array", "csc_matrix", "csr_unsorted", "onehot")
SOURCE_FORMATS = DENSE_FORMATS + SPARSE_FORMATS


def to_dense(matrix):
    """A float64 ndarray copy of a dense or scipy.sparse matrix."""
    if sp.issparse(matrix):
        return matrix.toarray().astype(np.float64)
    return np.array(matrix, dtype=np.float64)


def dense_reference(sources, rows, cols, shape):
    """T0 = sum_p I_p S_p M_p^T by the obvious loop: T0[valid rows][:, cols_p] = S_p[rows_p[valid]]."""
    table = np.zeros(shape)
    for source, part_rows, part_cols in zip(sources, rows, cols):
        values = to_dense(source)
        part_cols = np.asarray(part_cols, dtype=np.int64)
        if part_rows is None:
            table[:, part_cols] = values
        else:
            part_rows = np.asarray(part_rows, dtype=np.int64)
            valid = part_rows >= 0
            table[np.ix_(valid, part_cols)] = values[part_rows[valid]]
    return table


def coverage(rows, cols, shape):
    """How many parts cover each target cell."""
    count = np.zeros(shape, dtype=np.int64)
    for part_rows, part_cols in zip(rows, cols):
        present = np.ones(shape[0], bool) if part_rows is None else np.asarray(part_rows) >= 0
        count[np.ix_(present, np.asarray(part_cols, dtype=np.int64))] += 1
    return count


def _literal(x):
    if x is None:
        return "None"
    if sp.issparse(x):
        return f"sp.{type(x).__name__}(np.array({x.toarray().tolist()!r}))"
    x = np.asarray(x)
    return f"np.array({x.tolist()!r}, dtype=np.{x.dtype})"


def _snapshot(obj):
    return copy.deepcopy(obj)


def _same(before, after):
    if before is None or after is None:
        return before is after
    if sp.issparse(before):
        return (
            sp.issparse(after)
            and before.format == after.format
            and before.shape == after.shape
            and before.dtype == after.dtype
            and np.array_equal(before.data, after.data)
            and np.array_equal(before.indices, after.indices)
            and np.array_equal(before.indptr, after.indptr)
        )
    before, after = np.asarray(before), np.asarray(after)
    return (
        before.dtype == after.dtype
        and before.shape == after.shape
        and np.array_equal(before, after, equal_nan=True)
    )


def _default_names(n_parts):
    return [f"table{p}" for p in range(n_parts)]


@dataclasses.dataclass
class Scenario:
    sources: list
    rows: list
    cols: list
    shape: tuple
    names: list
    kinds: list
    dense: np.ndarray = dataclasses.field(init=False, repr=False)
    _originals: tuple = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        self.dense = dense_reference(self.sources, self.rows, self.cols, self.shape)
        self._originals = _snapshot((self.sources, self.rows, self.cols))
        assert coverage(self.rows, self.cols, self.shape).max(initial=0) <= 1

    def build(self, **kwargs):
        from ilargi import NormalizedMatrix

        return NormalizedMatrix.from_parts(
            self.sources, self.rows, self.cols, self.shape, names=self.names, **kwargs
        )

    def assert_inputs_untouched(self):
        for what, before, after in zip(
            ("source", "rows", "cols"), self._originals, (self.sources, self.rows, self.cols)
        ):
            for name, b, a in zip(self.names, before, after):
                assert _same(b, a), f"{what} of part {name} was modified"

    def __repr__(self):
        """Runnable, full-precision Python, so a falsifying example is a ready reproducer."""
        parts = ", ".join(
            f"({_literal(s)}, {_literal(r)}, {_literal(c)})"
            for s, r, c in zip(self.sources, self.rows, self.cols)
        )
        names = "" if self.names == _default_names(len(self.sources)) else f", names={self.names}"
        return f"Scenario.of(parts=[{parts}], shape={self.shape}, kinds={self.kinds}{names})"

    @classmethod
    def of(cls, parts, shape, kinds, names=None):
        """The scenario of (source, rows, cols) triples, as its repr writes it."""
        sources, rows, cols = (list(column) for column in zip(*parts))
        return cls(sources, rows, cols, shape, names or _default_names(len(parts)), kinds)

    def _repr_pretty_(self, printer, cycle):  # hypothesis prints falsifying examples with this
        printer.text(repr(self))

    @property
    def all_sparse(self):
        return all(sp.issparse(s) for s in self.sources)


def _source(rng, fmt, n_rows, n_cols, nonneg, density, constant=False):
    if fmt == "onehot":
        return _one_hot_source(rng, n_rows, n_cols)
    low = 0.0 if nonneg else -2.0
    if constant:  # one value in every cell, from a few shared ones: constant columns and rows
        sign = 1.0 if nonneg else rng.choice([-1.0, 1.0])
        values = np.full((n_rows, n_cols), sign * rng.choice([0.1, 1 / 3, 0.7, 2.3, 1.0]))
        density = 1.0
    elif fmt == "dense_int":
        values = rng.integers(0 if nonneg else -3, 4, size=(n_rows, n_cols)).astype(np.int64)
    else:
        values = rng.uniform(low, 2.0, size=(n_rows, n_cols))
    values = values * (rng.random((n_rows, n_cols)) < density)
    if n_rows > 1 and not constant and rng.random() < 0.5:
        values[rng.integers(n_rows)] = 0  # an empty row
    if fmt in DENSE_FORMATS:
        return _dense_layout(values, fmt)
    # Explicit zeros: store some cells whose value is 0.
    stored = (values != 0) | (rng.random((n_rows, n_cols)) < 0.15)
    i, j = np.nonzero(stored)
    if fmt == "csr_unsorted":
        return _non_canonical_csr(values, stored)
    coo = sp.coo_matrix((values[i, j], (i, j)), shape=(n_rows, n_cols))
    return {
        "csr_matrix": coo.tocsr(),
        "csr_array": sp.csr_array(coo.tocsr()),
        "csc_matrix": coo.tocsc(),
    }[fmt]


def _one_hot_source(rng, n_rows, n_cols):
    """A CSR with the same number k of ones in every row, at distinct sorted columns: the layout
    of Table.to_matrix's one-hot parts, which kernels multiply by counting."""
    k = int(rng.integers(1, min(3, n_cols) + 1))
    columns = np.sort(np.argsort(rng.random((n_rows, n_cols)), axis=1)[:, :k], axis=1)
    return sp.csr_array(
        (np.ones(n_rows * k), columns.ravel(), np.arange(n_rows + 1) * k), shape=(n_rows, n_cols)
    )


def _dense_layout(values, fmt):
    """Memory layouts a caller may hand over: Fortran order, a strided view, a read-only array."""
    if fmt == "dense_fortran":
        return np.asfortranarray(values)
    if fmt == "dense_strided":
        wide = np.zeros((values.shape[0], 2 * values.shape[1]), dtype=values.dtype)
        wide[:, 1::2] = values
        return wide[:, 1::2]
    if fmt == "dense_readonly":
        values.setflags(write=False)  # also makes any in-place write into a source fail loudly
    return values


def _non_canonical_csr(values, stored):
    """A CSR with reversed column order in every row and each stored value split into two duplicates."""
    data, indices, indptr = [], [], [0]
    for row, mask in zip(values, stored):
        for j in np.flatnonzero(mask)[::-1]:
            data += [
                row[j] / 2,
                row[j] / 2,
            ]  # halving is exact, so the duplicates sum back to row[j]
            indices += [j, j]
        indptr.append(len(indices))
    matrix = sp.csr_matrix(
        (
            np.array(data, dtype=np.float64),
            np.array(indices, dtype=np.int32),
            np.array(indptr, dtype=np.int32),
        ),
        shape=values.shape,
    )
    return matrix


def _part_rows(rng, kind, present):
    """(rows vector or None, number of source rows) for one part covering the rows in `present`."""
    n = present.size
    if kind == "identity":
        return None, n
    if kind == "perm":
        return rng.permutation(n), n
    present = present.copy()
    if kind == "left":
        present &= rng.random(n) < 0.7
    count = int(present.sum())
    rows = np.full(n, -1, dtype=np.int64)
    if kind == "block":
        extra_before, extra_after = rng.integers(0, 3, size=2)
        rows[present] = np.arange(count) + extra_before
        return rows, max(1, count + extra_before + extra_after)
    n_source = int(rng.integers(1, MAX_SOURCE_ROWS + 1))
    values = rng.integers(0, n_source, size=count)
    rows[present] = np.sort(values) if kind == "pairs" else values
    return rows, n_source


INDEX_CONTAINERS = st.sampled_from(("int64", "int64", "int32", "list"))


def _index_container(values, container):
    """An index vector as the caller may pass it: int64 or int32 array, or a Python list."""
    return values.tolist() if container == "list" else values.astype(container)


@st.composite
def scenarios(
    draw,
    max_parts=4,
    max_n=MAX_N,
    max_d=MAX_D,
    sparse=None,
    nonneg=False,
    kinds=WHOLE_KINDS,
    min_n=1,
    constant=False,
):
    """A random DI scenario (see module doc). sparse: None = mixed, True/False = all CSR / all dense.

    constant: every source holds a single value (constant columns and rows; variance cancellation).
    """
    n_parts = draw(st.integers(1, max_parts))
    n_groups = draw(st.integers(1, n_parts))
    n = draw(st.integers(min_n, max_n))
    d = draw(st.integers(n_groups, max_d))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))

    group_of_part = list(range(n_groups)) + [
        draw(st.integers(0, n_groups - 1)) for _ in range(n_parts - n_groups)
    ]
    order = rng.permutation(d)
    column_group = np.empty(d, dtype=np.int64)
    column_group[order[:n_groups]] = np.arange(n_groups)
    column_group[order[n_groups:]] = rng.integers(-1, n_groups, size=d - n_groups)  # -1: no part

    if sparse is None:
        formats = st.sampled_from(SOURCE_FORMATS)
    elif sparse:
        formats = st.sampled_from(SPARSE_FORMATS)
    else:
        formats = st.sampled_from(DENSE_FORMATS)

    sources, rows, cols, part_kinds = (
        [None] * n_parts,
        [None] * n_parts,
        [None] * n_parts,
        [None] * n_parts,
    )
    for group in range(n_groups):
        members = [p for p in range(n_parts) if group_of_part[p] == group]
        # Union-like: each member owns the rows with its label; label -1 = no member has the row.
        labels = (
            np.zeros(n, np.int64) if len(members) == 1 else rng.integers(-1, len(members), size=n)
        )
        allowed = [k for k in kinds if k in (WHOLE_KINDS if len(members) == 1 else SHARED_KINDS)]
        group_cols = np.flatnonzero(column_group == group)
        for label, part in enumerate(members):
            kind = draw(st.sampled_from(allowed))
            part_rows, n_source = _part_rows(rng, kind, labels == label)
            if part_rows is not None:
                part_rows = _index_container(part_rows, draw(INDEX_CONTAINERS))
            width = int(rng.integers(1, group_cols.size + 1))
            part_cols = rng.choice(group_cols, size=width, replace=False)
            part_cols = _index_container(part_cols, draw(INDEX_CONTAINERS))
            density = draw(st.sampled_from((0.3, 0.7, 1.0)))
            fmt = draw(formats)
            sources[part] = _source(rng, fmt, n_source, width, nonneg, density, constant)
            rows[part], cols[part] = part_rows, part_cols
            part_kinds[part] = f"{kind}/{fmt}"
    return Scenario(sources, rows, cols, (n, d), _default_names(n_parts), part_kinds)


@st.composite
def snowflakes(draw, max_n=MAX_N):
    """A star whose dimensions chain: a fact part, a fine dimension (fk or left join) and one or two
    coarser dimensions whose rows are functions of the finer one's (rows_c = f[rows_f], f missing some
    rows; sometimes present where the finer level is absent, where no fold may apply), dense or sparse."""
    n = draw(st.integers(2, max_n))
    levels = draw(st.integers(2, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    formats = [draw(st.sampled_from(SOURCE_FORMATS)) for _ in range(levels + 1)]
    widths = rng.integers(1, 4, size=levels + 1)
    d = int(widths.sum())
    bounds = np.concatenate([[0], np.cumsum(widths)])
    cols = [np.arange(bounds[i], bounds[i + 1]) for i in range(levels + 1)]
    fine_rows, n_fine = _part_rows(rng, draw(st.sampled_from(("fk", "left"))), np.ones(n, bool))
    n_fine = min(n_fine, max(1, n // 2))
    fine_rows = np.where(fine_rows >= 0, fine_rows % n_fine, -1)
    rows, sizes = [None, fine_rows], [n, n_fine]
    for _ in range(levels - 1):  # each level coarser than the one before
        sizes.append(int(rng.integers(1, sizes[-1] + 1)))
        f = rng.integers(0, sizes[-1], size=sizes[-2])
        f[rng.random(f.size) < 0.2] = -1
        previous = rows[-1]
        chained = np.where(previous >= 0, f[np.maximum(previous, 0)], -1)
        if rng.random() < 0.3:  # present where the finer level is absent: no fold
            absent = previous < 0
            chained[absent] = rng.integers(0, sizes[-1], size=int(absent.sum()))
        rows.append(chained)
    sources = [
        _source(rng, fmt, size, int(w), False, draw(st.sampled_from((0.3, 1.0))))
        for fmt, size, w in zip(formats, sizes, widths)
    ]
    kinds = [
        f"{kind}/{fmt}"
        for kind, fmt in zip(["identity", "fine"] + ["snow"] * (levels - 1), formats)
    ]
    return Scenario(sources, rows, cols, (n, d), [f"level{i}" for i in range(levels + 1)], kinds)


def affine_vectors(rng, d, nonneg=False, positive=False):
    """(a, b) for nm * a + b. nonneg keeps T >= 0 for T0 >= 0; positive keeps T >= 0.5."""
    if positive:
        return rng.uniform(0.5, 2.0, d), rng.uniform(0.5, 2.0, d)
    if nonneg:
        return rng.uniform(0.0, 2.0, d), rng.uniform(0.0, 2.0, d)
    a = rng.uniform(-2.0, 2.0, d)
    a[rng.random(d) < 0.2] = 1.0
    b = rng.uniform(-2.0, 2.0, d) * (rng.random(d) < 0.8)
    return a, b


@st.composite
def selections(draw, n):
    """A non-empty row selection over n rows: int array with repeats, slice (step 1 as often as
    any other kind: the train/test split, served by views) or boolean mask."""
    kind = draw(st.sampled_from(("int", "int32", "list", "slice", "contiguous", "mask")))
    if kind == "contiguous":
        return draw(contiguous_slices(n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind in ("int", "int32", "list"):
        idx = rng.integers(0, n, size=int(rng.integers(1, 2 * n + 1)))
        return {"int": idx, "int32": idx.astype(np.int32), "list": idx.tolist()}[kind]
    if kind == "mask":
        mask = rng.random(n) < 0.5
        mask[rng.integers(n)] = True
        return mask
    step = draw(st.sampled_from((1, 1, 2, 3, -1, -2)))
    start = draw(st.integers(0, n - 1))
    stop = draw(st.one_of(st.none(), st.integers(0, n)))
    return (
        slice(start, stop, step)
        if len(range(n)[slice(start, stop, step)])
        else slice(start, None, step)
    )


@st.composite
def contiguous_slices(draw, n):
    """A non-empty slice of step 1 over n rows, as ``X[:split]``, ``X[split:]`` or ``X[a:b]``
    (negative bounds and a stop past the end included, as NumPy takes them)."""
    start = draw(st.integers(0, n - 1))
    stop = draw(st.integers(start + 1, n + 2))
    form = draw(st.sampled_from(("head", "tail", "range", "negative")))
    if form == "head":
        return slice(None, stop)
    if form == "tail":
        return slice(start, None, draw(st.sampled_from((None, 1))))
    if form == "negative":
        return slice(start - n, stop - n - 3 if stop - 3 > start else None)
    return slice(start, stop)


@dataclasses.dataclass
class Case:
    """A scenario with lazy state on top: (nm * a + b)[selection], transposed or not."""

    scenario: Scenario
    affine: tuple | None
    selection: object
    transpose: bool

    def __repr__(self):
        affine = (
            "None"
            if self.affine is None
            else f"({_literal(self.affine[0])}, {_literal(self.affine[1])})"
        )
        selection = (
            self.selection if isinstance(self.selection, slice) else _literal(self.selection)
        )
        return (
            f"Case({self.scenario!r}, affine={affine}, selection={selection}, "
            f"transpose={self.transpose})"
        )

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def build(self, **kwargs):
        nm = self.scenario.build(**kwargs)
        if self.affine is not None:
            nm = nm * self.affine[0] + self.affine[1]
        if self.selection is not None:
            nm = nm[self.selection]
        return nm.T if self.transpose else nm

    @property
    def expected(self):
        table = self.scenario.dense
        if self.affine is not None:
            table = table * self.affine[0] + self.affine[1]
        if self.selection is not None:
            table = table[self.selection]
        return table.T if self.transpose else table


@st.composite
def cases(
    draw,
    affine=None,
    select=None,
    transpose=None,
    nonneg=False,
    positive=False,
    snowflake=False,
    **scenario_kwargs,
):
    """A random Case. affine/select/transpose: None = drawn, True/False = forced.

    snowflake: the scenario is drawn from `snowflakes` (chained dimensions) instead of `scenarios`.
    """
    scenario = draw(
        snowflakes(**scenario_kwargs)
        if snowflake
        else scenarios(nonneg=nonneg or positive, **scenario_kwargs)
    )
    use_affine = draw(st.booleans()) if affine is None else affine
    use_select = draw(st.booleans()) if select is None else select
    use_transpose = draw(st.booleans()) if transpose is None else transpose
    ab = None
    if use_affine:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        ab = affine_vectors(rng, scenario.shape[1], nonneg=nonneg, positive=positive)
    selection = draw(selections(scenario.shape[0])) if use_select else None
    return Case(scenario, ab, selection, use_transpose)


def as_dense(result, device=False):
    """A NumPy view of an operator result (ndarray, scalar, scipy.sparse, NormalizedMatrix).

    device: also accept GPU results (CuPy, cupyx sparse, a NormalizedMatrix on the GPU), copied to
    the host; without it a device result is an error, so no GPU result is compared unchecked.
    """
    if is_normalized(result) and result.device != "cpu" or is_device_array(result):
        assert device, "a GPU result compared without backend='gpu' (see tests/backends.py)"
        result = to_host(result)
    if sp.issparse(result):
        return result.toarray()
    if hasattr(result, "materialize"):
        result = result.materialize()
        return result.toarray() if sp.issparse(result) else result
    return np.asarray(result)


def relative_error(actual, expected):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if expected.size == 0:
        return 0.0
    return float(np.max(np.abs(actual - expected)) / max(1.0, float(np.max(np.abs(expected)))))


def assert_close(actual, expected, rtol=RTOL, what="", backend=None):
    """Same shape, same non-finite cells, finite cells within rtol (max-abs-diff / max(1, max-abs-ref)).

    backend: where ``actual`` was computed; given, it must live there (:func:`assert_on_device`).
    """
    if backend is not None:
        assert_on_device(actual, backend, what)
    actual_dense = as_dense(actual, device=backend == "gpu")
    expected = np.asarray(expected)
    assert actual_dense.shape == expected.shape, (
        f"{what}: shape {actual_dense.shape} != {expected.shape}"
    )
    finite = np.isfinite(expected)
    assert np.array_equal(np.isnan(actual_dense), np.isnan(expected)), f"{what}: NaN cells differ"
    assert np.array_equal(
        actual_dense[~finite & ~np.isnan(expected)], expected[~finite & ~np.isnan(expected)]
    ), f"{what}: inf cells differ"
    error = relative_error(actual_dense[finite], expected[finite])
    assert error <= rtol, f"{what}: relative error {error:.3g} > {rtol:g}"


def raises_all(error, *patterns):
    """pytest.raises whose message must contain every regex in `patterns` (case-insensitive)."""
    import pytest

    return pytest.raises(error, match="(?is)" + "".join(f"(?=.*{p})" for p in patterns))


def property_settings(max_examples=60):
    """Hypothesis settings for the core property tests: small, no deadline, slow draws allowed.

    $ILARGI_EXAMPLES_SCALE multiplies max_examples for a longer hunt (default 1: the fast suite).
    """
    import os

    from hypothesis import HealthCheck, settings

    scale = float(os.environ.get("ILARGI_EXAMPLES_SCALE", "1"))
    return settings(
        max_examples=max(1, int(max_examples * scale)),
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def dense_operand(seed, shape, dtype=np.float64):
    """A random dense operand (float in [-1, 1), or small integers for an integer dtype)."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-3, 4, size=shape).astype(dtype)
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def assert_matches(nm, expected, seed=0, what="", backend="cpu"):
    """nm equals the dense `expected` through several rewrite rules: materialize, @ both sides, sums;
    nm and every result on ``backend`` (the operands are moved there)."""
    assert nm.shape == expected.shape, f"{what}: shape {nm.shape} != {expected.shape}"
    assert_on_device(nm, backend, what)
    rows, cols = expected.shape
    x, y = dense_operand(seed, (cols, 2)), dense_operand(seed + 1, (rows,))
    assert_close(nm.materialize(), expected, what=f"{what} materialize", backend=backend)
    assert_close(nm @ on_backend(x, backend), expected @ x, what=f"{what} @ X", backend=backend)
    assert_close(on_backend(y, backend) @ nm, y @ expected, what=f"{what} y @", backend=backend)
    assert_close(nm.sum(axis=0), expected.sum(axis=0), what=f"{what} sum(axis=0)", backend=backend)


@st.composite
def overlapping_parts(draw, max_parts=4, max_n=20, max_d=6):
    """Parts whose target cells may overlap (input of resolve_overlap): (sources, rows, cols, shape, names)."""
    n_parts = draw(st.integers(1, max_parts))
    n, d = draw(st.integers(1, max_n)), draw(st.integers(1, max_d))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sources, rows, cols = [], [], []
    for _ in range(n_parts):
        kind = draw(st.sampled_from(("identity", "fk", "left", "block")))
        part_rows, n_source = _part_rows(
            rng, kind, rng.random(n) < 0.6 if kind == "block" else np.ones(n, bool)
        )
        width = int(rng.integers(1, d + 1))
        part_cols = rng.choice(d, size=width, replace=False)
        sources.append(
            _source(rng, draw(st.sampled_from(SOURCE_FORMATS)), n_source, width, False, 0.7)
        )
        rows.append(part_rows)
        cols.append(part_cols)
    return sources, rows, cols, (n, d), [f"src{p}" for p in range(n_parts)]


def overlap_reference(sources, rows, cols, shape, rule):
    """The table resolve_overlap must describe, cell by cell.

    first: the first part that has column j owns it in every row (NULL where that part is absent);
    coalesce: in each row, the first part that has column j and is present there wins.
    """
    table = np.zeros(shape)
    owner = np.full(shape, -1)
    for p, (source, part_rows, part_cols) in enumerate(zip(sources, rows, cols)):
        values = to_dense(source)
        for i in range(shape[0]):
            source_row = i if part_rows is None else int(part_rows[i])
            for k, j in enumerate(part_cols):
                if owner[i, j] != -1:
                    continue
                if source_row >= 0:
                    table[i, j], owner[i, j] = values[source_row, k], p
                elif rule == "first":
                    owner[i, j] = (
                        p  # absent, but the column is still this part's: the cell stays NULL
                    )
    return table


def with_unreferenced_rows(scenario, value):
    """The scenario with one extra source row holding `value` (NaN, inf) appended to every part with an
    index vector: no target row takes it, so the target table is unchanged."""

    def extend(source):
        if sp.issparse(source):
            extra = sp.csr_matrix(np.full((1, source.shape[1]), value))
            return type(source)(sp.vstack([source, extra], format=source.format))
        return np.vstack([source, np.full((1, source.shape[1]), value, dtype=source.dtype)])

    sources = [s if r is None else extend(s) for s, r in zip(scenario.sources, scenario.rows)]
    return Scenario(
        sources, scenario.rows, scenario.cols, scenario.shape, scenario.names, scenario.kinds
    )


def wide_star(fact_width, dtype, seed=0):
    """A star whose stacked passes take every branch the small hypothesis scenarios cannot: a
    fact table wider than a warp (two column lanes per lane) or at the 64-column bound, rows of
    Iᵀ and of Z longer than one piece (a 3-row dimension taken by ~1000 target rows each; a
    300-column dimension), several tiles per warp, a left join, a sparse part, a dense part above
    SMALL_DENSE (multiplied by cuBLAS), and a table split into two parts that share one indicator
    (as Table.to_matrix builds numeric and one-hot parts). Returns (nm, the dense T0)."""
    from ilargi import NormalizedMatrix

    rng = np.random.default_rng(seed)
    n = 3000
    widths = [fact_width, 4, 300, 6, 200, 5]
    sources = [
        rng.standard_normal((n, fact_width)),
        rng.standard_normal((3, 4)),
        rng.standard_normal((20, 300)),
        sp.random(50, 6, density=0.4, format="csr", random_state=seed),
        rng.standard_normal((700, 200)),
        sp.random(50, 5, density=0.5, format="csr", random_state=seed + 1),
    ]
    fk = rng.integers(0, 50, n)
    rows = [None, rng.integers(0, 3, n), rng.integers(0, 20, n), fk, rng.integers(-1, 700, n), fk]
    starts = np.cumsum([0] + widths)
    cols = [np.arange(starts[k], starts[k + 1]) for k in range(len(widths))]
    sources = [s.astype(dtype) for s in sources]
    shape = (n, int(starts[-1]))
    parts = list(NormalizedMatrix.from_parts(sources, rows, cols, shape).parts)
    parts[5] = parts[5].with_indicator(parts[3].indicator)
    return NormalizedMatrix(parts, shape), dense_reference(sources, rows, cols, shape)
