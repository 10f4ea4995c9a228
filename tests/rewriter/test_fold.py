"""Folded gathers: dimensions whose rows are functions of a finer dimension's (snowflakes).

rules.folds lets a coarse table ride on its host's n-long gather and segment-sum (I_c = I_h·F). The
rewrite is valid only when every row of the host's source meets one coarse row and the coarse table is
absent wherever the host is; these tests check both that it is applied when it holds and that every
operator built on it equals the materialized table either way, on each backend (tests/backends.py).
"""

from hypothesis import event, given
from hypothesis import strategies as st

from ilargi.rewriter import rules
from tests.backends import on_backend
from tests.strategies import assert_close, cases, dense_operand, property_settings, snowflakes

SEEDS = st.integers(0, 2**32 - 1)


def _foldable(scenario, nm):
    """Whether the first coarse level factors through the fine one (the strategy's construction),
    at the heights of the matrix's sources (cut to their used rows where that halves them)."""
    fine, coarse = scenario.rows[1], scenario.rows[2]
    n_fine, n_coarse = (nm.parts[p].indicator.n_source for p in (1, 2))
    present_without_host = bool(((fine < 0) & (coarse >= 0)).any())
    return not present_without_host and n_coarse < n_fine and 2 * n_fine <= scenario.shape[0]


@property_settings(60)
@given(scenario=snowflakes())
def test_folds_apply_exactly_when_the_rows_factor(backend, scenario):
    nm = on_backend(scenario.build(), backend)
    folded = {
        id(groups[c][0].indicator)
        for groups in [rules.by_indicator(nm.parts)]
        for c, _, _ in rules.folds(groups)
    }
    foldable = _foldable(scenario, nm)
    event(f"foldable: {foldable}")
    assert (id(nm.parts[2].indicator) in folded) == foldable


@property_settings(80)
@given(case=cases(snowflake=True), m=st.sampled_from([None, 1, 3]), seed=SEEDS)
def test_products_on_snowflakes(backend, case, m, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    rng_shape = (expected.shape[1],) if m is None else (expected.shape[1], m)
    x = dense_operand(seed, rng_shape)
    assert_close(nm @ on_backend(x, backend), expected @ x, what="T @ x", backend=backend)
    y = dense_operand(seed + 1, (expected.shape[0],) if m is None else (expected.shape[0], m))
    assert_close(nm.T @ on_backend(y, backend), expected.T @ y, what="T.T @ y", backend=backend)
    assert_close(nm.sum(axis=1), expected.sum(axis=1), what="row sums", backend=backend)
    case.scenario.assert_inputs_untouched()


@property_settings(40)
@given(case=cases(snowflake=True, transpose=False), seed=SEEDS)
def test_gramvec_and_crossprod_on_snowflakes(backend, case, seed):
    nm, expected = on_backend(case.build(), backend), case.expected
    n, d = expected.shape
    y, v = dense_operand(seed, (d,)), dense_operand(seed + 1, (n,))
    y_, v_ = on_backend(y, backend), on_backend(v, backend)
    assert_close(
        nm.gramvec(y_, v_, alpha=0.5),
        0.5 * expected.T @ (v * (expected @ y)),
        what="gramvec",
        backend=backend,
    )
    assert_close(
        nm.crossprod(v_), expected.T @ (v[:, None] * expected), what="crossprod", backend=backend
    )
    assert_close(
        nm.crossprod(), expected.T @ expected, what="unweighted crossprod", backend=backend
    )
