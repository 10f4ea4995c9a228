"""Folded gathers: dimensions whose rows are functions of a finer dimension's (snowflakes).

rules.folds lets a coarse table ride on its host's n-long gather and segment-sum (I_c = I_h·F). The
rewrite is valid only when every row of the host's source meets one coarse row and the coarse table is
absent wherever the host is; these tests check both that it is applied when it holds and that every
operator built on it equals the materialized table either way.
"""
import numpy as np
from hypothesis import given, strategies as st

from ilargi.rewriter import rules
from tests.strategies import assert_close, cases, dense_operand, property_settings, snowflakes

SEEDS = st.integers(0, 2**32 - 1)


def _foldable(scenario):
    """Whether the first coarse level factors through the fine one (the strategy's construction)."""
    fine, coarse = scenario.rows[1], scenario.rows[2]
    n_fine, n_coarse = scenario.sources[1].shape[0], scenario.sources[2].shape[0]
    present_without_host = bool(((fine < 0) & (coarse >= 0)).any())
    return not present_without_host and n_coarse < n_fine and 2 * n_fine <= scenario.shape[0]


@property_settings(60)
@given(scenario=snowflakes())
def test_folds_apply_exactly_when_the_rows_factor(scenario):
    nm = scenario.build()
    folded = {id(groups[c][0].indicator) for groups in [rules.by_indicator(nm.parts)]
              for c, _, _ in rules.folds(groups)}
    assert (id(nm.parts[2].indicator) in folded) == _foldable(scenario)


@property_settings(80)
@given(case=cases(snowflake=True), m=st.sampled_from([None, 1, 3]), seed=SEEDS)
def test_products_on_snowflakes(case, m, seed):
    nm, expected = case.build(), case.expected
    rng_shape = (expected.shape[1],) if m is None else (expected.shape[1], m)
    x = dense_operand(seed, rng_shape)
    assert_close(nm @ x, expected @ x, what="T @ x")
    y = dense_operand(seed + 1, (expected.shape[0],) if m is None else (expected.shape[0], m))
    assert_close(nm.T @ y, expected.T @ y, what="T.T @ y")
    assert_close(nm.sum(axis=1), expected.sum(axis=1), what="row sums")
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases(snowflake=True, transpose=False), seed=SEEDS)
def test_gramvec_and_crossprod_on_snowflakes(case, seed):
    nm, expected = case.build(), case.expected
    n, d = expected.shape
    y, v = dense_operand(seed, (d,)), dense_operand(seed + 1, (n,))
    assert_close(nm.gramvec(y, v, alpha=0.5), 0.5 * expected.T @ (v * (expected @ y)), what="gramvec")
    assert_close(nm.crossprod(v), expected.T @ (v[:, None] * expected), what="crossprod")
