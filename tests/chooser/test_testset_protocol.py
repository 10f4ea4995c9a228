"""benchmarks/chooser_testset.py: the frozen test set's manifest, and the run-once rule."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ilargi import set_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness():
    sys.path.insert(0, str(REPO / "benchmarks"))  # it imports its neighbour _timing
    try:
        spec = importlib.util.spec_from_file_location(
            "chooser_testset", REPO / "benchmarks" / "chooser_testset.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_frozen_manifest_is_the_set_defined_in_code(harness):
    frozen = json.loads(harness.MANIFEST.read_text())
    assert [entry["name"] for entry in frozen["datasets"]] == [d.name for d in harness.TEST]
    assert frozen["hash"] == harness.manifest_body(frozen["datasets"])
    assert frozen["workloads"] == list(harness.WORKLOADS) and frozen["tie"] == harness.TIE == 0.10
    assert frozen["workload_count"] == len(harness.TEST) * len(harness.WORKLOADS) >= 40
    # nothing the models were selected on is in it
    chosen_on = {d.name for d in harness.selection(Path("/nonexistent"))}
    assert chosen_on.isdisjoint(d.name for d in harness.TEST)
    assert not any(
        d.source.split(":")[0] in ("Hamlet", "Santoku", "make_star") for d in harness.TEST
    )


def test_earlier_test_sets_are_kept_and_are_selection_data(harness):
    from chooser_sets import (
        TEST_V1,
        TEST_V2,
        TEST_V3,
        TEST_V4,
        TEST_V5,
        TEST_V6,
        TEST_V7,
        TEST_V8,
        TEST_V9,
    )

    chosen_on = {d.name for d in harness.selection(Path("/nonexistent"))}
    for version, tested in enumerate(
        (TEST_V1, TEST_V2, TEST_V3, TEST_V4, TEST_V5, TEST_V6, TEST_V7, TEST_V8, TEST_V9), start=1
    ):
        record = REPO / "benchmarks" / f"chooser_testset_v{version}_manifest.json"
        frozen = json.loads(record.read_text())
        assert frozen["version"] == version
        assert [entry["name"] for entry in frozen["datasets"]] == [d.name for d in tested]
        assert {d.name for d in tested} <= chosen_on


def test_the_manifest_sees_a_changed_dataset(harness):
    import numpy as np
    from chooser_sets import Dataset

    from ilargi.datasets import make_star

    build = lambda seed: lambda: make_star(300, tuple_ratio=5, random_state=seed)  # noqa: E731
    first = harness.manifest([Dataset("a", build(0), "synthetic")], log=None)
    again = harness.manifest([Dataset("a", build(0), "synthetic")], log=None)
    other = harness.manifest([Dataset("a", build(1), "synthetic")], log=None)
    assert first["hash"] == again["hash"] != other["hash"]
    nm, y = build(0)()
    entry = harness.describe(nm, y)
    assert entry["n"] == 300 and len(entry["parts"]) == len(nm.parts)
    assert (
        harness.describe(nm, np.where(np.arange(300) == 7, np.nan, y))["digest"] != entry["digest"]
    )


def test_a_model_is_tested_once_per_thread_count(harness, monkeypatch, tmp_path, capsys):
    ledger = tmp_path / "runs.jsonl"
    monkeypatch.setattr(harness, "LEDGER", ledger)
    model_hash, _ = harness.model_identity()
    frozen = json.loads(harness.MANIFEST.read_text())
    entry = {"model_hash": model_hash, "threads": 1, "date": "2026-12-05T00:00:00+00:00"}
    ledger.write_text(json.dumps({**entry, "testset_hash": frozen["hash"]}) + "\n")
    with pytest.raises(SystemExit, match=f"model {model_hash} was already tested at 1 thread"):
        harness.main(["test", "--threads", "1"])
    # --again, another thread count, or this set after a run on another set, goes on to check
    # the frozen set: here a mismatching one
    monkeypatch.setattr(harness, "MANIFEST", tmp_path / "manifest.json")
    (tmp_path / "manifest.json").write_text(json.dumps({**frozen, "hash": "0" * 64}))
    for argv in (["test", "--threads", "1", "--again"], ["test", "--threads", "2"]):
        with pytest.raises(SystemExit, match="does not match the test set defined here"):
            harness.main(argv)
    assert len(ledger.read_text().splitlines()) == 1  # nothing was recorded
    (tmp_path / "manifest.json").write_text(json.dumps({**frozen, "hash": "1" * 64}))
    ledger.write_text(json.dumps({**entry, "testset_hash": "0" * 64}) + "\n")  # another set
    with pytest.raises(SystemExit, match="does not match the test set defined here"):
        harness.main(["test", "--threads", "1"])


def test_the_model_identity_follows_the_files(harness, monkeypatch, tmp_path):
    from ilargi.chooser import cost_model

    shipped, _ = harness.model_identity()
    for path in cost_model.shipped_folder().glob("chooser_cpu*"):
        if path.suffix in (".json", ".txt"):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    set_config(chooser_dir=str(tmp_path))
    cost_model.clear_cache()
    assert harness.model_identity()[0] == shipped  # the same files: the same model
    (tmp_path / "chooser_cpu.txt").write_text((tmp_path / "chooser_cpu.txt").read_text() + "\n")
    cost_model.clear_cache()
    assert harness.model_identity()[0] != shipped
    cost_model.clear_cache()
