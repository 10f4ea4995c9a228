"""Feature names from a NormalizedMatrix's columns, as scikit-learn takes them from a DataFrame:
``feature_names_in_`` set by a fit, ``get_feature_names_out`` following scikit-learn, and a later
call whose names differ warned or refused with scikit-learn's own messages."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.cluster import KMeans as SklearnKMeans
from sklearn.preprocessing import StandardScaler as SklearnStandardScaler

import ilargi
from ilargi import NormalizedMatrix
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler

NAMES = ["f0", "f1", "color=red", "color=blue", "size"]
Y = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0])


def star(columns=NAMES):
    S = np.arange(12.0).reshape(6, 2) / 10
    R = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]])
    fk = np.array([0, 1, 1, 0, 1, 0])
    return NormalizedMatrix.from_parts(
        [S, R], rows=[None, fk], cols=[[0, 1], [2, 3, 4]], shape=(6, 5), columns=columns
    )


ESTIMATORS = [
    LinearRegression(),
    Ridge(),
    LogisticRegression(),
    KMeans(n_clusters=2, random_state=0),
    GNMF(n_components=2, max_iter=5, random_state=0),
    StandardScaler(),
]


def fitted(estimator, X):
    y = Y if is_regressor(estimator) or is_classifier(estimator) else None
    return estimator.fit(X, y)


def call(estimator, X):
    return (estimator.transform if hasattr(estimator, "transform") else estimator.predict)(X)


@pytest.mark.parametrize("plan", ["factorized", "materialized"])
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_a_fit_on_named_columns_sets_feature_names_in(estimator, plan):
    model = clone(estimator)
    if "plan" in model.get_params():  # StandardScaler has no plan: it runs as its input is
        model.set_params(plan=plan)
    model = fitted(model, star())
    assert isinstance(model.feature_names_in_, np.ndarray)
    assert model.feature_names_in_.dtype == object
    assert model.feature_names_in_.tolist() == NAMES
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same names: no warning
        call(model, star())
        call(model, pd.DataFrame(star().materialize(), columns=NAMES))


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_without_names_there_is_no_attribute(estimator):
    assert not hasattr(fitted(estimator, star(None)), "feature_names_in_")
    assert not hasattr(fitted(estimator, star().materialize()), "feature_names_in_")
    model = fitted(estimator, star())
    fitted(model, star(None))  # a refit without names forgets the earlier fit's
    assert not hasattr(model, "feature_names_in_")


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_names_that_differ_are_checked_as_scikit_learn_does(estimator):
    model = fitted(estimator, star())
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        call(model, star().materialize())
    with pytest.warns(UserWarning, match="X does not have valid feature names"):
        call(model, star(None))
    renamed = NAMES[:-1] + ["weight"]
    with pytest.raises(ValueError, match="Feature names unseen at fit time:\n- weight"):
        call(model, star(renamed))
    with pytest.raises(ValueError, match="must be in the same order"):
        call(model, star(NAMES[::-1]))
    unnamed = fitted(estimator, star().materialize())
    with pytest.warns(UserWarning, match="X has feature names, but .* was fitted without"):
        call(unnamed, star())
    frame = fitted(estimator, pd.DataFrame(star().materialize(), columns=NAMES))
    call(frame, star())  # a DataFrame's names at fit, the matrix's later: the same names


def test_get_feature_names_out_follows_scikit_learn():
    X = star()
    frame = pd.DataFrame(X.materialize(), columns=NAMES)
    ours, theirs = StandardScaler().fit(X), SklearnStandardScaler().fit(frame)
    assert ours.get_feature_names_out().tolist() == theirs.get_feature_names_out().tolist()
    assert ours.get_feature_names_out().tolist() == NAMES
    with pytest.raises(ValueError, match="input_features is not equal to feature_names_in_"):
        ours.get_feature_names_out(NAMES[::-1])
    ours, theirs = KMeans(2, random_state=0).fit(X), SklearnKMeans(2, random_state=0).fit(frame)
    assert ours.get_feature_names_out().tolist() == theirs.get_feature_names_out().tolist()
    assert GNMF(2, max_iter=5, random_state=0).fit(X).get_feature_names_out().tolist() == [
        "gnmf0",
        "gnmf1",
    ]


def test_a_transposed_view_and_a_selection():
    X = star()
    assert StandardScaler().fit(X[:, [1, 3]]).feature_names_in_.tolist() == ["f1", "color=blue"]
    assert not hasattr(StandardScaler().fit(X.T.materialize().T), "feature_names_in_")


def test_a_table_s_matrix_names_its_features():
    sales = pd.DataFrame({"units": [1.0, 2.0, 3.0, 4.0], "store": [0, 1, 0, 1]})
    stores = pd.DataFrame({"store": [0, 1], "size": [10.0, 20.0]})
    joined = ilargi.Table(sales, name="sales").merge(
        ilargi.Table(stores, name="stores"), on="store"
    )
    X, _ = joined.to_matrix(columns=["units", "size"])
    assert StandardScaler().fit(X).feature_names_in_.tolist() == X.columns


def test_pandas_output_takes_the_names():
    scaler = StandardScaler().set_output(transform="pandas").fit(star())
    out = scaler.transform(star())
    assert isinstance(out, pd.DataFrame) and out.columns.tolist() == NAMES


def test_the_width_is_checked_after_the_names():
    model = Ridge().fit(star(None), Y)
    with pytest.raises(ValueError, match="X has 4 features, but Ridge is expecting 5"):
        model.predict(star(None)[:, [0, 1, 2, 3]])
    model = Ridge().fit(star(), Y)
    with pytest.raises(ValueError, match="seen at fit time, yet now missing:\n- size"):
        model.predict(star()[:, [0, 1, 2, 3]])


def test_an_evaluation_set_keeps_the_fits_feature_names():
    """A fit that checks an eval_set (X and y with reset=False) keeps the names it set."""
    model = ilargi.GradientBoostingRegressor(n_estimators=2, min_child_samples=1, plan="factorized")
    model.fit(star(), Y, eval_set=[(star(), Y)])
    assert model.feature_names_in_.tolist() == NAMES
    assert "feature_names=f0 f1" in model.model_to_string().replace("color=", "color_")
