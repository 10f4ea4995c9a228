"""The scikit-learn estimator contract, checked by scikit-learn itself, on plain arrays."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from ilargi.models import GNMF, KMeans, LinearRegression, LogisticRegression, Ridge, StandardScaler

ESTIMATORS = [
    LinearRegression(),
    Ridge(),
    Ridge(solver="cg"),
    Ridge(solver="lsqr"),
    LogisticRegression(),
    # "gd" converges slowly by design (a fixed step); enough steps to fit the checks' small data.
    LogisticRegression(solver="gd", max_iter=2000),
    KMeans(),
    # Multiplicative updates converge slowly, and the checks compare fit_transform's W (fitted jointly
    # with H) with transform's W (solved with H fixed): they agree once both are converged.
    GNMF(tol=1e-8, max_iter=5000),
    StandardScaler(),
    StandardScaler(with_mean=False),
]


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_contract(estimator, check, monkeypatch):
    # scikit-learn skips its "array API dispatch with NumPy inputs" check unless this variable is
    # set; the check only reads it, so setting it here runs the check instead of skipping it.
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    check(estimator)
