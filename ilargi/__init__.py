"""Ilargi: train machine-learning models on normalized data without materializing the join.

Three parts, three places:

* :mod:`ilargi.metadata` -- data-integration metadata (indicator and mapping matrices) and the
  builders that derive it from tables (:class:`Table`, :func:`concat`);
* :mod:`ilargi.rewriter` -- :class:`NormalizedMatrix`, the virtual joined table, and the rewrite
  rules that run linear algebra on the sources;
* :mod:`ilargi.chooser` -- the learned cost estimator that picks factorized or materialized
  execution (:func:`choose`).

Estimators with the scikit-learn contract live in :mod:`ilargi.models`; dataset loaders in
:mod:`ilargi.datasets`. Public names are imported lazily, so ``import ilargi`` stays cheap.
"""
from importlib import import_module

__version__ = "0.1.0"

_EXPORTS = {
    "NormalizedMatrix": "ilargi.rewriter",
    "Indicator": "ilargi.metadata",
    "Part": "ilargi.metadata",
    "Metadata": "ilargi.metadata",
    "resolve_overlap": "ilargi.metadata",
    "Table": "ilargi.table",
    "concat": "ilargi.table",
    "choose": "ilargi.chooser",
    "calibrate": "ilargi.calibration",
    "Plan": "ilargi.chooser",
    "LinearRegression": "ilargi.models",
    "Ridge": "ilargi.models",
    "LogisticRegression": "ilargi.models",
    "KMeans": "ilargi.models",
    "GNMF": "ilargi.models",
    "StandardScaler": "ilargi.models",
    "datasets": "ilargi.datasets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'ilargi' has no attribute {name!r}")
    module = import_module(_EXPORTS[name])
    value = module if _EXPORTS[name] == f"ilargi.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
