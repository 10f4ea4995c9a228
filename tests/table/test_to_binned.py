"""Table.to_binned: a column at a time, the same bins and codes as binning ``to_matrix``'s matrix.

For random joins (every join kind, snowflakes, unions, overlapping columns), every missing-value
policy and both categorical encodings, ``to_binned(fit_rows=s)`` must give the bins and ranges of
``BinnedMatrix.from_matrix(X[s])`` and, for every target row, the codes that binning X with those
bins gives; and no two columns' matrices may be held at once.
"""

import gc
import weakref

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ilargi.table.encode as encode
from ilargi.rewriter.histograms import BinnedMatrix
from ilargi.table import Table, concat
from tests.table.test_table import HOWS, frames, snowflakes

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MISSING = ["zero", "indicator", "mean", "nan"]


def assert_binned_as_the_matrix(table, data, categorical="onehot", missing="zero"):
    """to_binned against from_matrix of to_matrix, with training rows drawn from ``data``."""
    X, y = table.to_matrix(categorical=categorical, missing=missing)
    if X.shape[1] == 0 or X.shape[0] == 0:
        return
    n = X.shape[0]
    lo = data.draw(st.integers(0, n - 1), label="lo")
    hi = data.draw(st.integers(lo + 1, n), label="hi")
    B, y_binned = table.to_binned(categorical=categorical, missing=missing, fit_rows=slice(lo, hi))
    assert y_binned is None and y is None
    assert B.shape == X.shape and B.columns == X.columns
    assert B.binning == (255, 3)
    fitted = BinnedMatrix.from_matrix(X[lo:hi])
    assert len(B.bounds) == len(fitted.bounds)
    for j, (got, expected) in enumerate(zip(B.bounds, fitted.bounds)):
        np.testing.assert_array_equal(got, expected, err_msg=X.columns[j])
    assert B.ranges == fitted.ranges
    np.testing.assert_array_equal(B[lo:hi].toarray(), fitted.toarray())
    every_row = BinnedMatrix.from_matrix(X, bounds=fitted.bounds)
    np.testing.assert_array_equal(B.toarray(), every_row.toarray())
    return B


@SETTINGS
@given(
    snowflakes(),
    st.tuples(st.sampled_from(HOWS), st.sampled_from(HOWS)),
    st.sampled_from(MISSING),
    st.sampled_from(["onehot", "ordinal"]),
    st.data(),
)
def test_a_snowflake_binned_as_read_equals_its_matrix_binned(
    tables, hows, missing, categorical, data
):
    how1, how2 = hows
    fact, dim1, dim2 = tables
    table = (
        Table(fact, name="fact")
        .merge(Table(dim1, name="d1"), on="k1", how=how1)
        .merge(Table(dim2, name="d2"), on="k2", how=how2)
    )
    assert_binned_as_the_matrix(table, data, categorical, missing)


@SETTINGS
@given(
    st.lists(frames(("k",), "", string_keys=False), min_size=1, max_size=3),
    st.tuples(st.sampled_from(["first", "coalesce"]), st.sampled_from(HOWS)),
    st.sampled_from(MISSING),
    st.data(),
)
def test_unions_and_overlapping_columns_binned_as_read(parts, rule_and_how, missing, data):
    rule, how = rule_and_how
    left = concat(parts)
    right = parts[0].rename(columns={"x": "rx", "s": "rs"})
    table = left.merge(right, on="k", how=how, overlap=rule)
    assert_binned_as_the_matrix(table, data, missing=missing)


def _star(n=400, seed=0):
    import pandas as pd

    rng = np.random.default_rng(seed)
    fact = pd.DataFrame(
        {
            "k": rng.integers(0, 30, n),
            "x": rng.normal(size=n),
            "c": rng.choice(["a", "b", "c"], n),
            "y": rng.normal(size=n),
        }
    )
    dim = pd.DataFrame(
        {"k": np.arange(25), "z": rng.normal(size=25), "t": rng.choice(["u", "v"], 25)}
    )
    return Table(fact, name="fact").merge(Table(dim, name="dim"), on="k", how="left")


def test_the_target_and_the_columns_come_as_to_matrix_gives_them():
    table = _star()
    X, y = table.to_matrix(["z", "c", "x"], target="y", categorical="ordinal")
    B, y_binned = table.to_binned(["z", "c", "x"], target="y", categorical="ordinal")
    np.testing.assert_array_equal(y_binned, y)
    assert B.columns == X.columns == ["z", "c", "x"]
    np.testing.assert_array_equal(B.toarray(), BinnedMatrix.from_matrix(X).toarray())


def test_no_two_columns_are_held_at_once(monkeypatch):
    """Each column's matrix is let go before the next is encoded: the sources' float64 blocks
    never exist together."""
    made = []
    encode_column = encode.to_matrix

    def watched(*args, **kwargs):
        gc.collect()
        assert all(ref() is None for ref in made), "an earlier column's matrix is still held"
        X, y = encode_column(*args, **kwargs)
        made.append(weakref.ref(X))
        return X, y

    monkeypatch.setattr(encode, "to_matrix", watched)
    B, _ = _star().to_binned(["x", "c", "z", "t"], target="y", categorical="ordinal")
    assert len(made) == 4 and B.shape == (400, 4)


def test_bins_given_bin_new_rows_as_the_training_rows():
    table = _star()
    train, _ = table.to_binned(["x", "z", "c"], target="y", max_bin=16, min_data_in_bin=5)
    again, _ = table.to_binned(["x", "z", "c"], target="y", bounds=train.bounds)
    assert again.binning is None and again.ranges is None
    np.testing.assert_array_equal(again.toarray(), train.toarray())


def test_bad_arguments_are_refused_with_the_reason():
    table = _star()
    with pytest.raises(ValueError, match="max_bin must be in"):
        table.to_binned(["x"], max_bin=300)
    with pytest.raises(ValueError, match="the bins are for 1"):
        table.to_binned(["x", "z"], bounds=[np.array([0.0, np.inf])])
    with pytest.raises(ValueError, match="not columns of table"):
        table.to_binned(["nope"])
    with pytest.raises(ValueError, match="no columns to encode"):
        table.to_binned([])
    B, _ = table.to_binned(["x"])
    with pytest.raises(TypeError, match="slice of rows"):
        B[::2]
    with pytest.raises(TypeError, match="integer positions or a boolean mask"):
        B[[0.5, 1.5]]
    with pytest.raises(IndexError, match="outside the 400 rows"):
        B[[0, 400]]
    np.testing.assert_array_equal(B[[3, 1, -1]].toarray(), B.toarray()[[3, 1, -1]])
    np.testing.assert_array_equal(
        B[B.toarray()[:, 0] > 2].toarray(), B.toarray()[B.toarray()[:, 0] > 2]
    )
