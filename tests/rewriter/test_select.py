"""Row (and column) selection: nm[idx] is exact, shares the sources, and composes with every operator."""
import numpy as np
import pytest
from hypothesis import given, strategies as st

from tests.strategies import (affine_vectors, assert_close, assert_matches, cases, dense_operand, property_settings,
                        scenarios, selections)

SEEDS = st.integers(0, 2**32 - 1)


def _source_ids(nm):
    return {id(part.source) for part in nm.parts}


@property_settings(80)
@given(data=st.data(), seed=SEEDS)
def test_row_selection_is_exact_and_shares_sources(data, seed):
    case = data.draw(cases(select=False))
    nm, expected = case.build(), case.expected
    selection = data.draw(selections(expected.shape[0]))
    selection_before = np.array(selection, copy=True) if not isinstance(selection, slice) else selection
    sub = nm[selection]  # on a transposed view: a column selection of T
    assert type(sub) is type(nm)
    if not case.transpose:
        assert _source_ids(sub) <= _source_ids(nm), "row selection copied a source"
    assert_matches(sub, expected[selection], seed, what="nm[idx]")
    assert_matches(nm, expected, seed, what="nm after selecting from it")
    if not isinstance(selection, slice):
        assert np.array_equal(np.asarray(selection), selection_before), "selection index was modified"
    case.scenario.assert_inputs_untouched()


@property_settings(50)
@given(data=st.data(), seed=SEEDS)
def test_selection_commutes_with_affine_state(data, seed):
    scenario = data.draw(scenarios())
    a, b = affine_vectors(np.random.default_rng(seed), scenario.shape[1])
    selection = data.draw(selections(scenario.shape[0]))
    nm = scenario.build()
    expected = (scenario.dense * a + b)[selection]
    assert_matches((nm * a + b)[selection], expected, seed, what="(nm * a + b)[idx]")
    assert_matches(nm[selection] * a + b, expected, seed, what="nm[idx] * a + b")


@property_settings(50)
@given(data=st.data(), seed=SEEDS)
def test_nested_selections(data, seed):
    case = data.draw(cases(select=True, transpose=False))
    nm, expected = case.build(), case.expected
    second = data.draw(selections(expected.shape[0]))
    assert_matches(nm[second], expected[second], seed, what="nm[idx1][idx2]")


@property_settings(60)
@given(data=st.data(), m=st.sampled_from([None, 1, 3]), seed=SEEDS)
def test_chain_affine_select_transpose_matmul(data, m, seed):
    """(nm * a + b)[idx].T @ Y, then the same matrix through crossprod, gramvec and reductions."""
    case = data.draw(cases(affine=True, select=True, transpose=True))
    nm, expected = case.build(), case.expected
    y = dense_operand(seed, (expected.shape[1],) if m is None else (expected.shape[1], m))
    assert_close(nm @ y, expected @ y, what="(nm * a + b)[idx].T @ Y")
    back = nm.T
    table = expected.T
    assert_close(back.crossprod(), table.T @ table, what="crossprod of selection")
    z = dense_operand(seed + 1, (table.shape[1],))
    assert_close(back.gramvec(z), table.T @ (table @ z), what="gramvec of selection")
    assert_close(back.var(axis=0), table.var(axis=0), what="var of selection")
    assert_close(np.exp(back)[::2] @ z, np.exp(table)[::2] @ z, what="exp, then slice, then @")
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
def test_row_and_column_selection(data, seed):
    case = data.draw(cases(select=False, transpose=False))
    nm, expected = case.build(), case.expected
    rows = data.draw(selections(expected.shape[0]))
    columns = data.draw(_column_selections(expected.shape[1]))
    sub = nm[rows, columns]
    assert type(sub) is type(nm)
    assert_matches(sub, expected[rows][:, columns], seed, what="nm[idx, col_idx]")
    assert_matches(nm[:, columns], expected[:, columns], seed, what="nm[:, col_idx]")
    case.scenario.assert_inputs_untouched()


@pytest.mark.parametrize("selection", [slice(-3, None), slice(None, None, -1), slice(-1, -6, -2),
                                       slice(2, 2), slice(10, 20)])
def test_slices_follow_numpy(selection, star):
    nm, table = star
    sub = nm[selection]
    assert sub.shape == table[selection].shape
    if table[selection].size:
        assert_matches(sub, table[selection], what=f"nm[{selection}]")
    else:
        assert_close(sub @ np.ones(table.shape[1]), table[selection] @ np.ones(table.shape[1]))


def test_negative_indices_follow_numpy_or_are_refused(star):
    """-1 selects the last row in NumPy; it must never be read as 'absent'."""
    nm, table = star
    idx = np.array([-1, 0, -2])
    try:
        sub = nm[idx]
    except (IndexError, ValueError) as error:
        assert str(error)
        return
    assert_matches(sub, table[idx], what="nm[negative indices]")


def test_empty_selection(star):
    nm, table = star
    sub = nm[np.array([], dtype=np.int64)]
    assert sub.shape == (0, table.shape[1])
    assert (sub @ np.ones(table.shape[1])).shape == (0,)
    assert_close(sub.sum(axis=0), np.zeros(table.shape[1]))
    assert sub.materialize().shape == (0, table.shape[1])


@pytest.fixture
def star():
    """A 6-row star (fact 2 cols + dimension 3 rows with one left-join miss), with affine state."""
    from ilargi import NormalizedMatrix
    fact = np.arange(12, dtype=float).reshape(6, 2)
    dim = np.array([[1.0, -1.0], [2.0, 0.0], [0.0, 5.0]])
    nm = NormalizedMatrix.from_parts([fact, dim], [None, np.array([2, 0, -1, 1, 2, 0])], [[0, 1], [3, 2]],
                                     (6, 4))
    table = np.array([[0.0, 1.0, 5.0, 0.0],
                      [2.0, 3.0, -1.0, 1.0],
                      [4.0, 5.0, 0.0, 0.0],
                      [6.0, 7.0, 0.0, 2.0],
                      [8.0, 9.0, 5.0, 0.0],
                      [10.0, 11.0, -1.0, 1.0]])
    a, b = np.array([1.0, 2.0, -1.0, 0.5]), np.array([0.0, 1.0, 0.0, -2.0])
    return nm * a + b, table * a + b
