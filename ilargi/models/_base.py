"""What every ilargi estimator shares: parameter and input checks, the execution plan, the progress bar."""

from contextlib import contextmanager

import numpy as np
import pandas as pd
from sklearn import get_config
from sklearn.base import BaseEstimator
from sklearn.utils import assert_all_finite
from tqdm.auto import tqdm

from ilargi.backend import kernel_status, kernels_held, threads
from ilargi.chooser import choose
from ilargi.rewriter.histograms import BinnedMatrix

from ._ops import fit_matrix, is_distributed, is_normalized, table
from ._sklearn_compat import (
    StrOptions,
    _check_feature_names,
    _check_sample_weight,
    validate_data,
)

PLANS = ("auto", "factorized", "materialized")


def _named_columns(X):
    """The feature names of a NormalizedMatrix as scikit-learn reads them from a DataFrame: an
    empty DataFrame with its column names (no data), or None for a matrix without names (or a
    transposed view, whose names are those of its rows)."""
    names = getattr(X, "columns", None)
    if names is None or getattr(X, "transposed", False) or len(names) != X.shape[1]:
        return None
    # One empty float block: pandas builds an empty object column per name otherwise, which
    # dominated fits on tens of thousands of one-hot columns.
    return pd.DataFrame(np.empty((0, len(names))), columns=pd.Index(names, dtype=object))


class IlargiEstimator(BaseEstimator):
    """Base of the ilargi estimators: the ``plan`` and ``verbose`` parameters and their checks.

    Every estimator takes a NormalizedMatrix, a dense array or a SciPy sparse matrix. For a
    NormalizedMatrix the ``plan`` parameter decides how it runs: ``"factorized"`` on the
    NormalizedMatrix itself, ``"materialized"`` on ``X.materialize()`` (built once per fit), or
    ``"auto"``: the plan chooser decides (:func:`ilargi.choose`, the join charged to the fit, which
    builds the table once). Plain arrays are already materialized and run as they are. The plan
    that ran is stored in ``plan_``.

    Parameters are checked as scikit-learn checks its own: each subclass lists them in
    ``_parameter_constraints`` and decorates its fit methods with ``sklearn.base._fit_context``, so
    a bad parameter raises ``InvalidParameterError`` (a ValueError and a TypeError) naming it before
    the data are read, a join is built or a plan is chosen.

    Parameters
    ----------
    plan : {"auto", "factorized", "materialized"}, default="auto"
        How a fit on a NormalizedMatrix runs (see above).
    verbose : bool or int, default=False
        Show a tqdm progress bar over the iterations when true (or positive).
    """

    _parameter_constraints: dict = {"plan": [StrOptions(set(PLANS))], "verbose": ["verbose"]}
    _takes_bins = False  # a tree learner also trains on a BinnedMatrix (Table.to_binned)
    _allow_nan = False  # a tree learner takes NaN as a missing value

    def __init__(self, *, plan="auto", verbose=False):
        self.plan = plan
        self.verbose = verbose

    def _validate(self, X, y="no_validation", *, reset=True, **y_checks):
        """Check X (and y unless "no_validation") like scikit-learn; a NormalizedMatrix passes as
        it is, once checked for NaN/inf from its parts (never materialized). Returns X, or
        (X, y) when y is checked.

        A NormalizedMatrix's column names (``X.columns``) are its feature names, as a DataFrame's
        columns are for scikit-learn: a fit sets ``feature_names_in_`` from them, and a later call
        warns or raises where its names differ from the fit's, with scikit-learn's own checks."""
        binned = isinstance(X, BinnedMatrix)  # a tree learner's bins: codes, always finite
        if binned and not self._takes_bins:
            raise TypeError(
                f"{type(self).__name__} takes a NormalizedMatrix, an array or a sparse matrix; a "
                "BinnedMatrix (a tree learner's bins, Table.to_binned) trains "
                "GradientBoostingRegressor and GradientBoostingClassifier: use Table.to_matrix"
            )
        if not (is_normalized(X) or binned):
            finite = "allow-nan" if self._allow_nan else True
            return validate_data(
                self,
                X,
                y,
                reset=reset,
                accept_sparse="csr",
                dtype=np.float64,
                ensure_all_finite=finite,
                **y_checks,
            )
        if len(X.shape) != 2:
            raise ValueError(f"expected a 2-D NormalizedMatrix, got shape {X.shape}")
        if not binned:
            self._check_finite(X)
        if reset:
            self.n_features_in_ = X.shape[1]
        else:  # names first, then their count, as validate_data checks
            _check_feature_names(self, _named_columns(X), reset=False)
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                    f"{self.n_features_in_} features as input"
                )
        if isinstance(y, str) and y == "no_validation":
            checked = None
        elif is_distributed(X):
            checked = self._distributed_target(X, y, **y_checks)
        else:
            names = self.__dict__.get("feature_names_in_")
            checked = validate_data(self, "no_validation", y, **y_checks)
            if not reset and names is not None:  # y's check alone forgets the fit's names
                self.feature_names_in_ = names
            if checked.shape[0] != X.shape[0]:
                raise ValueError(f"X has {X.shape[0]} rows but y has {checked.shape[0]}")
        if reset:  # after y's check, which (given no X) forgets the names of an earlier fit
            _check_feature_names(self, _named_columns(X), reset=True)
        return X if checked is None else (X, checked)

    @staticmethod
    def _distributed_target(X, y, multi_output=False, y_numeric=False, **_):
        """y for a Dask-backed X: a Dask array chunked like X's rows (NumPy targets are placed on
        the workers once), checked as scikit-learn checks a target -- 1-D (2-D with
        ``multi_output``), numbers, finite -- without bringing it to the client (the finiteness
        check is one pass over y)."""
        import dask.array as da  # lazy: Dask is optional, and X is a Dask matrix here

        from ilargi.scaleout.arrays import is_known_finite

        if isinstance(y, da.Array) and is_known_finite(y):
            y_checked = True
        else:
            y_checked = False
        y = X.align(y, "y")
        if y.ndim == 2 and not multi_output:
            if y.shape[1] != 1:
                raise ValueError(
                    f"y should be a 1d array, got an array of shape {y.shape} instead."
                )
            y = y[:, 0]
        if y.dtype.kind not in "biuf":
            raise ValueError(f"y must hold numbers on a Dask-backed matrix, got dtype {y.dtype}")
        if y.dtype.kind == "f" and not y_checked and not bool(da.isfinite(y).all().compute()):
            nan = bool(da.isnan(y).any().compute())
            assert_all_finite(np.array([np.nan if nan else np.inf]), input_name="y")
        return y

    def _check_finite(self, X):
        """Raise scikit-learn's own error ("Input X contains NaN/infinity ...") for a
        NormalizedMatrix holding NaN or inf, as ``validate_data`` does for an array: the check
        reads the parts' flags and affine state (O(parts) for finite data), see
        :meth:`NormalizedMatrix.nonfinite`."""
        nan, inf = X.nonfinite()
        nan = nan and not self._allow_nan
        if not (nan or inf):
            return
        try:  # the message depends only on which kinds occur: a one-value witness
            assert_all_finite(
                np.array([np.nan if nan else np.inf]),
                input_name="X",
                estimator_name=type(self).__name__,
            )
        except ValueError as error:
            if not nan:
                raise
            raise ValueError(
                f"{error}\nA NormalizedMatrix holds NaN where a source does (allow_nonfinite=True) "
                "or where to_matrix(..., missing='nan') left a missing cell: encode the table with "
                "missing='zero', 'indicator' or 'mean' for this estimator, or train "
                "GradientBoostingRegressor/Classifier, which take NaN as a missing value"
            ) from None

    def _sample_weight(self, sample_weight, X):
        """None stays None (the unweighted fast path); anything else becomes a checked float vector."""
        if sample_weight is None:
            return None
        if is_distributed(X):  # row-aligned on the workers, checked in one pass
            sw = X.align(sample_weight, "sample_weight").astype(np.float64)
            if sw.ndim != 1:
                raise ValueError("Sample weights must be 1D array or scalar")
            if bool((sw < 0).any().compute()):
                raise ValueError("Negative values in data passed to `sample_weight`")
            return sw
        return _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)

    def _plan(self, X):
        """The data the fit runs on and the name of the plan: a NormalizedMatrix is used as it is or
        materialized once. A table on the CPU (materialized here, or a plain array) runs as a
        NormalizedMatrix of one part (:func:`~ilargi.models._ops.fit_matrix`): its products take
        ilargi's parallel kernels, as the factorized plan's do. Such a matrix (one part that is the
        whole table) is materialized already, whatever the plan asks."""
        if not is_normalized(X):
            return fit_matrix(X), "materialized"
        if is_distributed(X):  # its rows live on the workers: materializing would gather them
            if not getattr(self, "_distributed", False):
                raise TypeError(
                    f"{type(self).__name__} does not train on a Dask-backed matrix; "
                    "use X.compute() for the in-memory matrix"
                )
            if self.plan == "materialized":
                raise ValueError(
                    "plan='materialized' would gather the joined table of a "
                    "Dask-backed matrix on the client; use plan='factorized' (or "
                    "'auto')"
                )
            return X, "factorized"
        if table(X) is not X:  # the whole table as one part: both plans are this matrix
            return X, "factorized" if self.plan == "factorized" else "materialized"
        factorize = self.plan == "factorized" or (
            self.plan == "auto" and choose(X, self, repeats=1).factorize
        )
        return (X, "factorized") if factorize else (fit_matrix(X.materialize()), "materialized")

    def workload(self, shape):
        """The work one fit does on data of ``shape``, as the plan chooser sees it.

        The parameters are checked first (unless a fit already did), so that
        ``ilargi.choose(nm, estimator)`` refuses a bad parameter as ``fit`` does.

        Parameters
        ----------
        shape : tuple of int
            ``(n_samples, n_features)`` of the data the fit would run on.

        Returns
        -------
        Workload
            The kind of work, its width and its iterations (:class:`ilargi.chooser.workload.Workload`).

        Raises
        ------
        sklearn.utils._param_validation.InvalidParameterError
            If a parameter is invalid.
        TypeError
            If the plan chooser has no workload for this estimator.
        """
        if not get_config()["skip_parameter_validation"]:
            self._validate_params()
        return self._workload(tuple(shape))

    def _workload(self, shape):
        raise TypeError(f"the plan chooser has no workload for {type(self).__name__}")

    @staticmethod
    def _blas_quiet():
        """BLAS at one thread for a fit's O(d) tail (x_mean · coef and the like): a BLAS call on
        every thread leaves OpenBLAS's workers spinning for a while, which takes the cores from
        the compiled passes of whatever runs next (the next fit, back to back)."""
        return threads.threads(threads.get_num_threads(), blas=1)

    @contextmanager
    def _iterations(self, total, desc):
        """The context of a fit's iterations: a tqdm bar (shown when ``verbose``), and BLAS at one
        thread while the compiled kernels keep every thread. An iteration alternates compiled
        passes (every thread) with BLAS calls; a BLAS pool spinning after its call takes the
        cores the kernels' threads wait for, and the reverse (ilargi.backend.threads). The CPU
        kernels stay those the iterations started with (ilargi.backend.kernels_held).

        While the NumPy kernels run because the compiled ones are being built in the background,
        the build has a core: the fit takes the others (at least one). A BLAS call at every thread
        waits for a thread that the build holds (the L-BFGS directions' level-1 BLAS calls
        stalled a wide first fit many times over)."""
        bar = tqdm(
            total=total, desc=f"{type(self).__name__} {desc}", disable=not self.verbose, leave=False
        )
        k = threads.get_num_threads()
        status = kernel_status()
        if status.running == "numpy" and status.building:
            k = max(1, k - 1)
        with bar, threads.threads(k, blas=1), kernels_held():
            yield bar
