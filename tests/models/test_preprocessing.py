"""StandardScaler: scikit-learn's results on arrays, a lazy affine view on a NormalizedMatrix."""

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.preprocessing as skp

from ilargi.datasets import make_star
from ilargi.models import StandardScaler


@pytest.mark.parametrize("with_mean", [True, False])
@pytest.mark.parametrize("with_std", [True, False])
def test_matches_sklearn_on_dense_arrays(with_mean, with_std):
    rng = np.random.default_rng(0)
    X = rng.normal(3.0, 2.0, size=(100, 4))
    X[:, 2] = 7.0  # a constant column keeps scale 1
    ours = StandardScaler(with_mean=with_mean, with_std=with_std).fit(X)
    ref = skp.StandardScaler(with_mean=with_mean, with_std=with_std).fit(X)
    for name in ("mean_", "var_", "scale_"):
        expected = getattr(ref, name)
        assert (getattr(ours, name) is None) == (expected is None)
        if expected is not None:
            assert np.allclose(getattr(ours, name), expected, rtol=1e-12)
    assert np.allclose(ours.transform(X), ref.transform(X), rtol=1e-12)
    assert np.allclose(ours.inverse_transform(ours.transform(X)), X, rtol=1e-12)


def test_sparse_arrays_are_scaled_not_centered():
    X = sp.random(50, 6, density=0.3, format="csr", random_state=1)
    ours = StandardScaler(with_mean=False).fit(X)
    ref = skp.StandardScaler(with_mean=False).fit(X)
    assert np.allclose(ours.scale_, ref.scale_, rtol=1e-12)
    assert sp.issparse(ours.transform(X))
    assert np.allclose(ours.transform(X).toarray(), ref.transform(X).toarray(), rtol=1e-12)
    with pytest.raises(ValueError, match="Cannot center a sparse matrix"):
        StandardScaler().fit(X)


def test_a_sparse_normalized_matrix_is_centered_lazily():
    X, _ = make_star(500, tuple_ratio=5, d_fact=6, density=0.2, target=None, random_state=2)
    scaled = StandardScaler().fit_transform(X)
    assert type(scaled) is type(X)
    assert all(sp.issparse(part.source) for part in scaled.parts)  # sources untouched, still sparse
    assert np.allclose(scaled.mean(axis=0), 0.0, atol=1e-12)
    assert np.allclose(scaled.std(axis=0), 1.0, rtol=1e-12)
