"""The one owner-checked cache of derived structures (ilargi/metadata/cache.py)."""

import numpy as np

from ilargi.metadata import Indicator, Part
from ilargi.metadata.cache import cached


def test_an_entry_is_built_once_per_key():
    store, calls = {}, []
    for _ in range(3):
        assert cached(store, "k", lambda: calls.append(1) or "value") == "value"
    assert calls == [1]


def test_a_none_result_is_cached_too():
    store, calls = {}, []
    for _ in range(2):
        assert cached(store, "k", lambda: calls.append(1)) is None
    assert calls == [1]


def test_an_owner_is_compared_by_identity():
    store = {}
    first, equal = [1.0], [1.0]
    assert cached(store, "k", lambda: "first", owner=first) == "first"
    assert cached(store, "k", lambda: "equal", owner=equal) == "equal"
    assert cached(store, "k", lambda: "again", owner=first) == "first"


def test_a_reused_id_never_returns_a_stale_entry():
    store = {}
    owner = object()
    cached(store, "k", lambda: "old", owner=owner)
    # Forge what a garbage-collected owner whose id was reused would leave behind.
    (full_key,) = store
    store[full_key] = ((object(),), "stale")
    assert cached(store, "k", lambda: "fresh", owner=owner) == "fresh"


def test_tuple_owners_are_compared_element_by_element():
    store = {}
    a, b = object(), object()
    assert cached(store, "k", lambda: 1, owner=(a, b)) == 1
    assert cached(store, "k", lambda: 2, owner=(a, b)) == 1
    assert cached(store, "k", lambda: 3, owner=(b, a)) == 3


def test_indicator_and_part_caches():
    ind = Indicator(np.array([0, 1, 1, -1]), 2)
    source = np.array([[1.0], [np.nan]])
    assert ind.cached("x", lambda: 1) == 1 and ind.cached("x", lambda: 2) == 1
    part = Part("p", source, ind, np.array([0]), finite=False)
    assert part.cached("y", lambda: "plan", owner=(part,)) == "plan"
    assert part.cached("y", lambda: "other", owner=(part,)) == "plan"
    # summable is cached per source: a part with another source gets its own copy.
    assert part.summable() is part.summable()
    other = part.with_source(np.array([[np.inf], [2.0]]), finite=False)
    assert other.summable() is not part.summable()
    np.testing.assert_array_equal(other.summable(), [[np.inf], [2.0]])


def test_function_of_is_cached_per_coarse_indicator():
    fine = Indicator(np.array([0, 1, 1, 2]), 3)
    coarse = Indicator(np.array([1, 0, 0, 1]), 2)
    other = Indicator(np.array([1, 0, 1, 1]), 2)
    assert coarse.function_of(fine).tolist() == [1, 0, 1]
    assert other.function_of(fine) is None
    assert coarse.function_of(fine) is coarse.function_of(fine)
