"""The synthetic star/snowflake generator: sizes, determinism, join semantics against pandas, planted signal."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from ilargi.datasets import make_star, make_star_tables
from ilargi.datasets.synthetic import JOINS


def dense(matrix):
    return matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix)


def pandas_join(tables, join, n_dims):
    """The scenario joined by pandas.merge: the reference for make_star."""
    if join == "union":
        joined = pd.concat([tables["fact_0"], tables["fact_1"]], ignore_index=True)
    else:
        joined = tables["fact"]
    how = {"union": "left", "many_to_many": "inner"}.get(join, join)
    for i in range(1, n_dims + 1):
        joined = joined.merge(tables[f"dim{i}"], on=f"fk{i}", how=how)
    return joined


def sorted_rows(matrix):
    return matrix[np.lexsort(matrix.T[::-1])]


def assert_same_as_pandas(join, n_dims, **kwargs):
    nm, y = make_star(join=join, n_dims=n_dims, **kwargs)
    tables = make_star_tables(join=join, n_dims=n_dims, **kwargs)
    expected = pandas_join(tables, join, n_dims)[list(nm.columns)].fillna(0.0).to_numpy()
    actual = dense(nm.materialize())
    if join == "outer":  # documented: outer rows follow the left join, pandas sorts by key
        actual, expected = sorted_rows(actual), sorted_rows(expected)
    np.testing.assert_array_equal(actual, expected)
    assert y is None or len(y) == nm.shape[0]


scenarios = st.fixed_dictionaries(
    {
        "n_fact": st.integers(2, 60),
        "tuple_ratio": st.sampled_from([0.5, 1.0, 2.0, 3.5, 10.0]),
        "feature_ratio": st.sampled_from([0.5, 1.0, 2.0]),
        "n_dims": st.integers(1, 3),
        "d_fact": st.integers(1, 4),
        "density": st.sampled_from([1.0, 0.3]),
        "join": st.sampled_from(JOINS),
        "dangling": st.sampled_from([0.0, 0.1, 0.5]),
        "snowflake": st.booleans(),
        "random_state": st.integers(0, 2**32 - 1),
    }
)


@settings(max_examples=100, deadline=None)
@given(scenarios)
def test_matrix_equals_pandas_join_of_its_tables(scenario):
    assert_same_as_pandas(**scenario)


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("snowflake", [False, True])
def test_every_join_kind_equals_pandas(join, snowflake):
    assert_same_as_pandas(
        join,
        3,
        n_fact=300,
        tuple_ratio=3.0,
        d_fact=3,
        dangling=0.2,
        snowflake=snowflake,
        density=0.5,
        random_state=7,
    )


def test_sizes_follow_tuple_and_feature_ratio():
    tables = make_star_tables(
        n_fact=1000, tuple_ratio=5, feature_ratio=4, n_dims=2, d_fact=3, random_state=0
    )
    assert tables["fact"].shape == (1000, 3 + 2 + 1)  # features, fk1, fk2, y
    for i in (1, 2):
        assert tables[f"dim{i}"].shape == (200, 1 + 12)
        # every dimension row is referred to equally often: the tuple ratio exactly
        assert tables["fact"][f"fk{i}"].value_counts().eq(5).all()
    nm, y = make_star(
        n_fact=1000, tuple_ratio=5, feature_ratio=4, n_dims=2, d_fact=3, random_state=0
    )
    assert nm.shape == (1000, 3 + 12 + 12) and y.shape == (1000,)
    assert list(nm.columns) == [f"s{j}" for j in range(3)] + [
        f"r{i}_{j}" for i in (1, 2) for j in range(12)
    ]


def test_snowflake_levels_shrink_by_the_tuple_ratio():
    tables = make_star_tables(n_fact=800, tuple_ratio=4, n_dims=3, snowflake=True, random_state=0)
    assert [len(tables[f"dim{i}"]) for i in (1, 2, 3)] == [200, 50, 12]
    assert "fk2" in tables["dim1"] and "fk3" in tables["dim2"] and "fk2" not in tables["fact"]


def test_same_seed_same_scenario_other_seed_other_scenario():
    first = make_star_tables(n_fact=500, n_dims=2, join="left", dangling=0.1, random_state=3)
    again = make_star_tables(n_fact=500, n_dims=2, join="left", dangling=0.1, random_state=3)
    other = make_star_tables(n_fact=500, n_dims=2, join="left", dangling=0.1, random_state=4)
    for name in first:
        pd.testing.assert_frame_equal(first[name], again[name])
    assert not first["fact"].equals(other["fact"])
    nm1, y1 = make_star(n_fact=500, n_dims=2, join="left", dangling=0.1, random_state=3)
    nm2, y2 = make_star(n_fact=500, n_dims=2, join="left", dangling=0.1, random_state=3)
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(nm1.toarray(), nm2.toarray())
    np.testing.assert_array_equal(y1, first["fact"]["y"])


def dimension_rows(nm, name):
    (part,) = [part for part in nm.parts if part.name == name]
    return np.asarray(part.indicator.rows)


@pytest.mark.parametrize("join", ["left", "union"])
def test_left_join_marks_dangling_fact_rows_absent(join):
    nm, _ = make_star(n_fact=400, n_dims=2, join=join, dangling=0.25, random_state=1)
    tables = make_star_tables(n_fact=400, n_dims=2, join=join, dangling=0.25, random_state=1)
    fact = pd.concat(
        [tables[name] for name in tables if name.startswith("fact")], ignore_index=True
    )
    assert nm.shape[0] == 400
    for i in (1, 2):
        dangling = ~fact[f"fk{i}"].isin(tables[f"dim{i}"][f"fk{i}"]).to_numpy()
        assert dangling.sum() == 100
        np.testing.assert_array_equal(dimension_rows(nm, f"dim{i}") == -1, dangling)


def test_union_parts_cover_their_own_blocks():
    nm, _ = make_star(n_fact=101, join="union", random_state=0)
    first, second = dimension_rows(nm, "fact_0"), dimension_rows(nm, "fact_1")
    np.testing.assert_array_equal(first, np.r_[np.arange(50), np.full(51, -1)])
    np.testing.assert_array_equal(second, np.r_[np.full(50, -1), np.arange(51)])


def test_inner_join_drops_dangling_rows_and_outer_adds_unreferenced_keys():
    kwargs = dict(n_fact=400, tuple_ratio=2, n_dims=1, dangling=0.25, random_state=2)
    tables = make_star_tables(join="left", **kwargs)
    inner, y_inner = make_star(join="inner", **kwargs)
    outer, _ = make_star(join="outer", **kwargs)
    assert inner.shape[0] == 300
    assert outer.shape[0] == 400 + 50  # a quarter of the 200 keys is referred to by no fact row
    fact_rows = dimension_rows(outer, "fact")
    np.testing.assert_array_equal(fact_rows, np.r_[np.arange(400), np.full(50, -1)])
    kept = tables["fact"]["fk1"].isin(tables["dim1"]["fk1"]).to_numpy()
    np.testing.assert_array_equal(y_inner, tables["fact"]["y"].to_numpy()[kept])


def test_many_to_many_repeats_each_fact_row_once_per_matching_pair():
    nm, _ = make_star(n_fact=100, tuple_ratio=5, n_dims=2, join="many_to_many", random_state=0)
    assert nm.shape[0] == 100 * 2 * 2  # 20 dimension rows, 10 keys of two rows each


def test_planted_linear_signal_is_exact_without_noise():
    nm, y, w = make_star(
        n_fact=300, n_dims=2, join="left", dangling=0.1, noise=0.0, coef=True, random_state=5
    )
    np.testing.assert_allclose(y, dense(nm.materialize()) @ w, rtol=1e-9, atol=1e-12)


def test_planted_linear_noise_has_the_requested_scale():
    nm, y, w = make_star(n_fact=20_000, noise=0.5, coef=True, random_state=5)
    assert abs(np.std(y - dense(nm.materialize()) @ w) - 0.5) < 0.02


@pytest.mark.parametrize("density", [1.0, 0.2])
def test_planted_logistic_signal(density):
    nm, y, w = make_star(
        n_fact=2000, target="logistic", noise=0.0, coef=True, density=density, random_state=5
    )
    assert set(np.unique(y)) == {0.0, 1.0}
    np.testing.assert_array_equal(y, (dense(nm.materialize()) @ w > 0).astype(float))
    _, noisy = make_star(n_fact=2000, target="logistic", density=density, random_state=5)
    assert 0 < np.mean(noisy != y) < 0.5


def test_no_target():
    nm, y = make_star(n_fact=50, target=None, random_state=0)
    assert y is None and "y" not in make_star_tables(n_fact=50, target=None, random_state=0)["fact"]


def test_sparse_sources_are_csr_with_the_requested_density():
    nm, _ = make_star(n_fact=5000, tuple_ratio=1, d_fact=10, density=0.1, random_state=0)
    for part in nm.parts:
        assert sp.issparse(part.source) and part.source.format == "csr"
        assert abs(part.source.nnz / np.prod(part.source.shape) - 0.1) < 0.01


def test_outer_and_many_to_many_tables_carry_no_fact_target():
    for join in ("outer", "many_to_many"):
        assert "y" not in make_star_tables(n_fact=50, join=join, random_state=0)["fact"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(n_fact=0), "n_fact must be a positive integer"),
        (dict(n_fact=10.5), "n_fact must be a positive integer"),
        (dict(n_dims=0), "n_dims must be a positive integer"),
        (dict(d_fact=0), "d_fact must be a positive integer"),
        (dict(tuple_ratio=0), "tuple_ratio must be positive"),
        (dict(feature_ratio=-1), "feature_ratio must be positive"),
        (dict(density=0), r"density must be in \(0, 1\]"),
        (dict(dangling=1.0), r"dangling must be in \[0, 1\)"),
        (dict(join="cross"), "join must be one of"),
        (dict(join="union", n_fact=1), "union of two fact shards needs n_fact >= 2"),
        (dict(target="poisson"), "target must be one of"),
        (dict(noise=-1.0), "noise must be >= 0"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_star(**kwargs)
    with pytest.raises(ValueError, match=message):
        make_star_tables(**kwargs)
