"""must-show 3: a host outside the cost model's training range gets the analytic rule's decision,
and a Plan that says so -- the shipped model and a hybrid trained here alike."""

import pytest

import ilargi
from ilargi import set_config
from ilargi.chooser import cost_model, host, rules
from ilargi.chooser.cost_model import load, shipped_folder, train
from ilargi.models import LogisticRegression
from tests.sweeps import epyc_sweep, probed


def faked(monkeypatch, **changes):
    """This host's probe, with some properties changed (a host that is not here)."""
    real = host.probe
    monkeypatch.setattr(
        host, "probe", lambda threads=None, **options: {**real(threads, **options), **changes}
    )


@pytest.fixture
def shipped(monkeypatch, tmp_path):
    set_config(chooser_dir=str(tmp_path / "empty"))
    cost_model.clear_cache()
    return load("cpu")


@pytest.mark.parametrize("what, repeats", [("lmm", None), ("crossprod", 1), ("gramvec", None)])
def test_a_16_core_host_gets_the_rule_from_the_shipped_model(
    shipped, monkeypatch, chooser_star, what, repeats
):
    nm, _ = chooser_star
    assert shipped.folder == shipped_folder()
    low, high = shipped.device_ranges["cores"]
    assert high < 1.2  # log10: trained on hosts of at most 15 cores
    faked(
        monkeypatch, cores=16, threads=16, bandwidth_gbs=120.0, gemm_gflops=900.0, gather_gbs=40.0
    )
    plan = ilargi.choose(nm, what, repeats=repeats)
    features = plan.features
    assert features["cores"] == 16 and features["threads"] == 16
    assert plan.reason.startswith(f"host outside the training range (cores = 16 > {10**high:.4g})")
    assert "analytic cost at this host's probed rates" in plan.reason
    assert plan.factorize == rules.analytic(features, repeats)
    assert plan.speedup == pytest.approx(rules.analytic_speedup(features, repeats))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_fit_with_plan_auto_on_that_host_follows_the_rule(shipped, monkeypatch, chooser_star):
    nm, y = chooser_star
    faked(monkeypatch, cores=16, threads=16)
    plan = ilargi.choose(nm, LogisticRegression(max_iter=3), repeats=1)
    assert plan.reason.startswith("host outside the training range (cores = 16")
    fitted = LogisticRegression(max_iter=3, plan="auto").fit(nm, y)
    assert fitted.plan_ == ("factorized" if plan.factorize else "materialized")


@pytest.fixture(scope="module")
def pinned():
    """This host's probe at 1 and 2 threads, measured once and held for the module: other tests'
    sweeps probe again (under the load of the test run), which would move "this host" between
    training the hybrid and asking it."""
    values = {k: host.probe(k) for k in (1, 2)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            host,
            "probe",
            lambda threads=None, **options: values[
                ilargi.get_num_threads() if threads is None else int(threads)
            ],
        )
        yield values


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory, pinned):
    """A hybrid cost model trained on 60 shipped scenarios, given this host's probe."""
    folder = tmp_path_factory.mktemp("hybrid")
    rows = probed(epyc_sweep())
    sweep = folder / "sweep.csv"
    rows[rows["scenario"] < 60].to_csv(sweep, index=False)
    train([sweep], folder, folds=2)
    return folder


@pytest.mark.parametrize(
    "name, side",
    [
        ("bandwidth_gbs", "above"),
        ("gather_gbs", "below"),
        ("gemm_gflops", "above"),
        ("call_us", "below"),
    ],
)
def test_a_rate_outside_the_hybrids_range(hybrid, monkeypatch, chooser_star, name, side):
    nm, _ = chooser_star
    set_config(chooser_dir=str(hybrid))
    cost_model.clear_cache()
    model = load("cpu")
    assert model.hybrid and model.folder == hybrid
    here = ilargi.choose(nm, "lmm", m=4)
    assert here.reason.startswith(f"cost model ({hybrid})")  # this host: trained on it
    low, high = (10**bound for bound in model.device_ranges[name])
    value = high * 3 if side == "above" else low / 3  # beyond the slack of 2x
    faked(monkeypatch, **{name: value})
    plan = ilargi.choose(nm, "lmm", m=4)
    assert plan.reason.startswith(
        f"host outside the training range ({name} = {value:.4g} {'>' if side == 'above' else '<'} "
    )
    assert "by over 2x" in plan.reason
    assert plan.factorize == rules.analytic(plan.features)
    faked(monkeypatch, **{name: high * 1.5 if side == "above" else low / 1.5})  # within the slack
    assert ilargi.choose(nm, "lmm", m=4).reason.startswith(f"cost model ({hybrid})")
