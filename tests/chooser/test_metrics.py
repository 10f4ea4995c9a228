"""chooser.metrics.evaluate: each score against a hand computation, and its boundary values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ilargi.chooser.metrics import TIE, evaluate


def test_scores_of_a_small_example_by_hand():
    t_fact = [1.0, 4.0, 2.0, 10.0]
    t_mat = [3.0, 2.0, 2.04, 5.0]
    decided = [True, True, False, True]  # right, wrong, a near-tie (wrong but within 5 %), wrong
    scores = evaluate(t_fact, t_mat, decided)
    chosen = np.array([1.0, 4.0, 2.04, 10.0])
    best, worst = np.array([1.0, 2.0, 2.0, 5.0]), np.array([3.0, 4.0, 2.04, 10.0])
    assert scores["accuracy"] == 0.25
    assert scores["tie_accuracy"] == 0.5  # the right one and the near-tie
    assert scores["time_saved"] == pytest.approx((worst - chosen).sum() / (worst - best).sum())
    assert scores["worst_regret"] == pytest.approx(2.0)
    assert scores["total_seconds"] == pytest.approx(chosen.sum())


def test_the_oracle_and_its_opposite():
    t_fact, t_mat = np.array([1.0, 5.0, 2.0]), np.array([2.0, 1.0, 3.0])
    oracle = t_fact < t_mat
    best = evaluate(t_fact, t_mat, oracle)
    assert (best["accuracy"], best["tie_accuracy"], best["time_saved"], best["worst_regret"]) == (
        1.0,
        1.0,
        1.0,
        1.0,
    )
    worst = evaluate(t_fact, t_mat, ~oracle)
    assert worst["accuracy"] == 0.0 and worst["time_saved"] == 0.0
    assert worst["worst_regret"] == pytest.approx(5.0)


def test_equal_times_save_everything_there_is_to_save():
    scores = evaluate([1.0, 2.0], [1.0, 2.0], [False, True])
    assert scores["time_saved"] == 1.0 and scores["worst_regret"] == 1.0
    assert scores["tie_accuracy"] == 1.0


def test_tie_threshold_is_five_percent():
    assert TIE == 0.05
    inside = evaluate([1.0], [1.04], [False])
    outside = evaluate([1.0], [1.06], [False])
    assert inside["tie_accuracy"] == 1.0 and outside["tie_accuracy"] == 0.0


@given(
    st.lists(
        st.tuples(st.floats(0.01, 100), st.floats(0.01, 100), st.booleans()),
        min_size=1,
        max_size=30,
    )
)
def test_bounds_and_consistency(rows):
    t_fact, t_mat, decided = (np.array(column) for column in zip(*rows))
    scores = evaluate(t_fact, t_mat, decided)
    # A right decision picks the best plan, so it is within the tie margin too.
    assert 0.0 <= scores["accuracy"] <= scores["tie_accuracy"] <= 1.0
    assert -1e-12 <= scores["time_saved"] <= 1.0 + 1e-12
    assert scores["worst_regret"] >= 1.0
    chosen = np.where(decided, t_fact, t_mat)
    assert scores["total_seconds"] == pytest.approx(chosen.sum())
    assert scores["worst_regret"] == pytest.approx((chosen / np.minimum(t_fact, t_mat)).max())
