"""A boosting round's leaf values added and the next gradients made in one pass: the compiled
kernel gives the bytes of the NumPy twin and of the two passes it replaces."""

import numpy as np
import pytest

import ilargi
from ilargi.backend import cpu

compiled = pytest.importorskip("ilargi.backend.compiled")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
def test_leaf_values_and_residuals_in_one_pass_are_the_two_passes(threads, dtype):
    rng = np.random.default_rng(11)
    n = 600_001
    labels = rng.integers(0, 31, n).astype(dtype)
    values = rng.standard_normal(31) * 1e-3
    start = rng.standard_normal(n) * 1e3 + np.float64(np.float32(0.1)) * 2.0**-30
    y = (rng.standard_normal(n) * 1e3).astype(np.float32)
    ours, theirs, two = start.copy(), start.copy(), start.copy()
    g_ours, g_theirs, g_two = (np.empty(n, np.float32) for _ in range(3))
    with ilargi.threads(threads):
        compiled.add_by_label_residuals(ours, values, labels, y, g_ours)
    cpu.add_by_label_residuals(theirs, values, labels, y, g_theirs)
    compiled.add_by_label(two, values, labels)
    compiled.residuals(two, y, g_two)
    for score, g in ((theirs, g_theirs), (two, g_two)):
        np.testing.assert_array_equal(ours, score)
        np.testing.assert_array_equal(g_ours, g)


def test_a_regressors_rounds_fused_or_not_grow_the_same_trees(monkeypatch):
    """The squared error's fused round against add_by_label and residuals apart: the same model
    text, and the fused pass taken every round after the first."""
    from ilargi.models import gbdt_trees

    rng = np.random.default_rng(12)
    X = rng.standard_normal((3000, 4))
    y = X @ [1.0, -2.0, 0.5, 0.0] + rng.standard_normal(3000)
    calls = []
    fused = gbdt_trees.L2.add_by_label

    def counted(self, score, values, labels):
        calls.append(1)
        return fused(self, score, values, labels)

    model = ilargi.GradientBoostingRegressor(n_estimators=12, plan="factorized")
    monkeypatch.setattr(gbdt_trees.L2, "add_by_label", counted)
    text = model.fit(X, y).model_to_string()
    assert len(calls) == 12
    monkeypatch.setattr(gbdt_trees.L2, "add_by_label", lambda *args: False)
    assert model.fit(X, y).model_to_string() == text
