"""Every private scikit-learn name the estimators use, imported here and nowhere else.

The estimators check their parameters and inputs as scikit-learn's own do, and some of what that
takes is private to scikit-learn (a leading underscore in the module or the name), which may
change in any release. Supported: scikit-learn 1.6 to 1.9, the range of the ``scikit-learn`` pin
in ``pyproject.toml`` (1.6 brought ``validate_data`` and ``__sklearn_tags__``); the contract tests
(``tests/models``) run on the installed release. Where a name's replacement is cheap to write, a
fallback takes over if a release drops the name; raise the pin only once the tests pass there.
``tests/models/test_sklearn_compat.py`` checks that no other module of ilargi imports a private
scikit-learn name.

Names:

* ``Interval``, ``StrOptions`` (``sklearn.utils._param_validation``): the parameter constraints of
  ``_parameter_constraints``; no fallback (the whole validation framework).
* ``_fit_context`` (``sklearn.base``): the fit decorator that checks the parameters first;
  fallback: a decorator that calls ``_validate_params()`` unless scikit-learn's
  ``skip_parameter_validation`` is set.
* ``_check_sample_weight`` (``sklearn.utils.validation``); fallback: a public
  ``check_sample_weight`` of the same signature, where a release has one.
* ``_check_feature_names`` (``sklearn.utils.validation``): sets ``feature_names_in_`` at a fit and
  compares a later call's names with it (warning or ValueError); fallback: the same, with shorter
  messages.
* ``_get_output_config`` (``sklearn.utils._set_output``): the ``set_output`` container of a
  transformer's method; fallback: the estimator's ``_sklearn_output_config``, else the global
  ``{method}_output`` setting.
* ``validate_data`` (``sklearn.utils.validation``, public since 1.6; earlier releases had the
  private method ``BaseEstimator._validate_data``, below the pin).
"""

import functools
import warnings

import numpy as np
from sklearn import get_config as sklearn_config
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import validate_data

try:
    from sklearn.utils.validation import _check_feature_names
except ImportError:  # a release that moved it: set, or compare with, feature_names_in_

    def _check_feature_names(estimator, X, *, reset):
        names = None if X is None or not hasattr(X, "columns") else np.asarray(X.columns, object)
        if reset:
            if names is not None:
                estimator.feature_names_in_ = names
            elif hasattr(estimator, "feature_names_in_"):
                delattr(estimator, "feature_names_in_")
            return
        fitted = getattr(estimator, "feature_names_in_", None)
        if (fitted is None) != (names is None):
            warnings.warn(
                f"X has {'no ' if names is None else ''}feature names, but "
                f"{type(estimator).__name__} was fitted with"
                f"{'' if fitted is not None else 'out'} feature names"
            )
        elif fitted is not None and (len(fitted) != len(names) or np.any(fitted != names)):
            raise ValueError("The feature names should match those that were passed during fit.")


try:
    from sklearn.base import _fit_context
except ImportError:  # a release without it: check the parameters before the fit, as it did

    def _fit_context(*, prefer_skip_nested_validation):
        def decorator(fit_method):
            @functools.wraps(fit_method)
            def wrapper(estimator, *args, **kwargs):
                if not sklearn_config()["skip_parameter_validation"]:
                    estimator._validate_params()
                return fit_method(estimator, *args, **kwargs)

            return wrapper

        return decorator


try:
    from sklearn.utils.validation import _check_sample_weight
except ImportError:  # a release that made it public
    from sklearn.utils.validation import check_sample_weight as _check_sample_weight

try:
    from sklearn.utils._set_output import _get_output_config
except ImportError:  # a release that moved it: the same lookup, written out

    def _get_output_config(method, estimator=None):
        configured = getattr(estimator, "_sklearn_output_config", {})
        dense = configured.get(method, sklearn_config()[f"{method}_output"])
        return {"dense": dense}


__all__ = [
    "Interval",
    "StrOptions",
    "_check_feature_names",
    "_check_sample_weight",
    "_fit_context",
    "_get_output_config",
    "validate_data",
]
