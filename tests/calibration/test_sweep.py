"""The sweep's scenario generator (the "keys" style: a fact table of keys and at most a few
numeric columns), its targets, and the workload a fit is recorded with."""

import lzma
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from ilargi import set_config
from ilargi.backend import threads as thread_control
from ilargi.calibration.runs import iterations_run, model_calls
from ilargi.calibration.sweep import _labels, _shrink, _targets, build, draw
from ilargi.chooser.workload import Workload, workload_of
from ilargi.models import LogisticRegression


def keys_scenarios(count, max_rows=20_000):
    rng = np.random.default_rng(0)
    found = []
    while len(found) < count:
        params = draw(rng, max_rows=max_rows)
        if params["style"] == "keys":
            found.append(_shrink(params))
    return found


def test_keys_style_has_key_encoded_dimensions_and_at_most_a_numeric_fact():
    scenarios = keys_scenarios(8)
    assert {p["numeric_fact"] for p in scenarios} == {False, True}  # both kinds are drawn
    for params in scenarios:
        nm = build(params)
        facts = [part for part in nm.parts if part.name.startswith("fact")]
        if params["numeric_fact"]:  # dense numeric columns, as Hamlet's Walmart
            assert len(facts) == 1 and isinstance(facts[0].source, np.ndarray)
            assert facts[0].source.shape[1] == params["d_fact"]
        else:
            assert not facts
        for part in nm.parts:
            if part in facts:
                continue
            S = part.source
            rows = S.shape[0]
            assert sp.issparse(S) and S.shape[1] > rows
            # column i is row i's key; the rest of each row are attribute ones
            np.testing.assert_array_equal(S[:, :rows].toarray(), np.eye(rows))
            assert (S.data == 1).all() and (np.diff(S.indptr) >= 2).all()
        assert nm.shape[1] == sum(part.source.shape[1] for part in nm.parts)


def test_a_fit_is_recorded_with_the_iterations_it_ran():
    nm = build(keys_scenarios(1, max_rows=3_000)[0])
    y = _labels(_targets(nm, np.random.default_rng(0))[0], 2)
    estimator = LogisticRegression(max_iter=500)
    fact, mat, _ = model_calls(estimator, nm, nm.materialize(), y)
    fact(), mat()
    ran = fact.estimator.n_iter_
    assert 1 <= ran < 500 and mat.estimator.n_iter_ == ran  # it converged early, both plans alike
    budget = workload_of(estimator, nm.shape)
    assert iterations_run(budget, fact.estimator) == Workload("logreg_lbfgs", 1, ran)
    assert estimator.get_params()["plan"] == "auto"  # the caller's estimator is not fitted
    assert iterations_run(Workload("logreg_lbfgs", 1, ran - 1 or 1), fact.estimator).iterations == (
        ran - 1 or 1
    )  # never more than the budget
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        short = LogisticRegression(max_iter=2).fit(nm, y)
    assert iterations_run(workload_of(short, nm.shape), short).iterations == 2


def test_a_sweep_can_draw_some_styles_only(tmp_path):

    from ilargi.calibration.sweep import STYLES, _dim_shapes, _shrink, sweep

    rng = np.random.default_rng(0)
    assert {draw(rng, styles=["onehot", "keys"])["style"] for _ in range(40)} == {"onehot", "keys"}
    for bad in (["bogus"], []):
        with pytest.raises(ValueError, match="styles must be a non-empty subset"):
            sweep(tmp_path / "sweep.csv", budget_seconds=1, styles=bad, log=None)
    assert set(STYLES) == {
        "dense", "sparse", "onehot", "mixed", "keys", "wide_keys", "roles", "tall"
    }  # fmt: skip
    asked_for_only = {"wide_keys", "roles", "tall"}
    assert {draw(rng)["style"] for _ in range(200)} == set(STYLES) - asked_for_only
    wide = [_shrink(draw(rng, styles=["wide_keys"])) for _ in range(20)]
    assert {p["style"] for p in wide} == {"wide_keys"}
    assert all(round(ones) >= 5 for p in wide for _, _, ones in p["dims"])
    assert all(
        per_row >= 5 and cols - rows >= 3 * 5
        for p in wide
        for rows, cols, per_row in _dim_shapes(p)
    )


def test_the_tall_style_draws_warehouse_fact_tables_within_its_caps():
    from ilargi.calibration.sweep import TALL_CAPS, TALL_ROWS, _dim_shapes, _shrink

    rng = np.random.default_rng(1)
    drawn = [draw(rng, max_rows=5e3, styles=["tall"]) for _ in range(30)]
    assert all(TALL_ROWS[0] <= p["n_fact"] <= TALL_ROWS[1] for p in drawn)  # not max_rows's
    assert {p["join"] for p in drawn} <= {"inner", "left", "snowflake"}
    for params in map(_shrink, drawn):
        numeric = 4 * (1 + len(_dim_shapes(params)))
        row = params["d_fact"] * params["density"] + numeric
        row += sum(per_row for _, _, per_row in _dim_shapes(params))
        assert params["n_fact"] * row <= TALL_CAPS["entries"] * 1.001
    nm = build(_shrink({**drawn[0], "n_fact": 3_000}))  # numeric columns beside one-hot ones
    assert nm.shape[0] == 3_000 and any(isinstance(p.source, np.ndarray) for p in nm.parts)


def test_the_binary_target_has_two_classes_even_when_scores_tie():
    from ilargi.datasets import make_star

    nm, _ = make_star(50, tuple_ratio=50, d_fact=1, random_state=0, target=None)
    tied = abs(nm) * 0.0  # every score 0: z > median(z) would be one class
    y = _labels(_targets(tied, np.random.default_rng(0))[0], 2)
    assert sorted(np.unique(y)) == [0.0, 1.0] and y.sum() == 25


def test_more_classes_are_balanced_by_rank_and_the_fit_is_that_wide(tmp_path):
    """A k-class target splits the rows into k equal parts by score (ties too), and its logistic
    fit is recorded k columns wide, as the fitted estimator describes it (a softmax pass)."""
    import pandas as pd

    from ilargi.calibration.sweep import CLASSES, sweep

    scores = np.repeat([3.0, 1.0, 2.0], [4, 5, 6])
    labels = _labels(scores, 5)
    np.testing.assert_array_equal(np.bincount(labels.astype(int)), [3] * 5)
    assert (np.diff(labels[np.argsort(scores, kind="stable")]) >= 0).all()  # ordered by score
    assert max(CLASSES) > 2 and CLASSES.count(2) > 1  # binary most often

    nm, rng = build(keys_scenarios(1, max_rows=3_000)[0]), np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 3 steps do not converge
        model = LogisticRegression(max_iter=3).fit(nm, _labels(_targets(nm, rng)[0], 5))
    assert workload_of(model, nm.shape) == Workload("logreg_lbfgs", 5, 3)
    assert workload_of(LogisticRegression(max_iter=3), nm.shape).m == 1  # unfitted: two classes

    out = tmp_path / "fits.csv"
    rows, scenarios, _ = sweep(
        out, budget_seconds=120, seed=3, max_scenarios=6, threads=(1,), log=None, fits_only=True
    )
    frame = pd.read_csv(out)
    assert rows == len(frame) > 0 and scenarios == 6
    assert (
        frame["workload"]
        .isin(
            [
                "linreg_cholesky",
                "linreg_lsqr",
                "linreg_cg",
                "logreg_gd",
                "logreg_lbfgs",
                "kmeans",
                "gnmf",
            ]
        )
        .all()
    )  # no operator
    logistic = frame[frame["workload"].str.startswith("logreg")]
    assert set(logistic["m"]) <= {1, 3, 5, 8} and logistic["m"].max() > 1  # these seeds draw some


def test_refeaturize_recomputes_the_features_and_keeps_the_times(tmp_path):
    """The scenarios are drawn again from the sweep's seed and budget: the features of every row
    come back as the sweep wrote them, whatever the CSV held, and the times stay."""
    import pandas as pd

    from ilargi.calibration.sweep import refeaturize, sweep

    out = tmp_path / "sweep.csv"
    sweep(out, budget_seconds=10, seed=2, max_scenarios=3, threads=(1,), log=None, fits_only=True)
    frame = pd.read_csv(out)
    stale = frame.assign(mat_sparse=1 - frame["mat_sparse"], flops_mat=-1.0)  # an old definition
    stale.to_csv(out, index=False)
    rows, changed = refeaturize(out, out, seed=2, budget_seconds=10, log=None)
    assert rows == len(frame) > 0
    assert changed["mat_sparse"] == changed["flops_mat"] == len(frame)
    pd.testing.assert_frame_equal(pd.read_csv(out), frame)
    packed = tmp_path / "sweep.csv.xz"  # an .xz output: the same CSV text, compressed
    refeaturize(out, packed, seed=2, budget_seconds=10, log=None)
    assert lzma.decompress(packed.read_bytes()) == out.read_bytes()
    assert not list(tmp_path.glob("*.partial"))
    assert refeaturize(packed, packed, seed=2, budget_seconds=10, log=None) == (len(frame), {})
    pd.testing.assert_frame_equal(pd.read_csv(packed), frame)
    with pytest.raises(ValueError, match="is not the one seed 3 and a budget of 10 s draw"):
        refeaturize(out, tmp_path / "other.csv", seed=3, budget_seconds=10, log=None)
    assert not (tmp_path / "other.csv").exists()
    # the device features are the row's own (the machine that timed it), whatever runs this
    elsewhere = tmp_path / "elsewhere.csv"
    frame.assign(cores=64).to_csv(elsewhere, index=False)
    refeaturize(elsewhere, elsewhere, seed=2, budget_seconds=10, log=None)
    pd.testing.assert_frame_equal(pd.read_csv(elsewhere), frame.assign(cores=64))
    from ilargi.calibration.__main__ import main

    assert main(["refeaturize", str(out), "--seed", "2", "--budget-seconds", "10"]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), frame)
    assert main(["refeaturize", str(out), "--seed", "3", "--budget-seconds", "10"]) == 2


def test_refeaturize_times_the_fits_named_again(tmp_path):
    """``retime``: the rows of those fits get new times (their scenarios' estimators drawn as
    the sweep drew them: same widths and iterations), every other row stays as it was."""
    import pandas as pd

    from ilargi.calibration.__main__ import main
    from ilargi.calibration.sweep import refeaturize, sweep

    out = tmp_path / "sweep.csv"
    sweep(out, budget_seconds=10, seed=2, max_scenarios=3, threads=(1,), log=None, fits_only=True)
    frame = pd.read_csv(out)
    kind = frame["workload"].iloc[0]
    mine = frame["workload"] == kind
    stale = frame.assign(t_fact=frame["t_fact"].where(~mine, 1e3))  # a time no fit here takes
    stale.to_csv(out, index=False)
    refeaturize(out, out, seed=2, budget_seconds=10, log=None, retime=(kind,))
    again = pd.read_csv(out)
    pd.testing.assert_frame_equal(again[~mine], frame[~mine])
    assert (again.loc[mine, "t_fact"] < 1e3).all()
    columns = ["scenario", "workload", "m", "iterations", "threads"]
    pd.testing.assert_frame_equal(again.loc[mine, columns], frame.loc[mine, columns])
    with pytest.raises(ValueError, match="workload kinds of fits"):
        refeaturize(out, out, seed=2, budget_seconds=10, log=None, retime=("lmm",))
    assert (
        main(["refeaturize", str(out), "--seed", "2", "--budget-seconds", "10", "--retime", kind])
        == 0
    )
    assert (
        main(["refeaturize", str(out), "--seed", "2", "--budget-seconds", "10", "--retime", "lmm"])
        == 2
    )


@pytest.mark.skipif(thread_control.max_num_threads() < 2, reason="needs 2 threads")
def test_joins_are_timed_at_each_thread_count_and_again_on_request(tmp_path, monkeypatch):
    """A sweep times the join at every thread count its rows run at (the compiled backend builds
    it on all threads); ``retime=("join",)`` replaces every row's t_join, at its thread count,
    and nothing else."""
    import pandas as pd

    from ilargi.calibration import sweep as sweeps

    seen = []
    real = sweeps.time_join

    def spy(nm, repeats=3, sync=None):
        seen.append(sweeps.thread_control.get_num_threads())
        return real(nm, repeats, sync)

    monkeypatch.setattr(sweeps, "time_join", spy)
    out = tmp_path / "sweep.csv"
    sweeps.sweep(
        out, budget_seconds=10, seed=2, max_scenarios=2, threads=(1, 2), log=None, fits_only=True
    )
    assert seen == [1, 2] * 2
    frame = pd.read_csv(out)
    stale = frame.assign(t_join=1e3)
    stale.to_csv(out, index=False)
    seen.clear()
    sweeps.refeaturize(out, out, seed=2, budget_seconds=10, log=None, retime=("join",))
    again = pd.read_csv(out)
    assert seen == [1, 2] * 2 and (again["t_join"] < 1e3).all()
    for scenario, rows in again.groupby("scenario"):  # one join time per thread count
        assert (rows.groupby("threads")["t_join"].nunique() == 1).all()
    pd.testing.assert_frame_equal(again.drop(columns="t_join"), frame.drop(columns="t_join"))


def test_a_workload_whose_results_exceed_the_memory_share_is_skipped(monkeypatch):
    from ilargi.calibration.sweep import MEMORY_SHARE, _time_workload
    from ilargi.datasets import make_star

    nm, _ = make_star(200, tuple_ratio=10, target=None, random_state=0)  # dense: T is dense
    T = nm.materialize()
    rng = np.random.default_rng(0)
    d = nm.shape[1]
    results = 2 * d * d * 8  # both plans' d × d crossprods
    lines = []
    set_config(available_memory=results / MEMORY_SHARE - 1)
    assert (
        _time_workload(
            nm, T, 1e-3, Workload("crossprod"), None, rng, "cpu", None, None, None, lines.append
        )
        is None
    )
    assert lines and "skipped" in lines[0] and "GiB" in lines[0]
    set_config(available_memory=results / MEMORY_SHARE)
    row, _ = _time_workload(
        nm, T, 1e-3, Workload("crossprod"), None, rng, "cpu", None, None, None, None
    )
    assert row["workload"] == "crossprod" and row["t_fact"] > 0
    set_config(available_memory=1)  # other workloads hold no such result
    assert (
        _time_workload(nm, T, 1e-3, Workload("lmm", 2), None, rng, "cpu", None, None, None, None)
        is not None
    )


def test_roles_style_joins_one_small_dimension_twice():
    """A "roles" scenario: a dense star whose first dimension is joined a second time, the same
    source through an index vector of its own; its products equal the materialized table's."""
    rng = np.random.default_rng(3)
    scenarios = [_shrink(draw(rng, max_rows=20_000, styles=["roles"])) for _ in range(6)]
    assert {p["join"] for p in scenarios} <= {"inner", "left"}
    for params in scenarios:
        nm = build(params)
        parts = nm.parts
        sources = [id(p.source) for p in parts]
        twice = [p for p in parts if sources.count(id(p.source)) == 2]
        assert len(twice) == 2 and sum(":role" in p.name for p in twice) == 1
        assert not any(sp.issparse(p.source) for p in parts)
        if params["join"] == "left" and params["dangling"] > 0.1:
            assert (twice[1].indicator.rows < 0).any()
        x = np.random.default_rng(0).standard_normal(nm.shape[1])
        np.testing.assert_allclose(nm @ x, nm.materialize() @ x, rtol=1e-12, atol=1e-12)
