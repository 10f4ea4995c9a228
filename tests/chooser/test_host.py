"""The host probe: what it measures, its cache (per machine and thread count), and refreshing it."""

import json

import pytest

from ilargi import set_config
from ilargi.chooser import host


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A private cache folder (the ``host_dir`` setting) and an empty in-process memo."""
    set_config(host_dir=str(tmp_path / "host"))
    host.clear_memo()
    yield tmp_path / "host"
    host.clear_memo()


@pytest.fixture
def counted(monkeypatch):
    """host.measure replaced by a fake that counts its calls (rates depend on the call number)."""
    calls = []

    def measure(threads=None):
        calls.append(threads)
        return {
            "cores": host.cores(),
            "threads": threads,
            "bandwidth_gbs": 10.0 * len(calls),
            "gemm_gflops": 50.0,
            "gather_gbs": 3.0,
            "call_us": 0.9,
            "seconds": 0.2,
        }

    monkeypatch.setattr(host, "measure", measure)
    return calls


def test_measure_is_quick_and_positive():
    measured = host.measure(1)
    assert measured["threads"] == 1 and measured["cores"] == host.cores()
    assert all(measured[name] > 0 for name in host.RATES)
    assert measured["seconds"] < 5  # about 0.3 s on the 2-core Xeon; a loaded CI host is slower
    # Sane orders of magnitude for any CPU of this century.
    assert 0.5 < measured["bandwidth_gbs"] < 2000 and 0.5 < measured["gemm_gflops"] < 1e5
    assert 0.01 < measured["call_us"] < 100


def test_probed_once_then_read_from_the_cache(folder, counted):
    first = host.probe(1)
    assert counted == [1] and first["bandwidth_gbs"] == 10.0
    path = host.cache_path(1)
    assert path.parent == folder and path.is_file()
    saved = json.loads(path.read_text())
    assert saved["machine"] == host.machine() and saved["bandwidth_gbs"] == 10.0
    assert host.probe(1) == first and counted == [1]  # the memo
    host.clear_memo()
    assert host.probe(1) == first and counted == [1]  # the file, in a "new process"


def test_each_thread_count_has_its_own_probe(folder, counted):
    one, two = host.probe(1), host.probe(2)
    assert counted == [1, 2] and one["threads"] == 1 and two["threads"] == 2
    assert host.cache_path(1) != host.cache_path(2)
    assert "-1t-" in host.cache_path(1).name and "-2t-" in host.cache_path(2).name


def test_refresh_measures_again_and_replaces_the_cache(folder, counted):
    host.probe(1)
    again = host.probe(1, refresh=True)
    assert counted == [1, 1] and again["bandwidth_gbs"] == 20.0
    host.clear_memo()
    assert host.probe(1)["bandwidth_gbs"] == 20.0 and counted == [1, 1]


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        json.dumps({"bandwidth_gbs": 1.0}),
        json.dumps(
            {"machine": {"version": host.PROBE_VERSION - 1}, **dict.fromkeys(host.PROPERTIES, 1)}
        ),
    ],
)
def test_a_broken_or_outdated_cache_is_measured_again(folder, counted, content):
    path = host.cache_path(1)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    assert host.probe(1)["bandwidth_gbs"] == 10.0 and counted == [1]
    assert json.loads(path.read_text())["machine"]["version"] == host.PROBE_VERSION


def test_an_explicit_folder_and_an_unwritable_one(tmp_path, folder, counted):
    other = tmp_path / "other"
    host.probe(1, folder=other)
    assert host.cache_path(1, other).is_file() and not folder.exists()
    blocked = tmp_path / "file"
    blocked.write_text("")  # a folder that cannot be created: the probe still serves the process
    assert host.probe(1, folder=blocked / "sub")["bandwidth_gbs"] == 20.0


def test_another_machine_has_another_cache_file(folder, monkeypatch):
    mine = host.cache_path(1)
    monkeypatch.setattr(host, "_cpu_model", lambda: "Some Other CPU")
    assert host.cache_path(1) != mine and host.cache_path(1).name.startswith("some-other-cpu-")


def test_a_probe_taken_while_the_kernels_build_is_not_kept(folder, counted, monkeypatch):
    monkeypatch.setattr(host, "compiling", lambda: True)
    first = host.probe(1)
    assert not host.cache_path(1).exists()  # the build held a core: not kept for good
    assert host.probe(1) == first and counted == [1]  # this process keeps it
    monkeypatch.setattr(host, "compiling", lambda: False)
    host.clear_memo()  # the next process
    assert host.probe(1)["bandwidth_gbs"] == 20.0 and counted == [1, 1]
    assert host.cache_path(1).is_file()
