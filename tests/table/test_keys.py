"""Join keys of different kinds, by hand: what pandas refuses, ilargi refuses with pandas' message naming
both columns; what pandas accepts, ilargi joins with pandas' semantics, row order and dtypes -- NaT and
categorical keys included (``test_fuzz.py`` draws thousands more)."""

import datetime as dt
import re

import numpy as np
import pandas as pd
import pytest

from ilargi.table import Table, concat

HOWS = ["inner", "left", "right", "outer"]
DAYS = pd.to_datetime(["2020-01-01", "2020-01-02", None])

REFUSED = {
    "tz-aware vs naive datetimes": (
        DAYS.tz_localize("UTC"),
        DAYS,
        "datetime64[us, UTC] and datetime64[us]",
    ),
    "naive vs tz-aware datetimes": (
        DAYS,
        DAYS.tz_localize("Europe/Paris"),
        "and datetime64[us, Europe/Paris]",
    ),
    "datetime vs timedelta": (
        DAYS,
        pd.to_timedelta([1, 2, None], unit="D"),
        "datetime64[us] and timedelta64",
    ),
    "timedelta vs datetime": (pd.to_timedelta([1, 2, None], unit="D"), DAYS, "timedelta64"),
    "datetime vs date objects": (
        DAYS,
        pd.Series([dt.date(2020, 1, 1), None, dt.date(2020, 1, 2)], dtype=object),
        "datetime64[us] and object",
    ),
    "numbers vs strings": (pd.Series([1, 2, 3]), pd.Series(["1", "2", "3"]), "int64 and str"),
    "floats vs object strings": (
        pd.Series([1.0, np.nan, 3.0]),
        pd.Series(["a", None, "c"], dtype=object),
        "float64 and object",
    ),
    "nullable ints vs strings": (
        pd.Series([1, None, 3], dtype="Int64"),
        pd.Series(["1", "2", "3"]),
        "Int64 and str",
    ),
    "datetime vs integers": (DAYS, pd.Series([1, 2, 3]), "datetime64[us] and int64"),
    "datetime vs bool": (DAYS, pd.Series([True, False, True]), "datetime64[us] and bool"),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("how", HOWS)
def test_pandas_refusals_name_both_columns(case, how):
    left_key, right_key, dtypes = REFUSED[case]
    left = pd.DataFrame({"when": left_key, "x": range(3)})
    right = pd.DataFrame({"day": right_key, "y": range(3)})
    with pytest.raises(ValueError, match="You are trying to merge on"):
        left.merge(right, left_on="when", right_on="day", how=how)
    with pytest.raises(
        ValueError,
        match=rf"You are trying to merge on .*{re.escape(dtypes)}.* columns for key "
        rf"'when': left column 'when' of table 'fact' and right column 'day' "
        rf"of table 'calendar'",
    ):
        Table(left, name="fact").merge(
            Table(right, name="calendar"), left_on="when", right_on="day", how=how
        )


ACCEPTED = {
    "int vs float": (pd.Series([1, 2, 3]), pd.Series([2.0, np.nan, 1.0])),
    "int64 vs int8": (pd.Series([1, 2, 3]), pd.Series([3, 1, 1], dtype="int8")),
    "int64 vs uint8": (pd.Series([1, 2, 3]), pd.Series([3, 1, 7], dtype="uint8")),
    "int vs nullable Int64": (pd.Series([1, 2, 3]), pd.Series([2, None, 3], dtype="Int64")),
    "bool vs int": (pd.Series([True, False, True]), pd.Series([1, 0, 5])),
    "bool vs strings": (pd.Series([True, False, True]), pd.Series(["True", "a", None])),
    "categoricals with other categories": (
        pd.Series(pd.Categorical(["a", "b", None])),
        pd.Series(pd.Categorical(["b", "c", "a"], categories=["c", "b", "a"])),
    ),
    "categorical vs strings": (
        pd.Series(pd.Categorical(["a", "b", None])),
        pd.Series(["b", None, "z"]),
    ),
    "categorical vs integers": (pd.Series(pd.Categorical(["a", "b", "a"])), pd.Series([1, 2, 3])),
    "datetimes of other units": (DAYS, DAYS.astype("datetime64[s]")),
    "datetimes of other time zones": (DAYS.tz_localize("UTC"), DAYS.tz_localize("Europe/Paris")),
    "dates vs strings": (
        pd.Series([dt.date(2020, 1, 1), None, dt.date(2020, 1, 2)], dtype=object),
        pd.Series(["2020-01-01", "x", None]),
    ),
    "object ints vs floats": (pd.Series([1, None, 3], dtype=object), pd.Series([1.0, 3.0, np.nan])),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("sort", [False, True])
def test_pandas_semantics_where_pandas_accepts(case, how, sort):
    left_key, right_key = ACCEPTED[case]
    left = pd.DataFrame({"k": left_key, "x": range(3)})
    right = pd.DataFrame({"k": right_key, "y": [10, 20, 30]})
    expected = left.merge(right, on="k", how=how, sort=sort)
    got = (
        Table(left, name="l").merge(Table(right, name="r"), on="k", how=how, sort=sort).to_pandas()
    )
    if case == "categoricals with other categories" and (how == "outer" or sort):
        # pandas orders keys the two sides order differently by its join path (documented in Table.merge)
        got, expected = (
            frame.sort_values(["x", "y"], ignore_index=True) for frame in (got, expected)
        )
    pd.testing.assert_frame_equal(got, expected)


def test_keys_that_cannot_be_sorted():
    left = pd.DataFrame(
        {"k": pd.Series([dt.date(2020, 1, 2), dt.date(2020, 1, 1)], dtype=object), "x": [1, 2]}
    )
    right = pd.DataFrame({"k": [1, 2], "y": [3, 4]})
    for how in ["inner", "left", "right"]:  # pandas accepts dates vs ints (nothing matches)
        pd.testing.assert_frame_equal(
            Table(left).merge(right, on="k", how=how).to_pandas(),
            left.merge(right, on="k", how=how),
        )
    with pytest.raises(TypeError, match="not supported between"):
        left.merge(right, on="k", how="outer")  # ... but cannot sort them
    message = (
        r"cannot merge on left column 'k' of table 'dates' \(object\) and right column 'k' of table "
        r"'right' \(int64\): .*'<' not supported"
    )
    for frame in (left, left.iloc[::-1]):
        # (pandas joins the sorted frame on its Index.join path, in an order of its own; ilargi
        # always refuses to sort keys that cannot be compared -- documented in Table.merge)
        with pytest.raises(TypeError, match=message):
            Table(frame, name="dates").merge(right, on="k", how="outer")
        with pytest.raises(TypeError, match=message):
            Table(frame, name="dates").merge(right, on="k", sort=True)


def test_nat_keys_sort_first_in_an_outer_join_as_in_pandas():
    left = pd.DataFrame({"k": pd.to_datetime(["2020-01-02", None, "2020-01-01"]), "x": [1, 2, 3]})
    right = pd.DataFrame({"k": pd.to_datetime([None, "2020-01-03", "2020-01-02"]), "y": [4, 5, 6]})
    expected = left.merge(right, on="k", how="outer")
    assert (
        expected["k"].isna().tolist()[0]
    )  # pandas compares datetimes as int64: NaT is the smallest
    for how in HOWS:
        for sort in (False, True):
            pd.testing.assert_frame_equal(
                Table(left).merge(right, on="k", how=how, sort=sort).to_pandas(),
                left.merge(right, on="k", how=how, sort=sort),
            )
    floats = left.assign(k=[2.0, np.nan, 1.0])  # every other key puts missing values last
    pd.testing.assert_frame_equal(
        Table(floats).merge(floats, on="k", how="outer").to_pandas(),
        floats.merge(floats, on="k", how="outer"),
    )


@pytest.mark.parametrize("how", HOWS)
def test_categorical_keys_with_other_categories_in_right_and_outer_joins(how):
    # today's crash: "Cannot set a Categorical with another, without identical categories"
    left = pd.DataFrame(
        {"k": pd.Categorical(["a", "b", "a"], categories=["a", "b"]), "x": [1, 2, 3]}
    )
    right = pd.DataFrame({"k": pd.Categorical(["b", "c"], categories=["b", "c"]), "y": [4, 5]})
    got = Table(left).merge(right, on="k", how=how).to_pandas()
    pd.testing.assert_frame_equal(got, left.merge(right, on="k", how=how))
    same = right.assign(
        k=pd.Categorical(["b", "a"], categories=["a", "b"])
    )  # one dtype: stays categorical
    got = Table(left).merge(same, on="k", how=how).to_pandas()
    assert isinstance(got["k"].dtype, pd.CategoricalDtype)
    pd.testing.assert_frame_equal(got, left.merge(same, on="k", how=how))


def test_concat_of_categoricals_and_other_dtypes():
    parts = [
        pd.DataFrame({"c": pd.Categorical(["a", None]), "n": [1, 2]}),
        pd.DataFrame({"c": pd.Categorical(["z"]), "t": pd.to_datetime(["2020-01-01"])}),
        pd.DataFrame({"n": pd.array([None, 3], dtype="Int64"), "b": [True, False]}),
    ]
    for chosen in ([0, 1], [0, 2], [1, 2], [0, 1, 2], [0, 0]):
        frames = [parts[i] for i in chosen]
        pd.testing.assert_frame_equal(
            concat(frames).to_pandas(), pd.concat(frames, ignore_index=True)
        )
        assert list(concat(frames).dtypes) == list(pd.concat(frames, ignore_index=True).dtypes)


def test_sort_orders_rows_by_key_like_pandas():
    left = pd.DataFrame({"k": [3, 1, 2, 1, np.nan], "x": range(5)})
    right = pd.DataFrame({"k": [1, 5, 1, np.nan, 3], "y": list("vwxyz")})
    for how in HOWS:
        pd.testing.assert_frame_equal(
            Table(left).merge(right, on="k", how=how, sort=True).to_pandas(),
            left.merge(right, on="k", how=how, sort=True),
        )
