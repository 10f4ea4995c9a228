"""ilargi._config: defaults from the environment, set/get, blocks that restore and nest, one set of
settings per thread (and the library's own pools running with the caller's), validation, and each
setting read by the code it configures."""

import importlib.util
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import ilargi
from ilargi import _config, config_context, get_config, set_config
from ilargi.backend import backend_of, cpu, cpu_kernels, kernels_held

REPO = Path(__file__).resolve().parents[1]
KEYS = {
    "kernels",
    "gpu_stacked",
    "gpu_fused_gramvec",
    "gpu_segment_sum",
    "chooser_dir",
    "host_dir",
    "available_memory",
    "datasets_dir",
}


def _config_in_a_process(**environment):
    """get_config() of a fresh process whose environment has these ILARGI_* variables (and no
    others): (return code, the config as JSON or the error's last line)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ILARGI_")}
    env.update(environment, PYTHONPATH=str(REPO))
    code = (
        "import json, ilargi; "
        "print(json.dumps({k: v if v is None or isinstance(v, (bool, int, str)) else str(v) "
        "for k, v in ilargi.get_config().items()}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    if run.returncode:
        return run.returncode, run.stderr.strip().splitlines()[-1]
    return 0, json.loads(run.stdout)


def test_the_defaults_come_from_the_environment(tmp_path):
    _, plain = _config_in_a_process()
    assert plain == {
        "kernels": "auto",
        "gpu_stacked": True,
        "gpu_fused_gramvec": True,
        "gpu_segment_sum": "pieces",
        "chooser_dir": None,
        "host_dir": None,
        "available_memory": None,
        "datasets_dir": None,
    }
    _, set_ = _config_in_a_process(
        ILARGI_KERNELS="numpy",
        ILARGI_GPU_STACKED="0",
        ILARGI_GPU_FUSED_GRAMVEC="0",
        ILARGI_GPU_SEGMENT_SUM="csr",
        ILARGI_CHOOSER_DIR=str(tmp_path / "chooser"),
        ILARGI_HOST_DIR=str(tmp_path / "host"),
        ILARGI_AVAILABLE_MEMORY="1e9",
        ILARGI_DATASETS=str(tmp_path / "data"),
    )
    assert set_ == {
        "kernels": "numpy",
        "gpu_stacked": False,
        "gpu_fused_gramvec": False,
        "gpu_segment_sum": "csr",
        "chooser_dir": str(tmp_path / "chooser"),
        "host_dir": str(tmp_path / "host"),
        "available_memory": 10**9,
        "datasets_dir": str(tmp_path / "data"),
    }


def test_a_bad_environment_variable_names_itself():
    code, message = _config_in_a_process(ILARGI_KERNELS="fast")
    assert code and "ILARGI_KERNELS" in message and "'auto', 'compiled', 'numpy'" in message
    code, message = _config_in_a_process(ILARGI_AVAILABLE_MEMORY="lots")
    assert code and "ILARGI_AVAILABLE_MEMORY" in message


def test_set_and_get(tmp_path):
    before = get_config()
    set_config(kernels="numpy", available_memory=12345.0, chooser_dir=str(tmp_path))
    after = get_config()
    assert after["kernels"] == "numpy" and after["available_memory"] == 12345
    assert after["chooser_dir"] == tmp_path and isinstance(after["chooser_dir"], Path)
    untouched = set(KEYS) - {"kernels", "available_memory", "chooser_dir"}
    assert {k: after[k] for k in untouched} == {k: before[k] for k in untouched}
    after["kernels"] = "compiled"  # a copy
    assert get_config()["kernels"] == "numpy"
    set_config()  # nothing given, nothing changes
    assert get_config()["kernels"] == "numpy"
    assert set(get_config()) == KEYS


def test_a_block_restores_the_settings_even_after_an_exception():
    before = get_config()
    with pytest.raises(RuntimeError, match="inside"):
        with config_context(kernels="numpy", gpu_stacked=False):
            assert get_config()["kernels"] == "numpy" and not get_config()["gpu_stacked"]
            set_config(available_memory=1)  # set inside a block: undone with it
            raise RuntimeError("inside")
    assert get_config() == before


def test_blocks_nest():
    outer = get_config()["kernels"]
    with config_context(kernels="numpy"):
        with config_context(kernels="compiled", available_memory=10):
            assert get_config()["kernels"] == "compiled" and get_config()["available_memory"] == 10
        assert get_config()["kernels"] == "numpy" and get_config()["available_memory"] is None
    assert get_config()["kernels"] == outer


def test_each_thread_has_its_own_settings():
    seen, ready, done = {}, threading.Event(), threading.Event()

    def other():
        seen["start"] = get_config()["kernels"]
        set_config(kernels="compiled", available_memory=7)
        ready.set()
        done.wait(10)
        seen["end"] = get_config()["kernels"]

    thread = threading.Thread(target=other)
    with config_context(kernels="numpy"):
        thread.start()
        ready.wait(10)
        assert get_config()["kernels"] == "numpy" and get_config()["available_memory"] is None
        done.set()
        thread.join(10)
    # a new thread starts from the defaults, not from this thread's block
    assert seen == {"start": _config._global_config["kernels"], "end": "compiled"}


@pytest.mark.parametrize(
    "settings, error, words",
    [
        ({"kernel": "numpy"}, TypeError, ["'kernel'", "available_memory", "kernels"]),
        ({"kernels": "fast"}, ValueError, ["kernels", "'auto', 'compiled', 'numpy'"]),
        ({"gpu_segment_sum": "sort"}, ValueError, ["gpu_segment_sum", "'pieces', 'atomic'"]),
        ({"gpu_stacked": 1}, TypeError, ["gpu_stacked", "True or False"]),
        ({"chooser_dir": 3}, TypeError, ["chooser_dir", "path"]),
        ({"available_memory": -1}, ValueError, ["available_memory", "bytes"]),
        ({"available_memory": "1 GB"}, ValueError, ["available_memory", "bytes"]),
        ({"available_memory": float("inf")}, ValueError, ["available_memory", "bytes"]),
        ({"available_memory": True}, ValueError, ["available_memory"]),
    ],
)
def test_unknown_keys_and_bad_values_are_refused(settings, error, words):
    before = get_config()
    with pytest.raises(error) as raised:
        set_config(**settings)
    assert all(word in str(raised.value) for word in words), str(raised.value)
    with pytest.raises(error):
        with config_context(**{"host_dir": "elsewhere", **settings}):
            pytest.fail("the block ran")
    assert get_config() == before  # nothing half-set


def test_the_public_names():
    assert {"get_config", "set_config", "config_context"} <= set(ilargi.__all__)
    assert ilargi.config_context is config_context


# Each setting as its reader sees it.


def test_kernels_pick_the_cpu_backend():
    with config_context(kernels="numpy"):
        assert backend_of(np.zeros(3)) is cpu
        assert ilargi.kernel_status().mode == "numpy"
    with cpu_kernels("numpy"):  # the older spelling, the same setting
        assert get_config()["kernels"] == "numpy" and backend_of(np.zeros(3)) is cpu
    with config_context(kernels="compiled"):
        from ilargi.backend import compiled

        expected = compiled if compiled.usable() else cpu
        assert backend_of(np.zeros(3)) is expected
    with pytest.raises(ValueError, match="kernels must be one of"):
        with cpu_kernels("fast"):
            pass


def test_a_held_block_pins_auto_to_the_kernels_running():
    with config_context(kernels="auto"):
        running = backend_of(np.zeros(3))
        with kernels_held():
            assert get_config()["kernels"] == ("numpy" if running is cpu else "compiled")
            assert backend_of(np.zeros(3)) is running
        assert get_config()["kernels"] == "auto"
    with config_context(kernels="numpy"), kernels_held():
        assert get_config()["kernels"] == "numpy"


def test_chooser_dir_is_where_cost_models_are_looked_up_first(tmp_path):
    from ilargi.chooser import cost_model

    for path in cost_model.shipped_folder().glob("chooser_cpu*"):
        if path.suffix in (".json", ".txt"):
            (tmp_path / path.name).write_bytes(path.read_bytes())
    try:
        with config_context(chooser_dir=tmp_path):
            assert cost_model.user_folder() == tmp_path
            cost_model.clear_cache()
            assert cost_model.load("cpu").folder == tmp_path
        with config_context(chooser_dir=tmp_path / "empty"):
            assert cost_model.load("cpu").folder == cost_model.shipped_folder()
        with config_context(chooser_dir=None):
            assert cost_model.user_folder() == Path.home() / ".cache" / "ilargi" / "chooser"
    finally:
        cost_model.clear_cache()


def test_host_dir_is_where_probes_are_cached(tmp_path):
    from ilargi.chooser import host

    with config_context(host_dir=tmp_path):
        assert host.host_folder() == tmp_path and host.cache_path(1).parent == tmp_path
    with config_context(host_dir=None):
        assert host.host_folder() == Path.home() / ".cache" / "ilargi" / "host"


def test_available_memory_overrides_the_measured_memory():
    from ilargi.chooser import memory

    with config_context(available_memory=None):
        measured = memory.available_bytes()
    with config_context(available_memory=1000):
        assert memory.available_bytes() == 1000 and memory.available_bytes("gpu") == 1000
        with pytest.raises(MemoryError, match="the 1000 B available"):
            memory.require(10**6, "a result")
    assert measured is None or measured > 1000


def test_gpu_flags_follow_the_settings():
    # ilargi.backend.gpu imports CuPy; its flags module alone does not
    spec = importlib.util.spec_from_file_location(
        "gpu_flags", REPO / "ilargi" / "backend" / "gpu" / "flags.py"
    )
    flags = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flags)
    with config_context(gpu_stacked=False, gpu_fused_gramvec=False, gpu_segment_sum="atomic"):
        assert (flags.stacked(), flags.fused_gramvec(), flags.segment_sum_method()) == (
            False,
            False,
            "atomic",
        )
    with config_context(gpu_stacked=True, gpu_fused_gramvec=True, gpu_segment_sum="csr"):
        assert (flags.stacked(), flags.fused_gramvec(), flags.segment_sum_method()) == (
            True,
            True,
            "csr",
        )


def test_datasets_dir_is_the_demos_data_folder(tmp_path):
    from ilargi.cli import shared_datasets

    with config_context(datasets_dir=tmp_path):
        assert shared_datasets() == tmp_path
    with config_context(datasets_dir=None):
        assert shared_datasets() == REPO.parent / "shared" / "datasets"


# The library's own threads run with the settings of the thread that called.


def test_with_config_carries_the_callers_settings_into_a_pool():
    with ThreadPoolExecutor(2) as pool:
        with config_context(kernels="numpy", available_memory=5):
            task = _config.with_config(lambda: (get_config(), backend_of(np.zeros(1))))
            plain = pool.submit(get_config).result()
        settings, kernels = pool.submit(task).result()
        after = pool.submit(get_config).result()
    assert settings["kernels"] == "numpy" and settings["available_memory"] == 5 and kernels is cpu
    assert plain["available_memory"] is None  # an unwrapped task: the pool thread's own
    assert after["available_memory"] is None  # restored after the task


def test_to_matrix_encodes_columns_in_threads_with_the_callers_settings(monkeypatch):
    """Table.to_matrix encodes its columns on a pool of threads: each runs with the settings of
    the thread that called, the CPU kernels included."""
    from ilargi.table import encode

    seen = []
    prepare = encode._Encoder.prepare

    def spy(self, spec, ordinal):
        seen.append((threading.current_thread(), get_config()["kernels"], backend_of(np.zeros(1))))
        return prepare(self, spec, ordinal)

    monkeypatch.setattr(encode._Encoder, "prepare", spy)
    frame = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "x"], "y": [0.0, 1.0, 0.0]})
    with config_context(kernels="numpy"):
        nm, y = ilargi.Table(frame, name="t").to_matrix(target="y")
    assert nm.shape == (3, 3) and len(seen) == 3
    assert all(thread is not threading.current_thread() for thread, _, _ in seen)
    assert all(kind == "numpy" and kernels is cpu for _, kind, kernels in seen)


def test_the_host_probe_threads_run_with_the_callers_settings(monkeypatch):
    from ilargi.chooser import host

    seen = []
    with ThreadPoolExecutor(2) as pool, config_context(available_memory=99):
        tasks = [lambda: seen.append(get_config()["available_memory"])] * 2
        host._in_threads(pool, tasks)()
    assert seen == [99, 99]
