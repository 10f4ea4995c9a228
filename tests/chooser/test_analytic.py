"""The analytic cost: the gathers counted for both plans, its formula, and decisions that follow the host."""

import math

import pytest

from ilargi.chooser import rules
from ilargi.chooser.features import combine, data_features, workload_costs
from ilargi.chooser.workload import Workload
from ilargi.datasets import make_star

HOST = {
    "device": "cpu",
    "cores": 2,
    "threads": 1,
    "bandwidth_gbs": 15.0,
    "gemm_gflops": 70.0,
    "gather_gbs": 5.0,
    "call_us": 0.8,
    "llc_mib": 0.0,
    "gpu_sms": 0,
    "gpu_bandwidth_gbs": 0.0,
    "gpu_memory_gb": 0.0,
}


@pytest.fixture(scope="module")
def star():
    """200,000 dense fact rows, two dimensions of 50,000 rows each (TR = 4), dense: T is dense;
    a dimension's per-row results are too large to stay in cache."""
    nm, _ = make_star(
        200_000, tuple_ratio=4, feature_ratio=2, n_dims=2, d_fact=5, target=None, random_state=0
    )
    return data_features(nm)


def features(star, workload, **host):
    return combine(*star, workload, "cpu", {**HOST, **host})


def test_gathers_and_passes(star):
    data, stats = star
    n, d = data["n"], data["d"]
    work = workload_costs(stats, data, Workload("lmm", 4))
    # each dimension's S_p X_p gathered once per target row, m values of 8 bytes; dense T: none
    assert work.gather_fact == 2 * n * 4 * 8 and work.gather_mat == 0.0 and work.passes == 1
    assert work.join_gather == n * d * 8  # every entry of T read from a source row
    fit = workload_costs(stats, data, Workload("logreg_gd", 1, 20))
    assert fit.passes == 2 * 20 + 2  # T·w and Tᵀ·g per iteration, two row-sum passes for the step
    assert fit.gather_fact == 20 * 2 * (2 * n * 8) + 2 * (2 * n * 8)


def test_small_dimensions_are_read_as_streamed():
    """A dimension that stays in cache (here 200 rows) is read at random rows for the price of
    streamed reads: no gathers charged, neither in the operators nor in the join."""
    nm, _ = make_star(
        200_000, tuple_ratio=1_000, feature_ratio=2, n_dims=2, d_fact=5, target=None, random_state=0
    )
    data, stats = data_features(nm)
    n, d_fact = data["n"], 5
    for workload in (
        Workload("lmm", 4),
        Workload("tmm", 8),
        Workload("rowsums"),
        Workload("crossprod"),
    ):
        assert workload_costs(stats, data, workload).gather_fact == 0.0
    assert workload_costs(stats, data, Workload("lmm", 4)).join_gather == n * d_fact * 8


def test_the_formula(star):
    f = features(star, Workload("tmm", 8))
    call, bandwidth, gemm, gather = 0.8e-6, 15e9, 70e9, 5e9
    fact = (
        f["passes"] * (rules.CALLS_FIXED + rules.CALLS_PER_PART * f["n_parts"]) * call
        + f["flops_fact"] / gemm
        + f["bytes_fact"] / bandwidth
        + f["gather_fact"] / gather
    )
    mat = (
        f["passes"] * rules.CALLS_FIXED * call
        + f["flops_mat"] / gemm
        + f["bytes_mat"] / bandwidth
        + f["gather_mat"] / gather
    )
    join = (
        f["n_parts"] * rules.CALLS_PER_PART * call
        + f["join_bytes"] / bandwidth
        + f["join_gather"] / gather
    )
    assert rules.analytic_seconds(f) == pytest.approx((fact, mat, join), rel=1e-12)
    assert f["analytic_log_speedup"] == pytest.approx(math.log(mat / fact), rel=1e-12)
    assert f["analytic_log_join"] == pytest.approx(math.log(join / fact), rel=1e-12)
    assert rules.analytic_speedup(f, 4) == pytest.approx(mat / fact + join / fact / 4, rel=1e-12)


def test_a_crossprod_pays_calls_per_pair_and_a_csr_join_fixed_calls(star):
    """A factorized crossprod's cross blocks and a CSR table's construction are priced as calls
    (a 400-row table's crossprod runs in a tenth of the factorized one's time)."""
    call = HOST["call_us"] * 1e-6
    f = features(star, Workload("crossprod"))
    other = rules.analytic_seconds({**f, "workload": "gramvec"})
    fact, mat, join = rules.analytic_seconds(f)
    pairs = f["n_parts"] * (f["n_parts"] - 1) / 2
    for sparse in (0.0, 1.0):
        calls = rules.CROSSPROD_CALLS + pairs * (
            rules.CALLS_PER_PAIR + rules.CALLS_PER_SPARSE_PAIR * sparse
        )
        priced = rules.analytic_seconds({**f, "sparse_frac": sparse})[0]
        assert priced - other[0] == pytest.approx(calls * call, rel=1e-9)
    assert (mat, join) == other[1:]
    assert not f["mat_sparse"]
    csr_join = rules.analytic_seconds({**f, "mat_sparse": True})[2]
    assert csr_join - join == pytest.approx(rules.SPARSE_JOIN_CALLS * call, rel=1e-9)
    # a Cholesky fit runs one crossprod
    fit = features(star, Workload("linreg_cholesky"))
    assert rules.analytic_seconds(fit)[0] > rules.analytic_seconds({**fit, "workload": "x"})[0]


def test_the_decision_follows_the_host(star):
    workload = Workload("lmm", 1)
    base = rules.analytic_speedup(features(star, workload))
    # the factorized plan makes more calls, gathers where the materialized plan streams
    assert rules.analytic_speedup(features(star, workload, call_us=8.0)) < base
    assert rules.analytic_speedup(features(star, workload, gather_gbs=50.0)) > base
    assert rules.analytic_speedup(features(star, workload, gather_gbs=0.5)) < base
    # a host whose calls cost a millisecond materializes what a fast one factorizes
    assert rules.analytic(features(star, workload, call_us=1.0, gather_gbs=50.0))
    assert not rules.analytic(features(star, workload, call_us=1000.0))


def test_the_join_charge_and_the_reason(star):
    f = features(star, Workload("crossprod"))
    once, amortized = rules.analytic_speedup(f, 1), rules.analytic_speedup(f)
    assert once > amortized and rules.analytic(f, 1) == (once > 1)
    reason = rules.analytic_reason(f, 1)
    assert reason.startswith("analytic cost at this host's probed rates: factorized ")
    assert "charged to 1" in reason and f"{once:.2f}x" in reason and "\n" not in reason
    assert "join" not in rules.analytic_reason(f)


def test_a_factorized_crossprod_prices_its_sparse_work_apart():
    """The factorized crossprod's multiply-adds with a sparse side are a count of their own,
    priced at CROSS_SPARSE_BYTES by the rule, not at SpGEMM's price among the bytes."""
    nm, _ = make_star(
        3_000,
        tuple_ratio=5,
        feature_ratio=2,
        n_dims=2,
        d_fact=6,
        density=0.05,
        target=None,
        random_state=0,
    )
    data, stats = data_features(nm)
    cross = workload_costs(stats, data, Workload("crossprod"))
    cholesky = workload_costs(stats, data, Workload("linreg_cholesky"))
    assert cross.sparse_work_fact > 0 and cholesky.sparse_work_fact == cross.sparse_work_fact
    assert workload_costs(stats, data, Workload("lmm", 4)).sparse_work_fact == 0.0
    f = combine(data, stats, Workload("crossprod"), "cpu", HOST)
    without = rules.analytic_seconds({**f, "sparse_work_fact": 0.0})[0]
    priced = rules.CROSS_SPARSE_BYTES * f["sparse_work_fact"] / (HOST["bandwidth_gbs"] * 1e9)
    assert rules.analytic_seconds(f)[0] - without == pytest.approx(priced, rel=1e-9)
