"""The memory guard (issue 12, class 7): materialize() builds what chooser.memory.layout says (CSR
for a mostly-zero table, whatever its parts), refuses a table that does not fit before allocating
it, and choose() never picks a materialized plan that does not fit, saying why in the Plan."""
import numpy as np
import pytest
import scipy.sparse as sp

import ilargi
from ilargi import NormalizedMatrix, choose
from ilargi.chooser import cost_model, memory, rules
from ilargi.models import LinearRegression, LogisticRegression, StandardScaler

LEVELS = 200_000


@pytest.fixture(autouse=True)
def shipped_only(monkeypatch, tmp_path):
    """Decide with the shipped model, whatever the user folder of this machine holds."""
    monkeypatch.setenv("ILARGI_CHOOSER_DIR", str(tmp_path / "empty"))


def one_hot_table(levels, n=None, seed=0):
    """A fact table with one numeric column and a key of ``levels`` values, one-hot encoded: the
    dimension is the levels × levels identity (CSR), d = levels + 1."""
    n = levels if n is None else n
    rng = np.random.default_rng(seed)
    fk = rng.integers(0, levels, n)
    numeric = rng.standard_normal((n, 1))
    nm = NormalizedMatrix.from_parts([numeric, sp.identity(levels, format="csr")], [None, fk],
                                     [[0], np.arange(1, levels + 1)], (n, levels + 1),
                                     names=["fact", "key"])
    return nm, fk, numeric


@pytest.fixture(scope="module")
def big():
    return one_hot_table(LEVELS)


def test_layout_of_a_200000_level_one_hot_table(big):
    nm, _, _ = big
    planned = memory.layout(nm)
    assert planned.sparse and planned.entries == 2 * LEVELS
    assert planned.nbytes < 2 ** 23  # a few MiB, where the dense table is 298 GiB
    shifted = memory.layout(nm - 1.0)
    assert not shifted.sparse and shifted.nbytes == LEVELS * (LEVELS + 1) * 8


def test_materialize_builds_csr_for_a_mostly_zero_table_whatever_its_parts(big):
    nm, fk, numeric = big
    table = nm[:1000].materialize()
    assert sp.issparse(table) and table.format == "csr" and table.shape == (1000, LEVELS + 1)
    expected = np.zeros((1000, LEVELS + 1))
    expected[:, 0] = numeric[:1000, 0]
    expected[np.arange(1000), 1 + fk[:1000]] = 1.0
    assert np.array_equal(table.toarray(), expected)
    assert sp.issparse(nm.materialize())  # the whole table: a few MiB


def materializing_rule(monkeypatch):
    """No cost model, and a fallback rule that always materializes: what the memory guard then
    does is under test, not the rule."""
    monkeypatch.setattr(cost_model, "load", lambda device: None)
    monkeypatch.setattr(rules, "analytic", lambda features, repeats=None: False)


def test_materialize_refuses_a_table_that_does_not_fit_before_allocating(big):
    nm, _, _ = big
    with pytest.raises(MemoryError, match=r"dense table of 298 GiB.*available"):
        (nm - 1.0).materialize()


def test_choose_falls_back_to_factorized_when_the_table_does_not_fit(big, monkeypatch):
    nm, _, _ = big
    standardized = StandardScaler().fit(nm).transform(nm)  # a shift: materialized, it is dense
    materializing_rule(monkeypatch)
    plan = choose(standardized, LogisticRegression(), repeats=1)
    assert plan.factorize
    assert "does not fit" in plan.reason and "298 GiB" in plan.reason
    assert "decision was materialized" in plan.reason and "analytic cost" in plan.reason
    fitting = choose(nm, LogisticRegression(), repeats=1)  # as CSR it fits: materialized
    assert not fitting.factorize and "CSR table" in fitting.reason and "fits in" in fitting.reason


def test_auto_plan_on_a_200000_level_one_hot_table_fits(big):
    """must-show 4: the default plan="auto" fits without a MemoryError and the Plan says why."""
    nm, fk, numeric = big
    y = (numeric[:, 0] + (fk % 2) > 0.5).astype(int)
    for X in (nm, StandardScaler().fit(nm).transform(nm)):
        plan = choose(X, LogisticRegression(max_iter=3), repeats=1)
        assert plan.factorize or "fits in" in plan.reason
        if not memory.fits(X)[0]:
            assert plan.factorize
        model = LogisticRegression(max_iter=3, plan="auto").fit(X, y)
        assert model.plan_ == ("factorized" if plan.factorize else "materialized")
        assert model.coef_.shape == (1, LEVELS + 1)


def test_operators_with_auto_plan_never_materialize_what_does_not_fit(big, monkeypatch):
    nm, _, _ = big
    materializing_rule(monkeypatch)
    shifted = nm - 0.5
    x = np.ones(LEVELS + 1)
    out = shifted.matmul(x, plan="auto")  # the rule says materialize; 298 GiB does not fit
    assert out.shape == (LEVELS,)
    assert np.allclose(out[:5], nm[:5].toarray() @ x - 0.5 * (LEVELS + 1))


def test_available_memory_override_and_the_reason(monkeypatch):
    nm, _, _ = one_hot_table(2000)
    materializing_rule(monkeypatch)
    assert not choose(nm, "crossprod", repeats=1).factorize  # the rule materializes; it fits
    monkeypatch.setenv("ILARGI_AVAILABLE_MEMORY", "1000")
    assert memory.available_bytes() == 1000
    plan = choose(nm, "crossprod", repeats=1)
    assert plan.factorize and "does not fit in 80% of the 1000 B available" in plan.reason
    with pytest.raises(MemoryError, match="1000 B is available"):
        nm.materialize()
    monkeypatch.delenv("ILARGI_AVAILABLE_MEMORY")
    assert memory.available_bytes() > 2 ** 20


def test_available_memory_without_psutil(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_psutil(name, *args, **kwargs):
        if name == "psutil":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_psutil)
    available = memory.available_bytes()
    assert available is None or available > 0


def test_mixed_dense_parts_materialize_sparse_and_estimators_agree():
    """A CSR table from dense and sparse parts gives the materialized plan the same answers."""
    nm, fk, numeric = one_hot_table(300, n=3000, seed=1)
    assert sp.issparse(nm.materialize())
    y = numeric[:, 0] * 2 + np.sin(fk)
    factorized = LinearRegression(plan="factorized").fit(nm, y)
    materialized = LinearRegression(plan="materialized").fit(nm, y)
    assert np.allclose(factorized.coef_, materialized.coef_, rtol=1e-6, atol=1e-9)
    assert ilargi.choose(nm, factorized).features["n"] == 3000
