"""Ilargi: train machine-learning models on normalized data without materializing the join.

Packages in layers, low to high; each imports only from the layers below it (``lint-imports``
checks it):

1. :mod:`ilargi.backend` -- the seam ``backend_of(arrays)`` and the per-backend kernels;
2. :mod:`ilargi.metadata` -- indicators, mappings, parts, overlap rules, save/load of the metadata;
3. :mod:`ilargi.chooser` -- the plan chooser: features from metadata, the cost model,
   :func:`choose` -> :class:`Plan`;
4. :mod:`ilargi.rewriter` -- :class:`NormalizedMatrix`, the virtual joined table, and the rewrite
   rules that run linear algebra on the sources;
5. :mod:`ilargi.table` -- :class:`Table` and :func:`concat`: pandas, Parquet and DuckDB in, a
   matrix out;
6. :mod:`ilargi.scaleout` -- the same matrix on Dask (the optional ``dask`` extra);
7. :mod:`ilargi.models` -- estimators with the scikit-learn contract (:class:`LinearRegression`,
   :class:`Ridge`, :class:`LogisticRegression`, :class:`KMeans`, :class:`GNMF`,
   :class:`StandardScaler`, :class:`GradientBoostingRegressor`,
   :class:`GradientBoostingClassifier`);
8. :mod:`ilargi.datasets` -- Hamlet, Santoku and TPC-H loaders and the synthetic generator;
9. :mod:`ilargi.calibration` -- the sweep that times both plans and :func:`calibrate`, which
   re-trains the cost model on this machine;
10. :mod:`ilargi.cli` -- the ``ilargi`` command (``python -m ilargi``).

Below them all, :mod:`ilargi._config` holds the settings every layer reads (:func:`get_config`,
:func:`set_config`, :func:`config_context`); it imports nothing from ilargi.

Words: the *cost model* is the chooser's LightGBM predictor (shipped in the top-level
``estimators/`` folder); an *estimator* or *model* is a scikit-learn-style learner of
:mod:`ilargi.models`. Public names are imported lazily, so ``import ilargi`` stays cheap.

Examples
--------
>>> import numpy as np
>>> import ilargi
>>> S = np.arange(10.0).reshape(5, 2)
>>> R = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 1.0]])
>>> fk = np.array([0, 1, 1, -1, 0])
>>> T = ilargi.NormalizedMatrix.from_parts([S, R], rows=[None, fk], cols=[[0, 1], [2, 3, 4]],
...                                        shape=(5, 5))
>>> T @ np.ones(5)
array([ 4.,  9., 13., 13., 20.])

Threads: the compiled kernels and BLAS use every core by default; ``ilargi.set_num_threads(k)``
or ``with ilargi.threads(k): ...`` sets both.

>>> with ilargi.threads(1):
...     ilargi.get_num_threads()
1

Kernels: the compiled CPU kernels (Numba) are built once per environment, in a background process
started by the first call that wants them; until they are ready the NumPy/SciPy kernels run, so a
first call never waits for a compiler. ``ilargi.kernel_status()`` says which run;
``ilargi.compile_kernels()`` (or ``python -m ilargi compile``) builds them in the foreground.

Settings (the CPU kernels, the GPU's kernel variants, the chooser's folders, the memory limit) are
read with ``ilargi.get_config()`` and changed, per thread, with ``ilargi.set_config(...)`` or for a
block:

>>> with ilargi.config_context(kernels="numpy"):
...     ilargi.kernel_status().running
'numpy'
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
    "GradientBoostingRegressor": "ilargi.models",
    "GradientBoostingClassifier": "ilargi.models",
    "StandardScaler": "ilargi.models",
    "datasets": "ilargi.datasets",
    "set_num_threads": "ilargi.backend.threads",
    "get_num_threads": "ilargi.backend.threads",
    "threads": "ilargi.backend.threads",
    "compile_kernels": "ilargi.backend",
    "kernel_status": "ilargi.backend",
    "get_config": "ilargi._config",
    "set_config": "ilargi._config",
    "config_context": "ilargi._config",
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
