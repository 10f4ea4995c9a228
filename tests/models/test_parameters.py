"""Every public estimator refuses a bad parameter, naming it, before it touches the data.

For each estimator and each of its parameters: a value of the wrong type and a value of the right
type that is out of range or unknown. The error must be scikit-learn's ``InvalidParameterError`` (a
ValueError and a TypeError) naming the parameter, raised by every fit method before X, y or the
sample weights are looked at -- so before any join is built or any plan is chosen.
"""

import inspect
import re

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import check_param_validation

from ilargi import choose
from ilargi.datasets import make_star
from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler

# Shared by every estimator with a plan.
PLAN = {"plan": [1, "x", "lazy"], "verbose": ["yes", -1]}
LEAST_SQUARES = {
    "fit_intercept": ["yes", 1],
    "solver": [1, "x", "svd"],
    "tol": ["small", -1.0],
    "max_iter": [2.5, "10", 0, -3],
    **PLAN,
}

# estimator class -> parameter -> bad values: a wrong type first, then out-of-range or unknown
# values of the right type (booleans have none: a non-bool is their only bad value).
BAD = {
    LinearRegression: LEAST_SQUARES,
    Ridge: {"alpha": ["big", None, -1.0], **LEAST_SQUARES},
    LogisticRegression: {
        "C": ["one", None, 0, -1.0],
        "fit_intercept": ["yes", 1],
        "solver": [1, "x", "newton"],
        "learning_rate": [None, [0.1], -1.0, 0, "fast"],
        "tol": ["small", -1.0],
        "max_iter": [2.5, None, -3],
        **PLAN,
    },
    KMeans: {
        "n_clusters": [2.5, "3", 0, -1],
        "init": [3, "random"],
        "n_init": ["auto", 1.5, 0],
        "max_iter": [1.5, 0, -3],
        "tol": ["small", -1.0],
        "random_state": ["seed", 1.5, -1],
        **PLAN,
    },
    GNMF: {
        "n_components": [2.5, None, 0],
        "max_iter": [1.5, 0, -3],
        "tol": ["small", -1.0],
        "random_state": ["seed", -1],
        **PLAN,
    },
    StandardScaler: {"with_mean": ["yes", 1], "with_std": ["no", 0]},
}

FIT_METHODS = ("fit", "fit_transform", "fit_predict")

CASES = [
    pytest.param(cls, name, value, id=f"{cls.__name__}-{name}={value!r}")
    for cls, params in BAD.items()
    for name, values in params.items()
    for value in values
]


class Touched(Exception):
    """Raised by :class:`Untouchable` on any use."""


class Untouchable:
    """Data whose every use -- an attribute, len(), iteration, indexing, conversion -- is recorded
    and raises :class:`Touched`."""

    def __init__(self):
        object.__setattr__(self, "touched", [])

    def __getattribute__(self, name):
        if name in ("touched", "__class__", "__repr__"):
            return object.__getattribute__(self, name)
        object.__getattribute__(self, "touched").append(name)
        raise Touched(f"the data were touched: .{name}")

    def __repr__(self):
        return "Untouchable()"

    def _refuse(self, *args, **kwargs):
        object.__getattribute__(self, "touched").append("a special method")
        raise Touched("the data were touched by a special method")

    __len__ = __iter__ = __getitem__ = __array__ = __float__ = __int__ = __index__ = _refuse
    __bool__ = __eq__ = __hash__ = __matmul__ = __rmatmul__ = __mul__ = __add__ = _refuse


def fit_methods(estimator):
    return [name for name in FIT_METHODS if hasattr(estimator, name)]


def named(cls, name):
    return rf"The '{re.escape(name)}' parameter of {cls.__name__} must be"


def test_every_parameter_has_bad_values():
    for cls, params in BAD.items():
        estimator_params = cls().get_params(deep=False)
        assert set(params) == set(estimator_params), cls.__name__
        assert set(cls._parameter_constraints) == set(estimator_params), cls.__name__
        for name, values in params.items():
            boolean = isinstance(estimator_params[name], bool)
            assert len(values) >= (1 if boolean else 2), (cls.__name__, name)


@pytest.mark.parametrize("cls, name, value", CASES)
def test_bad_parameter_is_named_before_the_data_are_touched(cls, name, value):
    estimator = cls(**{name: value})
    assert fit_methods(estimator)
    for method in fit_methods(estimator):
        X, y, weights = Untouchable(), Untouchable(), Untouchable()
        takes_weights = "sample_weight" in inspect.signature(getattr(estimator, method)).parameters
        arguments = (X, y, weights) if takes_weights else (X, y)
        with pytest.raises(InvalidParameterError, match=named(cls, name)) as raised:
            getattr(estimator, method)(*arguments)
        assert isinstance(raised.value, ValueError) and isinstance(raised.value, TypeError)
        assert X.touched == y.touched == weights.touched == []


@pytest.mark.parametrize("cls", list(BAD))
def test_the_spy_sees_a_fit_with_good_parameters(cls):
    # The control: with valid parameters the fit does reach the data, and the spy notices.
    X = Untouchable()
    with pytest.raises(Touched):
        cls().fit(X, Untouchable())
    assert X.touched


@pytest.fixture(scope="module")
def star():
    return make_star(200, tuple_ratio=5, d_fact=2, target=None, random_state=0)[0]


@pytest.mark.parametrize(
    "cls, name, value", [case for case in CASES if case.values[0] is not StandardScaler]
)
def test_the_chooser_refuses_a_bad_parameter_too(cls, name, value, star):
    estimator = cls(**{name: value})
    with pytest.raises(InvalidParameterError, match=named(cls, name)):
        estimator.workload(star.shape)
    with pytest.raises(InvalidParameterError, match=named(cls, name)):
        choose(star, estimator)


@pytest.mark.parametrize("estimator", [cls() for cls in BAD], ids=lambda e: type(e).__name__)
def test_scikit_learn_parameter_validation_check(estimator):
    # scikit-learn's own check: a constraint per parameter, and the error it names, for values
    # it generates from the constraints.
    check_param_validation(type(estimator).__name__, estimator)


@pytest.mark.filterwarnings(
    "ignore::sklearn.exceptions.ConvergenceWarning"
)  # max_iter=1 on purpose
def test_valid_edge_values_are_accepted():
    X = np.abs(np.random.default_rng(0).standard_normal((30, 3)))
    y = X @ [1.0, 2.0, 3.0]
    Ridge(alpha=0, tol=0, max_iter=1, solver="lsqr").fit(X, y + 1e-3 * X[:, 0] ** 2)
    LinearRegression(fit_intercept=np.bool_(False), verbose=0).fit(X, y)
    LogisticRegression(C=1e-3, learning_rate=0.5, solver="gd", max_iter=0).fit(X, y > y.mean())
    KMeans(1, init=X[:1], random_state=np.random.RandomState(0), tol=0).fit(X)
    GNMF(1, max_iter=1, random_state=2**32 - 1).fit(X)
    StandardScaler(with_mean=False, with_std=np.bool_(True)).fit(X)
