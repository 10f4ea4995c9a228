"""What every estimator shares: persistence, scikit-learn composition, untouched inputs, progress."""

import io
import pickle

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline

from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler


@pytest.fixture(scope="module")
def star():
    X, y = make_star(
        1500, tuple_ratio=6, feature_ratio=2, n_dims=2, d_fact=4, target="logistic", random_state=3
    )
    return X, y


def fitted_models(X, y):
    return [
        LinearRegression(plan="factorized").fit(X, y),
        Ridge(alpha=2.0, solver="cg", plan="factorized").fit(X, y),
        LogisticRegression(plan="factorized").fit(X, y),
        LogisticRegression(solver="gd", max_iter=5, plan="factorized").fit(X, y),
        KMeans(3, random_state=0, plan="factorized").fit(X),
        GNMF(2, max_iter=20, random_state=0, plan="factorized").fit(abs(X)),
        StandardScaler().fit(X),
    ]


def outputs(model, X):
    if isinstance(model, GNMF):
        return model.transform(abs(X))
    if isinstance(model, StandardScaler):
        return model.transform(X).materialize()
    return model.predict(X)


def test_pickle_and_joblib_round_trips_are_exact(star):
    X, y = star
    for model in fitted_models(X, y):
        buffer = io.BytesIO()
        joblib.dump(model, buffer)
        buffer.seek(0)
        for restored in (pickle.loads(pickle.dumps(model)), joblib.load(buffer)):
            assert restored.get_params() == model.get_params()
            assert np.array_equal(outputs(restored, X), outputs(model, X)), type(model).__name__


def test_clone_keeps_parameters_and_drops_the_fit(star):
    X, y = star
    for model in fitted_models(X, y):
        copy = clone(model)
        assert copy.get_params() == model.get_params()
        assert not hasattr(copy, "n_features_in_")


def test_pipeline_and_grid_search_on_arrays(star):
    X, y = star
    table = X.materialize()
    pipeline = make_pipeline(StandardScaler(), LogisticRegression())
    search = GridSearchCV(pipeline, {"logisticregression__C": [0.01, 1.0]}, cv=3).fit(table, y)
    assert search.best_score_ > 0.6
    ridge = GridSearchCV(Ridge(), {"alpha": [0.1, 10.0]}, cv=3).fit(table, y)
    assert ridge.best_params_["alpha"] in (0.1, 10.0)


def test_pipeline_on_a_normalized_matrix_stays_factorized(star):
    X, y = star
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(plan="factorized")).fit(X, y)
    assert pipeline[-1].plan_ == "factorized"
    reference = make_pipeline(StandardScaler(), LogisticRegression()).fit(X.materialize(), y)
    assert np.allclose(
        pipeline.predict_proba(X), reference.predict_proba(X.materialize()), atol=1e-6
    )


def test_inputs_are_never_modified(star):
    X, y = star
    table = X.materialize()
    parts = [
        (part.source.copy(), None if part.rows is None else part.rows.copy()) for part in X.parts
    ]
    y_before, table_before = y.copy(), table.copy()
    fitted_models(X, y)
    for model in fitted_models(table, y):
        outputs(model, X)
    assert np.array_equal(y, y_before) and np.array_equal(table, table_before)
    for (source, rows), part in zip(parts, X.parts):
        assert np.array_equal(source, part.source)
        assert rows is None and part.rows is None or np.array_equal(rows, part.rows)


@pytest.mark.parametrize(
    "model",
    [LogisticRegression(), KMeans(2, random_state=0), GNMF(2, max_iter=5), Ridge(solver="lsqr")],
)
def test_verbose_shows_a_progress_bar(model, star, capsys):
    X, y = star
    X = abs(X) if isinstance(model, GNMF) else X
    model.set_params(verbose=True).fit(X, y)
    assert type(model).__name__ in capsys.readouterr().err
    model.set_params(verbose=False).fit(X, y)
    assert capsys.readouterr().err == ""
