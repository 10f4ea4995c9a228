"""Estimators with the scikit-learn contract that train on a NormalizedMatrix or a plain array.

Each one is written once against the operators a NormalizedMatrix and an array share, so the
factorized and the materialized plan run the same code (see :mod:`ilargi.models._ops`); the
``plan`` parameter picks one (see :class:`ilargi.models._base.IlargiEstimator`). Parameters are
validated as scikit-learn validates its own (``_parameter_constraints``), before any data are read,
any join is built or any plan is chosen; each estimator also describes the work of one fit to the
plan chooser (``workload(shape)``).
"""

from .gbdt import GradientBoostingClassifier, GradientBoostingRegressor
from .gnmf import GNMF
from .kmeans import KMeans
from .linear import LinearRegression, Ridge
from .logistic import LogisticRegression
from .preprocessing import StandardScaler

__all__ = [
    "GNMF",
    "GradientBoostingClassifier",
    "GradientBoostingRegressor",
    "KMeans",
    "LinearRegression",
    "LogisticRegression",
    "Ridge",
    "StandardScaler",
]
