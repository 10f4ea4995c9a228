"""Row (and column) selection: nm[idx] is exact, shares the sources, and composes with every operator.

Every test runs on each backend (tests/backends.py); selections are host indices (a device index too,
where the GPU takes one).
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.backends import is_sparse, on_backend, to_host
from tests.strategies import (
    affine_vectors,
    assert_close,
    assert_matches,
    cases,
    contiguous_slices,
    dense_operand,
    property_settings,
    scenarios,
    selections,
    snowflakes,
)

SEEDS = st.integers(0, 2**32 - 1)


def _shares_memory(a, b):
    if type(a).__module__.startswith("cupy"):
        import cupy

        return bool(cupy.shares_memory(a, b))
    return bool(np.shares_memory(a, b))


def _from_parent_sources(sub, nm):
    """Every source of ``sub`` is one of ``nm``'s or (a dense fact source cut to a slice's rows)
    a view of one."""
    parents = [part.source for part in nm.parts]
    return all(
        any(
            source is parent
            or not (is_sparse(source) or is_sparse(parent))
            and _shares_memory(source, parent)
            for parent in parents
        )
        for source in (part.source for part in sub.parts)
    )


@property_settings(80)
@given(data=st.data(), seed=SEEDS)
def test_row_selection_is_exact_and_shares_sources(backend, data, seed):
    case = data.draw(cases(select=False))
    nm, expected = on_backend(case.build(), backend), case.expected
    selection = data.draw(selections(expected.shape[0]))
    selection_before = (
        np.array(selection, copy=True) if not isinstance(selection, slice) else selection
    )
    sub = nm[selection]  # on a transposed view: a column selection of T
    assert type(sub) is type(nm)
    if not case.transpose:
        assert _from_parent_sources(sub, nm), "row selection copied a source"
    assert_matches(sub, expected[selection], seed, what="nm[idx]", backend=backend)
    assert_matches(nm, expected, seed, what="nm after selecting from it", backend=backend)
    if backend == "gpu" and isinstance(selection, np.ndarray) and not case.transpose:
        # A device index selects rows of T too (columns of a transposed view take host indices).
        assert_matches(
            nm[on_backend(selection, backend)],
            expected[selection],
            seed,
            what="nm[device idx]",
            backend=backend,
        )
    if not isinstance(selection, slice):
        assert np.array_equal(np.asarray(selection), selection_before), (
            "selection index was modified"
        )
    case.scenario.assert_inputs_untouched()


@property_settings(50)
@given(data=st.data(), seed=SEEDS)
def test_selection_commutes_with_affine_state(backend, data, seed):
    scenario = data.draw(scenarios())
    a, b = affine_vectors(np.random.default_rng(seed), scenario.shape[1])
    selection = data.draw(selections(scenario.shape[0]))
    nm = on_backend(scenario.build(), backend)
    expected = (scenario.dense * a + b)[selection]
    a_, b_ = on_backend(a, backend), on_backend(b, backend)
    assert_matches(
        (nm * a_ + b_)[selection], expected, seed, what="(nm * a + b)[idx]", backend=backend
    )
    assert_matches(nm[selection] * a_ + b_, expected, seed, what="nm[idx] * a + b", backend=backend)


@property_settings(50)
@given(data=st.data(), seed=SEEDS)
def test_nested_selections(backend, data, seed):
    case = data.draw(cases(select=True, transpose=False))
    nm, expected = on_backend(case.build(), backend), case.expected
    second = data.draw(selections(expected.shape[0]))
    assert_matches(nm[second], expected[second], seed, what="nm[idx1][idx2]", backend=backend)


@property_settings(60)
@given(data=st.data(), m=st.sampled_from([None, 1, 3]), seed=SEEDS)
def test_chain_affine_select_transpose_matmul(backend, data, m, seed):
    """(nm * a + b)[idx].T @ Y, then the same matrix through crossprod, gramvec and reductions."""
    case = data.draw(cases(affine=True, select=True, transpose=True))
    nm, expected = on_backend(case.build(), backend), case.expected
    y = dense_operand(seed, (expected.shape[1],) if m is None else (expected.shape[1], m))
    assert_close(
        nm @ on_backend(y, backend), expected @ y, what="(nm * a + b)[idx].T @ Y", backend=backend
    )
    back = nm.T
    table = expected.T
    assert_close(back.crossprod(), table.T @ table, what="crossprod of selection", backend=backend)
    z = dense_operand(seed + 1, (table.shape[1],))
    z_ = on_backend(z, backend)
    assert_close(
        back.gramvec(z_), table.T @ (table @ z), what="gramvec of selection", backend=backend
    )
    assert_close(back.var(axis=0), table.var(axis=0), what="var of selection", backend=backend)
    assert_close(
        np.exp(back)[::2] @ z_,
        np.exp(table)[::2] @ z,
        what="exp, then slice, then @",
        backend=backend,
    )
    case.scenario.assert_inputs_untouched()


@st.composite
def _column_selections(draw, d):
    kind = draw(st.sampled_from(["int", "slice", "mask"]))
    rng = np.random.default_rng(draw(SEEDS))
    if kind == "int":
        return rng.permutation(d)[: int(rng.integers(1, d + 1))]
    if kind == "mask":
        mask = rng.random(d) < 0.5
        mask[rng.integers(d)] = True
        return mask
    return slice(draw(st.integers(0, d - 1)), None, draw(st.sampled_from([1, 2, -1])))


@property_settings(60)
@given(data=st.data(), seed=SEEDS)
def test_row_and_column_selection(backend, data, seed):
    case = data.draw(cases(select=False, transpose=False))
    nm, expected = on_backend(case.build(), backend), case.expected
    rows = data.draw(selections(expected.shape[0]))
    columns = data.draw(_column_selections(expected.shape[1]))
    sub = nm[rows][:, columns]
    assert type(sub) is type(nm)
    assert_matches(
        sub, expected[rows][:, columns], seed, what="nm[idx][:, col_idx]", backend=backend
    )
    assert_matches(
        nm[:, columns], expected[:, columns], seed, what="nm[:, col_idx]", backend=backend
    )
    if isinstance(rows, slice) or isinstance(columns, slice):
        assert_matches(
            nm[rows, columns],
            expected[rows, columns],
            seed,
            what="nm[idx, col_idx]",
            backend=backend,
        )
    else:  # two index arrays select cells pointwise, as in NumPy (or do not broadcast)
        try:
            reference = expected[rows, columns]
        except IndexError:
            with pytest.raises(IndexError, match="broadcast|shape"):
                nm[rows, columns]
        else:
            assert_close(
                nm[rows, columns], reference, what="nm[idx, col_idx] pointwise", backend=backend
            )
    case.scenario.assert_inputs_untouched()


def _index_vectors(nm):
    return [None if p.rows is None else np.array(to_host(p.rows)) for p in nm.parts]


def _assert_views_of(sub, nm, rows):
    """Each part of ``sub`` (= nm[rows], a slice of step 1) shares its parent's index vector, or
    is the identity over a view of the parent's fact source, or (a fact table with a source that
    is not a contiguous view) takes the rows as an index vector; every cache is its own."""
    for part, parent in zip(sub.parts, nm.parts, strict=True):
        ind, parent_ind = part.indicator, parent.indicator
        assert ind is not parent_ind and ind._cache is not parent_ind._cache
        if not parent_ind.is_identity:
            assert _shares_memory(ind.rows, parent_ind.rows), f"{part.name}: index vector copied"
        elif all(q.slices_to_view() for q in nm.parts if q.indicator is parent_ind):
            assert ind.is_identity and ind.n_rows == len(rows)
            assert _shares_memory(part.source, parent.source), f"{part.name}: source copied"
        else:
            assert np.array_equal(to_host(ind.rows), rows)
        if not ind.is_identity:
            own = to_host(ind.rows)
            expected = np.bincount(own[own >= 0], minlength=ind.n_source)
            assert np.array_equal(to_host(ind.counts()), expected)


@property_settings(60)
@given(data=st.data(), seed=SEEDS)
def test_contiguous_slice_shares_index_vectors(backend, data, seed):
    """nm[a:b] holds views of nm's index vectors (and of a dense fact source), matches the table's
    rows through every operator, and leaves nm as it was."""
    snowflake = data.draw(st.booleans())
    scenario = data.draw(snowflakes() if snowflake else scenarios())
    nm, expected = on_backend(scenario.build(), backend), scenario.dense
    selection = data.draw(contiguous_slices(expected.shape[0]))
    before = _index_vectors(nm)
    sub = nm[selection]
    _assert_views_of(sub, nm, np.arange(expected.shape[0])[selection])
    table = expected[selection]
    assert_matches(sub, table, seed, what="nm[a:b]", backend=backend)
    a, b = affine_vectors(np.random.default_rng(seed), expected.shape[1])
    assert_matches(
        sub * on_backend(a, backend) + on_backend(b, backend),
        table * a + b,
        seed,
        what="nm[a:b] * a + b",
        backend=backend,
    )
    assert_close(sub.crossprod(), table.T @ table, what="crossprod of nm[a:b]", backend=backend)
    assert_close(sub.T.crossprod(), table @ table.T, what="nm[a:b] @ nm[a:b].T", backend=backend)
    assert_close(sub.var(axis=0), table.var(axis=0), what="var of nm[a:b]", backend=backend)
    assert_close(np.exp(sub).sum(axis=1), np.exp(table).sum(axis=1), backend=backend)
    assert_matches(sub[1:], table[1:], seed, what="nm[a:b][1:]", backend=backend)
    assert_matches(nm.T[:, selection].T, table, seed, what="nm.T[:, a:b]", backend=backend)
    for kept, was in zip(_index_vectors(nm), before, strict=True):
        assert (kept is None and was is None) or np.array_equal(kept, was)
    assert_matches(nm, expected, seed, what="nm after slicing it", backend=backend)
    scenario.assert_inputs_untouched()


def test_fits_on_a_slice_match_the_gathered_rows(small_star):
    """A fit on nm[:k] is the fit on the same rows gathered, and leaves nm unchanged."""
    from ilargi import GradientBoostingRegressor, Ridge

    nm, table = small_star
    before = _index_vectors(nm)
    k = 5
    y = np.linspace(-1.0, 2.0, table.shape[0])
    sliced, gathered = nm[:k], nm[np.arange(k)]
    ridge = Ridge(alpha=0.5).fit(sliced, y[:k])
    assert_close(ridge.coef_, Ridge(alpha=0.5).fit(gathered, y[:k]).coef_)
    params = dict(n_estimators=3, num_leaves=3, min_child_samples=1)
    trees = GradientBoostingRegressor(**params).fit(sliced, y[:k])
    reference = GradientBoostingRegressor(**params).fit(gathered, y[:k])
    assert_close(trees.predict(nm[k - 2 :]), reference.predict(nm[k - 2 :]))
    for kept, was in zip(_index_vectors(nm), before, strict=True):
        assert (kept is None and was is None) or np.array_equal(kept, was)
    assert_matches(nm, table, what="nm after fits on nm[:k]")


@pytest.mark.parametrize(
    "selection",
    [slice(-3, None), slice(None, None, -1), slice(-1, -6, -2), slice(2, 2), slice(10, 20)],
)
def test_slices_follow_numpy(backend, selection, small_star):
    nm, table = small_star
    sub = on_backend(nm, backend)[selection]
    assert sub.shape == table[selection].shape
    if table[selection].size:
        assert_matches(sub, table[selection], what=f"nm[{selection}]", backend=backend)
    else:
        ones = np.ones(table.shape[1])
        assert_close(sub @ on_backend(ones, backend), table[selection] @ ones, backend=backend)


@pytest.mark.parametrize("idx", [[-1, 0, -2], [-6, 5], [-3]])
def test_negative_indices_follow_numpy(backend, idx, small_star):
    """-1 selects the last row, as in NumPy; it is never read as 'absent'."""
    nm, table = small_star
    idx = np.array(idx)
    assert_matches(
        on_backend(nm, backend)[idx], table[idx], what="nm[negative indices]", backend=backend
    )
    assert_matches(
        on_backend(nm, backend).T[:, idx],
        table[idx].T,
        what="nm.T[:, negative indices]",
        backend=backend,
    )


def test_empty_selection(backend, small_star):
    nm, table = small_star
    sub = on_backend(nm, backend)[np.array([], dtype=np.int64)]
    ones = np.ones(table.shape[1])
    assert sub.shape == (0, table.shape[1])
    assert_close(sub @ on_backend(ones, backend), np.zeros(0), backend=backend)
    assert_close(sub.sum(axis=0), np.zeros(table.shape[1]), backend=backend)
    assert_close(sub.materialize(), np.zeros((0, table.shape[1])), backend=backend)
