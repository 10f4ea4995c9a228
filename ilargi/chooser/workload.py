"""What the chooser decides for: an operator call, or the fit of an estimator.

A :class:`Workload` names the kind of work, its width ``m`` (columns of the operand of a product;
classes, clusters or rank of a model) and how many iterations a fit runs. :func:`workload_of` turns
the user's ``op_or_model`` (a string, or an estimator instance) into one, from the estimator's class
and parameters alone.
"""
from dataclasses import dataclass

OPERATORS = ("lmm", "rmm", "tmm", "rowsums", "colsums", "crossprod", "gramvec")
MODELS = ("linreg_cholesky", "linreg_lsqr", "linreg_cg", "logreg_gd", "logreg_lbfgs", "kmeans",
          "gnmf")
KINDS = OPERATORS + MODELS

# Operators whose result has m columns: the others ignore m.
WIDE_OPERATORS = ("lmm", "rmm", "tmm")

# ilargi.models.linear's limits, mirrored here to predict which solver "auto" runs: a Gram matrix
# above this many features goes to lsqr. Iteration caps of SciPy's lsqr/cg when max_iter is None.
MAX_GRAM_FEATURES = 4096
DEFAULT_ITERATIONS = {"linreg_lsqr": lambda d: 2 * d, "linreg_cg": lambda d: 10 * d}


@dataclass(frozen=True)
class Workload:
    """kind: one of :data:`KINDS`; m: operand width (or k, rank, classes); iterations per fit."""

    kind: str
    m: int = 1
    iterations: int = 1

    @property
    def is_model(self):
        return self.kind in MODELS


def workload_of(op_or_model, shape, m=None):
    """The :class:`Workload` of an operator name or an estimator instance on data of ``shape``."""
    if isinstance(op_or_model, str):
        kind = op_or_model.lower()
        if kind not in OPERATORS:
            raise ValueError(f"unknown operator {op_or_model!r}; the operators are {OPERATORS}, "
                             "or pass an estimator instance")
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"m must be a positive integer, got {m!r}")
        return Workload(kind, m if (m is not None and kind in WIDE_OPERATORS) else 1, 1)
    if m is not None:
        raise ValueError("m= is for operators; a model's width comes from its parameters")
    return _model_workload(op_or_model, shape)


def _param(params, name, default):
    value = params.get(name, default)
    return default if value is None else value


def _model_workload(model, shape):
    get_params = getattr(model, "get_params", None)
    if get_params is None:
        raise TypeError(f"op_or_model must be an operator name {OPERATORS} or an estimator "
                        f"instance, got {type(model).__name__}")
    params = get_params(deep=False)
    name = type(model).__name__
    n, d = shape
    if name in ("LinearRegression", "Ridge"):
        solver = params.get("solver", "auto")
        if solver == "auto":
            determined = float(params.get("alpha", 0.0)) > 0 or d < n - 1
            solver = "cholesky" if determined and d <= MAX_GRAM_FEATURES else "lsqr"
        kind = f"linreg_{solver}"
        if kind == "linreg_cholesky":
            return Workload(kind, 1, 1)
        iterations = params.get("max_iter") or DEFAULT_ITERATIONS[kind](d)
        return Workload(kind, 1, int(iterations))
    if name == "LogisticRegression":
        kind = "logreg_gd" if params.get("solver") == "gd" else "logreg_lbfgs"
        return Workload(kind, 1, int(_param(params, "max_iter", 100)))
    if name == "KMeans":
        runs = 1 if not isinstance(params.get("init", "k-means++"), str) else \
            int(_param(params, "n_init", 1))
        return Workload("kmeans", int(_param(params, "n_clusters", 8)),
                        int(_param(params, "max_iter", 300)) * runs)
    if name == "GNMF":
        return Workload("gnmf", int(_param(params, "n_components", 2)),
                        int(_param(params, "max_iter", 200)))
    raise TypeError(f"the chooser does not know the estimator {name}; it knows LinearRegression, "
                    "Ridge, LogisticRegression, KMeans and GNMF")
