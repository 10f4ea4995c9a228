"""Thread control (ilargi.backend.threads): one number for Numba and BLAS, validated, restorable,
per Python thread for threads() blocks."""

import threading

import numba
import pytest
from threadpoolctl import threadpool_info

from ilargi.backend import threads


def blas_threads():
    return {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


@pytest.fixture(autouse=True)
def default_afterwards():
    yield
    threads.set_num_threads(None)


def test_default_is_every_usable_core():
    threads.set_num_threads(None)
    expected = min(len(__import__("os").sched_getaffinity(0)), numba.config.NUMBA_NUM_THREADS)
    assert threads.get_num_threads() == threads.default_num_threads() == expected
    assert threads.max_num_threads() == numba.config.NUMBA_NUM_THREADS


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None.__class__, True, 10**6])
def test_invalid_counts_raise_value_error(bad):
    with pytest.raises(ValueError, match="number of threads"):
        threads.set_num_threads(bad)
    with pytest.raises(ValueError, match="number of threads"):
        with threads.threads(bad):
            pass


def test_set_covers_numba_and_blas():
    threads.set_num_threads(1)
    assert threads.get_num_threads() == 1
    assert numba.get_num_threads() == 1
    assert blas_threads() <= {1}
    threads.set_num_threads(None)
    assert threads.get_num_threads() == threads.default_num_threads()


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_context_restores_nested():
    before_blas = blas_threads()
    with threads.threads(1):
        assert threads.get_num_threads() == 1 and blas_threads() <= {1}
        with threads.threads(2):
            assert threads.get_num_threads() == 2 and numba.get_num_threads() == 2
        assert threads.get_num_threads() == 1 and numba.get_num_threads() == 1
    assert threads.get_num_threads() == threads.default_num_threads()
    assert blas_threads() == before_blas


def test_context_restores_after_an_error():
    threads.set_num_threads(1)
    with pytest.raises(RuntimeError):
        with threads.threads(threads.max_num_threads()):
            raise RuntimeError
    assert threads.get_num_threads() == 1


def test_apply_sets_numba_in_other_python_threads():
    """Numba's count is per Python thread: apply() (called by every kernel) brings a new thread
    to the process-wide number."""
    threads.set_num_threads(1)
    seen = []

    def worker():
        seen.append(threads.apply())
        seen.append(numba.get_num_threads())

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [1, 1]


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_separate_blas_count():
    before_blas = blas_threads()
    with threads.threads(2, blas=1):
        assert threads.get_num_threads() == 2 and numba.get_num_threads() == 2
        assert blas_threads() <= {1}
        with threads.threads(1):
            assert blas_threads() <= {1} and numba.get_num_threads() == 1
        assert blas_threads() <= {1} and numba.get_num_threads() == 2
    assert blas_threads() == before_blas
    with pytest.raises(ValueError):
        threads.set_num_threads(1, blas=0)


def test_blas_limits_reach_every_loaded_blas_without_rescanning(monkeypatch):
    import threadpoolctl

    with threads.threads(2, blas=1):
        pass  # the controller of the loaded BLAS libraries is built here, once
    scans = []
    original = threadpoolctl.ThreadpoolController.__init__
    monkeypatch.setattr(
        threadpoolctl.ThreadpoolController,
        "__init__",
        lambda self, *a, **k: scans.append(1) or original(self, *a, **k),
    )
    with threads.threads(2, blas=1):
        assert not scans  # no new scan of the process's libraries
        blas = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    assert blas and set(blas) == {1}  # every loaded BLAS (NumPy and SciPy each ship one)


def test_blas_held_nests_in_the_main_thread_only():
    """blas_held: BLAS at one thread inside the blocks (nested), the kernels' count unchanged, BLAS
    back to its setting after the outer one; another Python thread leaves BLAS alone (OpenBLAS
    ignores a count raised from there, so its hold could not be undone)."""
    import threading

    if threads.max_num_threads() < 2:
        pytest.skip("needs Numba to allow 2 threads")
    with threads.threads(2):
        before = blas_threads()
        with threads.blas_held() as single:
            assert single and blas_threads() <= {1} and threads.get_num_threads() == 2
            with threads.blas_held():
                assert blas_threads() <= {1}
            assert blas_threads() <= {1}
        assert blas_threads() == before
        seen = []

        def other():
            with threads.blas_held() as single:
                seen.append((single, blas_threads()))

        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
        assert seen == [(False, before)] and blas_threads() == before
    with threads.threads(1):  # nothing to hold at one thread
        with threads.blas_held() as single:
            assert single and blas_threads() <= {1}


def test_blas_held_on_demand_holds_from_the_first_need_to_its_end():
    """blas_held_on_demand: BLAS untouched until a blas_held block inside it or a launch at
    several threads (apply), then at one thread until the outer block closes; nested on-demand
    blocks (an operator calling another) take nothing; nothing at one thread."""
    if threads.max_num_threads() < 2:
        pytest.skip("needs Numba to allow 2 threads")
    with threads.threads(2):
        before = blas_threads()
        with threads.blas_held_on_demand() as nothing:
            assert nothing is None and blas_threads() == before
            with threads.blas_held_on_demand():
                assert blas_threads() == before
            assert blas_threads() == before
            with threads.blas_held() as single:
                assert single and blas_threads() <= {1}
            assert blas_threads() <= {1}  # held to the end of the outer block
        assert blas_threads() == before and not threads._held and threads._hold is None
        with threads.blas_held_on_demand():
            assert threads.apply() == 2 and blas_threads() <= {1}
        assert blas_threads() == before
        with threads.threads(1), threads.blas_held_on_demand():
            assert threads.apply() == 1 and not threads._held  # one thread: nothing to hold
        assert not threads._held and threads._hold is None


def _in_thread(steps):
    """A started Python thread that runs ``steps`` one at a time, each when told to (``go(i)``)."""
    events = [threading.Event() for _ in steps]
    done = [threading.Event() for _ in steps]
    errors = []

    def run():
        try:
            for step, event, finished in zip(steps, events, done):
                event.wait(10)
                step()
                finished.set()
        except BaseException as error:  # noqa: BLE001 -- reported by the test's thread
            errors.append(error)
            for finished in done:
                finished.set()

    worker = threading.Thread(target=run)
    worker.start()

    def go(i):
        events[i].set()
        assert done[i].wait(10), "the thread did not finish its step"
        assert not errors, errors

    return worker, go


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_blocks_in_two_threads_interleaved_restore_each_threads_count():
    """Thread A opens threads(1), B opens threads(2), A closes first, then B: each thread sees its
    own count all along, and both leave the process's setting (and BLAS) as they found it."""
    threads.set_num_threads(None)
    before_blas = blas_threads()
    seen = {}

    def block(name, k):
        context = threads.threads(k)
        return (
            lambda: context.__enter__(),
            lambda: seen.setdefault(name, []).append(
                (threads.get_num_threads(), numba.get_num_threads())
            ),
            lambda: context.__exit__(None, None, None),
            lambda: seen.setdefault(name, []).append(
                (threads.get_num_threads(), numba.get_num_threads())
            ),
        )

    enter_a, look_a, exit_a, after_a = block("a", 1)
    enter_b, look_b, exit_b, after_b = block("b", 2)
    a, go_a = _in_thread([enter_a, look_a, exit_a, after_a])
    b, go_b = _in_thread([enter_b, look_b, exit_b, after_b])
    go_a(0)
    go_b(0)
    assert blas_threads() <= {2}  # BLAS (one per process) follows the newest open block
    go_a(1)  # A still at 1 while B's block is open
    go_a(2)  # A closes first: BLAS follows B's block, still open
    assert blas_threads() <= {2}
    go_a(3)
    go_b(1)  # B still at 2 after A closed
    go_b(2)
    go_b(3)
    a.join()
    b.join()
    default = threads.default_num_threads()
    assert seen == {"a": [(1, 1), (default, default)], "b": [(2, 2), (default, default)]}
    assert threads.get_num_threads() == default and blas_threads() == before_blas


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_set_inside_a_block_lasts_until_the_block_closes_and_threads_keep_their_own():
    threads.set_num_threads(2)
    with threads.threads(1):
        threads.set_num_threads(2, blas=1)  # the block's setting: undone when it closes
        assert threads.get_num_threads() == 2 and blas_threads() <= {1}
        seen = []
        worker = threading.Thread(target=lambda: seen.append(threads.get_num_threads()))
        worker.start()
        worker.join()
        assert seen == [2]  # another thread uses the process-wide setting
    assert threads.get_num_threads() == 2 and blas_threads() <= {2}


@pytest.mark.skipif(threads.max_num_threads() < 2, reason="needs 2 Numba threads")
def test_many_threads_opening_blocks_at_random_leave_the_setting_unchanged():
    """Stress: 8 threads each open and close nested blocks 200 times; every thread always sees its
    innermost block's count, and afterwards the process-wide setting is back."""
    import random

    threads.set_num_threads(1)
    before_blas = blas_threads()
    errors = []

    def work(seed):
        rng = random.Random(seed)
        for _ in range(200):
            k, inner = rng.choice([1, 2]), rng.choice([1, 2])
            with threads.threads(k):
                if threads.get_num_threads() != k:
                    errors.append((seed, k, threads.get_num_threads()))
                with threads.threads(inner):
                    if threads.get_num_threads() != inner:
                        errors.append((seed, inner, threads.get_num_threads()))
                if threads.get_num_threads() != k:
                    errors.append((seed, k, threads.get_num_threads()))

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors
    assert threads.get_num_threads() == 1 and blas_threads() == before_blas


SPIN = """
import os
import ilargi.backend
print(os.environ.get("GOMP_SPINCOUNT"))
"""


@pytest.mark.parametrize(
    "environment, expected",
    [({}, "30000"), ({"GOMP_SPINCOUNT": "5"}, "5"), ({"OMP_WAIT_POLICY": "ACTIVE"}, "None")],
)
def test_loading_the_backend_shortens_openmps_spin_unless_the_environment_sets_it(
    environment, expected
):
    """libgomp's idle workers spin SPIN_COUNT rounds, set before libgomp loads; a spin count or
    a wait policy of the environment is left as it is."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run(
        [sys.executable, "-c", SPIN],
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [expected]
    assert threads.SPIN_COUNT == 30_000
