"""What the chooser decides for: an operator call, or the fit of an estimator.

A :class:`Workload` names the kind of work, its width ``m`` (columns of the operand of a product;
classes, clusters or rank of a model) and how many iterations a fit runs. :func:`workload_of` turns
the user's ``op_or_model`` (a string, or an estimator instance, which describes its own work through
its ``workload(shape)`` method) into one.
"""
from dataclasses import dataclass

OPERATORS = ("lmm", "rmm", "tmm", "rowsums", "colsums", "crossprod", "gramvec")
MODELS = ("linreg_cholesky", "linreg_lsqr", "linreg_cg", "logreg_gd", "logreg_lbfgs", "kmeans",
          "gnmf")
KINDS = OPERATORS + MODELS

# Operators whose result has m columns: the others ignore m.
WIDE_OPERATORS = ("lmm", "rmm", "tmm")


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


def _model_workload(model, shape):
    """An estimator describes its own work (its ``workload(shape)`` method, see ilargi.models)."""
    describe = getattr(model, "workload", None)
    if describe is None or not callable(describe):
        raise TypeError(f"op_or_model must be an operator name {OPERATORS} or an estimator "
                        f"instance with a workload(shape) method, got {type(model).__name__}")
    workload = describe(tuple(shape))
    if not isinstance(workload, Workload) or workload.kind not in MODELS:
        raise TypeError(f"{type(model).__name__}.workload() must return a Workload of a model "
                        f"kind {MODELS}, got {workload!r}")
    return workload
