"""The memory guard (issue 12, class 7): materialize() builds what chooser.memory.layout says (CSR
for a mostly-zero table, whatever its parts), refuses a table that does not fit before allocating
it, and choose() never picks a materialized plan that does not fit, saying why in the Plan."""

import numpy as np
import pytest
import scipy.sparse as sp

import ilargi
from ilargi import NormalizedMatrix, choose, set_config
from ilargi.chooser import cost_model, memory, rules
from ilargi.models import LinearRegression, LogisticRegression, StandardScaler

LEVELS = 200_000


@pytest.fixture(autouse=True)
def shipped_only(monkeypatch, tmp_path):
    """Decide with the shipped model, whatever the user folder of this machine holds."""
    set_config(chooser_dir=str(tmp_path / "empty"))


def one_hot_table(levels, n=None, seed=0):
    """A fact table with one numeric column and a key of ``levels`` values, one-hot encoded: the
    dimension is the levels × levels identity (CSR), d = levels + 1."""
    n = levels if n is None else n
    rng = np.random.default_rng(seed)
    fk = rng.integers(0, levels, n)
    numeric = rng.standard_normal((n, 1))
    nm = NormalizedMatrix.from_parts(
        [numeric, sp.identity(levels, format="csr")],
        [None, fk],
        [[0], np.arange(1, levels + 1)],
        (n, levels + 1),
        names=["fact", "key"],
    )
    return nm, fk, numeric


@pytest.fixture(scope="module")
def big():
    return one_hot_table(LEVELS)


def test_layout_of_a_200000_level_one_hot_table(big):
    nm, _, _ = big
    planned = memory.layout(nm)
    assert planned.sparse and planned.entries == 2 * LEVELS
    assert planned.nbytes < 2**23  # a few MiB, where the dense table is 298 GiB
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
    set_config(available_memory=1000)
    assert memory.available_bytes() == 1000
    plan = choose(nm, "crossprod", repeats=1)
    assert plan.factorize and "does not fit in 80% of the 1000 B available" in plan.reason
    with pytest.raises(MemoryError, match="1000 B is available"):
        nm.materialize()
    set_config(available_memory=None)
    assert memory.available_bytes() > 2**20


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


def _fake_proc(tmp_path, cgroup_lines, statm="1000 10 5 1 0 200 0"):
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "cgroup").write_text("\n".join(cgroup_lines) + "\n")
    (proc / "statm").write_text(statm + "\n")
    return proc


def _fake_group(folder, **files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("__", ".")).write_text(text)


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """The cgroup folders and /proc/self of a fake host: memory.CGROUP_ROOT and memory.PROC_SELF
    point into tmp_path; no rlimit; plenty of physical memory."""
    root = tmp_path / "cgroup"
    root.mkdir()
    monkeypatch.setattr(memory, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(memory, "_physical_available", lambda: 64 << 30)
    monkeypatch.setattr(memory, "rlimit_headroom", lambda: None)
    # the groups are found once per process; these tests edit them between calls
    monkeypatch.setattr(memory, "_limited_groups", memory._limited_groups.__wrapped__)
    set_config(available_memory=None)
    return root


def test_cgroup_v2_limit_of_the_group_and_its_parents(fake_host, monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "PROC_SELF", str(_fake_proc(tmp_path, ["0::/jobs/job1"])))
    _fake_group(
        fake_host / "jobs" / "job1",
        memory__max="1000000",
        memory__current="400000",
        memory__stat="anon 300000\ninactive_file 100000\n",
    )
    _fake_group(fake_host / "jobs", memory__max="max", memory__current="900000")
    assert memory.cgroup_headroom() == 1000000 - (400000 - 100000)  # reclaimable cache is free
    assert memory.available_bytes() == 700000
    _fake_group(fake_host / "jobs", memory__max="1100000")  # the parent binds: 200000 left there
    assert memory.available_bytes() == 200000


def test_cgroup_v2_without_a_limit_or_files(fake_host, monkeypatch, tmp_path):
    monkeypatch.setattr(memory, "PROC_SELF", str(_fake_proc(tmp_path, ["0::/"])))
    assert memory.cgroup_headroom() is None  # no memory.max at all
    _fake_group(fake_host, memory__max="max\n", memory__current="5000")
    assert memory.cgroup_headroom() is None
    assert memory.available_bytes() == 64 << 30
    _fake_group(fake_host, memory__max="garbage")
    assert memory.cgroup_headroom() is None


def test_cgroup_v1_and_a_container_root(fake_host, monkeypatch, tmp_path):
    """v1 (memory.limit_in_bytes, "no limit" written as ~2**63); a container shows its group as
    the mount's root, not under the path /proc/self/cgroup names."""
    monkeypatch.setattr(
        memory,
        "PROC_SELF",
        str(_fake_proc(tmp_path, ["5:cpu,cpuacct:/x", "4:memory:/process_api/abc", "0::/"])),
    )
    _fake_group(
        fake_host / "memory", memory__limit_in_bytes=str(2**63 - 4096), memory__usage_in_bytes="100"
    )
    assert memory.cgroup_headroom() is None
    _fake_group(
        fake_host / "memory",
        memory__limit_in_bytes=str(3 << 30),
        memory__usage_in_bytes=str(1 << 30),
        memory__stat=f"cache 5\ntotal_inactive_file {1 << 29}\n",
    )
    assert memory.cgroup_headroom() == (3 << 30) - (1 << 30) + (1 << 29)
    _fake_group(
        fake_host / "memory" / "process_api" / "abc",
        memory__limit_in_bytes="4096",
        memory__usage_in_bytes="1024",
    )
    assert memory.available_bytes() == 3072  # the process's own group, below the root


def test_rlimits_against_the_address_space_and_data_in_use(monkeypatch, tmp_path):
    import os
    import resource

    page = os.sysconf("SC_PAGE_SIZE")
    monkeypatch.setattr(
        memory, "PROC_SELF", str(_fake_proc(tmp_path, ["0::/"], statm="1000 10 5 1 0 200 0"))
    )
    limits = {
        resource.RLIMIT_AS: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
        resource.RLIMIT_DATA: (resource.RLIM_INFINITY, resource.RLIM_INFINITY),
    }
    monkeypatch.setattr(resource, "getrlimit", lambda kind: limits[kind])
    assert memory.rlimit_headroom() is None
    limits[resource.RLIMIT_AS] = (5000 * page, resource.RLIM_INFINITY)
    assert memory.rlimit_headroom() == 4000 * page  # 1000 pages mapped already
    limits[resource.RLIMIT_DATA] = (300 * page, resource.RLIM_INFINITY)
    assert memory.rlimit_headroom() == 100 * page  # 200 pages of data in use
    monkeypatch.setattr(memory, "_physical_available", lambda: 64 << 30)
    monkeypatch.setattr(memory, "cgroup_headroom", lambda: None)
    set_config(available_memory=None)
    assert memory.available_bytes() == 100 * page


def test_cgroup_groups_are_found_once_and_only_usage_is_read_again(monkeypatch, tmp_path):
    """Walking the groups costs ~0.5 ms, half a plan decision's budget: done once per process."""
    root = tmp_path / "cgroup"
    monkeypatch.setattr(memory, "CGROUP_ROOT", str(root))
    monkeypatch.setattr(memory, "PROC_SELF", str(_fake_proc(tmp_path, ["0::/"])))
    _fake_group(root, memory__max="1000", memory__current="100")
    assert memory.cgroup_headroom() == 900
    _fake_group(root, memory__current="300")
    assert memory.cgroup_headroom() == 700  # the usage is read on each call


def test_a_cgroup_limit_refuses_the_materialized_plan(fake_host, monkeypatch, tmp_path):
    """The guard sees the container's limit: the plan chooser keeps the factorized plan and
    materialize() refuses, though the machine has 64 GiB free."""
    monkeypatch.setattr(memory, "PROC_SELF", str(_fake_proc(tmp_path, ["0::/"])))
    _fake_group(fake_host, memory__max=str(1 << 20), memory__current="0")
    nm, _, _ = one_hot_table(2000)
    shifted = nm - 0.5  # dense when built: 30.5 MiB
    materializing_rule(monkeypatch)
    plan = choose(shifted, "crossprod", repeats=1)
    assert plan.factorize and "does not fit in 80% of the 1 MiB available" in plan.reason
    with pytest.raises(MemoryError, match="1 MiB is available"):
        shifted.materialize()


def test_require_refuses_a_result_that_does_not_fit(monkeypatch):
    set_config(available_memory=1 << 30)
    memory.require(800 << 20, "the small crossprod")  # within 80 % of 1 GiB
    with pytest.raises(
        MemoryError,
        match=r"the 200000 x 200000 crossprod needs 298 GiB, more "
        r"than 80% of the 1 GiB available on the cpu",
    ):
        memory.require(8 * 200_000**2, "the 200000 x 200000 crossprod")
