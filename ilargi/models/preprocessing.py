"""Standardization that keeps a NormalizedMatrix factorized.

(X - mean) / scale is a per-column affine map, which a NormalizedMatrix carries lazily in its
diag(a), b form: the transformed matrix is exact in every join scenario (absent rows included, they
become -mean/scale exactly as in the materialized table) and no source is touched or copied.
"""

import numpy as np
from sklearn.base import OneToOneFeatureMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ilargi.backend.contract import MatrixLike

from ._base import IlargiEstimator
from ._ops import column_mean, column_var, is_normalized, is_sparse, namespace, to_host
from ._sklearn_compat import _fit_context, _get_output_config


class StandardScaler(OneToOneFeatureMixin, TransformerMixin, IlargiEstimator):
    """Remove the column mean and scale to unit variance, lazily for a NormalizedMatrix.

    There is no ``plan``: fitting needs only two column aggregates and transforming only an affine
    view, both cheaper on the factorized form than any join.

    Parameters
    ----------
    with_mean : bool, default=True
        Center the columns. Not possible for a SciPy sparse matrix (it would become dense); a
        NormalizedMatrix with sparse sources is fine, the shift stays lazy.
    with_std : bool, default=True
        Scale the columns to unit variance (population variance, ddof=0). Constant columns keep
        scale 1.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        Column means; None when neither ``with_mean`` nor ``with_std``.
    var_ : ndarray of shape (n_features,) or None
        Column variances; None without ``with_std``.
    scale_ : ndarray of shape (n_features,) or None
        The divisors of :meth:`transform` (1 for constant columns); None without ``with_std``.
    n_samples_seen_ : int
        Number of samples seen in fit.
    n_features_in_ : int
        Number of features seen in fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Column names of X: a pandas DataFrame's, or a NormalizedMatrix's ``columns``; set
        only where X has names.

    See Also
    --------
    sklearn.preprocessing.StandardScaler : The scikit-learn estimator it matches.

    Examples
    --------
    >>> import numpy as np
    >>> from ilargi import NormalizedMatrix
    >>> from ilargi.models import StandardScaler
    >>> S = np.array([[1.0], [2.0], [3.0], [4.0]])
    >>> R = np.array([[10.0], [20.0]])
    >>> X = NormalizedMatrix.from_parts([S, R], rows=[None, np.array([0, 1, 1, 0])],
    ...                                 cols=[[0], [1]], shape=(4, 2))
    >>> Z = StandardScaler().fit(X).transform(X)  # still a NormalizedMatrix
    >>> type(Z).__name__
    'NormalizedMatrix'
    >>> Z.materialize().round(3)
    array([[-1.342, -1.   ],
           [-0.447,  1.   ],
           [ 0.447,  1.   ],
           [ 1.342, -1.   ]])
    """

    _parameter_constraints: dict = {"with_mean": ["boolean"], "with_std": ["boolean"]}

    def __init__(self, *, with_mean: bool = True, with_std: bool = True) -> None:
        self.with_mean = with_mean
        self.with_std = with_std

    def _check_centering(self, X):
        if self.with_mean and is_sparse(X):
            raise ValueError(
                "Cannot center a sparse matrix (it would become dense): pass "
                "with_mean=False, or use a NormalizedMatrix, which centers lazily"
            )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: MatrixLike, y: object = None) -> "StandardScaler":
        """Compute the column means and standard deviations of X.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            The data; a NormalizedMatrix is reduced factorized.
        y : None
            Ignored.

        Returns
        -------
        self : object
            The fitted scaler.

        Raises
        ------
        ValueError
            If ``with_mean`` is true and X is a SciPy sparse matrix.
        """
        X = self._validate(X)
        self._check_centering(X)
        n = X.shape[0]
        mean = to_host(column_mean(X))
        self.mean_ = mean if self.with_mean or self.with_std else None  # as scikit-learn
        self.var_ = self.scale_ = None
        if self.with_std:
            self.var_ = var = to_host(column_var(X))
            # Variances within rounding error of 0 mark constant columns (scikit-learn's bound).
            eps = np.finfo(np.float64).eps
            constant = var <= n * eps * var + (n * mean * eps) ** 2
            self.scale_ = np.where(constant, 1.0, np.sqrt(var))
        self.n_samples_seen_ = n
        return self

    def _affine(self, X, inverse):
        check_is_fitted(self)
        X = self._validate(X, reset=False)
        self._check_centering(X)
        xp = namespace(X)
        if is_sparse(X):
            if self.with_std:
                factor = self.scale_ if inverse else 1.0 / self.scale_
                X = X.multiply(xp.asarray(factor)[None, :]).tocsr()
            return X
        mean = xp.asarray(self.mean_) if self.with_mean else None
        scale = None if self.scale_ is None else xp.asarray(self.scale_)
        if inverse:
            X = X if scale is None else X * scale
            return X if mean is None else X + mean
        X = X if mean is None else X - mean
        return X if scale is None else X / scale

    def transform(self, X: MatrixLike) -> MatrixLike:
        """Standardize X: ``(X - mean_) / scale_``.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            The data.

        Returns
        -------
        NormalizedMatrix, ndarray, sparse matrix or DataFrame of shape (n_samples, n_features)
            The same kind as X: a NormalizedMatrix stays one, with the affine map kept lazily.
            Under ``set_output(transform="pandas")`` (or "polars") a DataFrame instead, built
            from the materialized table for a NormalizedMatrix (:meth:`NormalizedMatrix.toarray`,
            which refuses a table that does not fit in memory).
        """
        Z = self._affine(X, inverse=False)
        if is_normalized(Z) and _get_output_config("transform", self)["dense"] != "default":
            # scikit-learn's set_output wraps what transform returns in a DataFrame, which holds
            # the values: the lazy matrix cannot be wrapped, its table can.
            Z = to_host(Z.toarray())
        return Z

    def inverse_transform(self, X: MatrixLike) -> MatrixLike:
        """Undo :meth:`transform`: ``X * scale_ + mean_``.

        Parameters
        ----------
        X : NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            Standardized data.

        Returns
        -------
        NormalizedMatrix, ndarray or sparse matrix of shape (n_samples, n_features)
            The data on their original scale, of the same kind as X.
        """
        return self._affine(X, inverse=True)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = not self.with_mean  # a sparse array cannot be centered
        return tags
