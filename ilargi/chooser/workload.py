"""What the plan chooser decides for: an operator call, or the fit of an estimator.

A :class:`Workload` names the kind of work, its width ``m`` (columns of the operand of a product;
classes, clusters or rank of a model) and how many iterations a fit runs. :func:`workload_of` turns
the user's ``op_or_model`` (a string, or an estimator instance, which describes its own work through
its ``workload(shape)`` method) into one.
"""

from dataclasses import dataclass

OPERATORS = ("lmm", "rmm", "tmm", "rowsums", "colsums", "crossprod", "gramvec")
# Workload kinds of estimator fits ("model" as in the README: a scikit-learn-style learner).
# Order matters: the cost model reads a workload as its index here (new kinds go last).
MODELS = (
    "linreg_cholesky",
    "linreg_lsqr",
    "linreg_cg",
    "logreg_gd",
    "logreg_lbfgs",
    "kmeans",
    "gnmf",
    "logreg_newton",
)
KINDS = OPERATORS + MODELS

# Operators whose result has m columns: the others ignore m.
WIDE_OPERATORS = ("lmm", "rmm", "tmm")


@dataclass(frozen=True)
class Workload:
    """The work the plan chooser decides for.

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`: an operator, or the fit of an estimator with its solver.
    m : int, default=1
        Width: columns of an operator's operand, or the classes, clusters or rank of an estimator.
    iterations : int, default=1
        Iterations of one fit (1 for an operator).

    Examples
    --------
    >>> from ilargi.chooser.workload import Workload
    >>> Workload("kmeans", 8, 300).is_model
    True
    """

    kind: str
    m: int = 1
    iterations: int = 1

    @property
    def is_model(self):
        """Whether the workload is the fit of an estimator (not an operator call)."""
        return self.kind in MODELS


def workload_of(op_or_model, shape, m=None):
    """The workload of an operator name or an estimator instance on data of a given shape.

    Parameters
    ----------
    op_or_model : str or estimator
        An operator of :data:`OPERATORS` (any case), or an estimator with a ``workload(shape)``
        method (the estimators of :mod:`ilargi.models`).
    shape : tuple of int
        ``(n, d)`` of the data.
    m : int, optional
        Operand width of an operator (ignored by the operators without one); not for estimators.

    Returns
    -------
    Workload
        What one call or one fit does.

    Raises
    ------
    ValueError
        For an unknown operator, a bad ``m``, or ``m`` with an estimator.
    TypeError
        For an object that describes no workload.

    Examples
    --------
    >>> from ilargi.chooser.workload import workload_of
    >>> from ilargi.models import KMeans
    >>> workload_of("LMM", (100, 5), m=4)
    Workload(kind='lmm', m=4, iterations=1)
    >>> workload_of(KMeans(3, max_iter=10), (100, 5))
    Workload(kind='kmeans', m=3, iterations=10)
    """
    if isinstance(op_or_model, str):
        kind = op_or_model.lower()
        if kind not in OPERATORS:
            raise ValueError(
                f"unknown operator {op_or_model!r}; the operators are {OPERATORS}, "
                "or pass an estimator instance"
            )
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"m must be a positive integer, got {m!r}")
        return Workload(kind, m if (m is not None and kind in WIDE_OPERATORS) else 1, 1)
    if m is not None:
        raise ValueError("m= is for operators; a model's width comes from its parameters")
    return _model_workload(op_or_model, shape)


def _model_workload(model, shape):
    """An estimator describes its own work (its ``workload(shape)`` method, see ilargi.models)."""
    describe = getattr(model, "workload", None)
    if describe is None or not callable(describe):
        raise TypeError(
            f"op_or_model must be an operator name {OPERATORS} or an estimator "
            f"instance with a workload(shape) method, got {type(model).__name__}"
        )
    workload = describe(tuple(shape))
    if not isinstance(workload, Workload) or workload.kind not in MODELS:
        raise TypeError(
            f"{type(model).__name__}.workload() must return a Workload of a model "
            f"kind {MODELS}, got {workload!r}"
        )
    return workload
