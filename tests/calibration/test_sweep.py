"""The sweep's scenario generator: the "keys" style (a fact table of keys only)."""
import numpy as np
import scipy.sparse as sp

from ilargi.calibration.sweep import _shrink, build, draw


def keys_scenarios(count, max_rows=20_000):
    rng = np.random.default_rng(0)
    found = []
    while len(found) < count:
        params = draw(rng, max_rows=max_rows)
        if params["style"] == "keys":
            found.append(_shrink(params))
    return found


def test_keys_style_has_no_fact_features_and_key_encoded_dimensions():
    for params in keys_scenarios(5):
        nm = build(params)
        assert all(not part.indicator.is_identity for part in nm.parts)  # no fact part
        for part in nm.parts:
            S = part.source
            rows = S.shape[0]
            assert sp.issparse(S) and S.shape[1] > rows
            # column i is row i's key; the rest of each row are attribute ones
            np.testing.assert_array_equal(S[:, :rows].toarray(), np.eye(rows))
            assert (S.data == 1).all() and (np.diff(S.indptr) >= 2).all()
        assert nm.shape[1] == sum(part.source.shape[1] for part in nm.parts)
