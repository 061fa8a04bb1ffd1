"""Spawned ranks kept warm between launches (dpedu.runtime.warm_ranks): reused only when that is safe, fresh
for each launch, and never left running by accident."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from processes import gone_within

from dpedu import launch, leftover_processes
from dpedu.runtime import warm_ranks
from dpedu.runtime.failures import RankFailedError

pytestmark = pytest.mark.usefixtures("no_leftover_processes")  # tests/conftest.py: closes the warm ranks too


def pid_and_sum() -> tuple[int, float]:
    total = torch.ones(1)
    dist.all_reduce(total)
    return os.getpid(), total.item()


def spawned(fn=pid_and_sum, world_size=2, **kwargs):
    return launch(fn, world_size, start_method="spawn", **kwargs)


def pids(results) -> list[int]:
    return [pid for pid, _ in results]


def test_a_second_spawned_launch_runs_on_the_first_ones_ranks_with_a_fresh_process_group():
    first = spawned()
    second = spawned()
    assert pids(second) == pids(first) and [total for _, total in second] == [2.0, 2.0]
    assert warm_ranks.idle_pids() == set(pids(first))


def test_idle_warm_ranks_are_not_left_running_but_what_they_start_is(tmp_path):
    first = spawned()
    assert leftover_processes() == [] and warm_ranks.idle_pids() == set(pids(first))
    # the same check on a broken subject: a process an idle rank started is seen
    child = subprocess.Popen(["sleep", "60"])  # ours, standing in for a warm rank's child
    try:
        assert leftover_processes() == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_a_launch_with_more_ranks_adds_new_ones_and_a_smaller_one_reuses_some():
    two = pids(spawned())
    four = pids(spawned(world_size=4))
    assert set(two) <= set(four) and len(set(four)) == 4
    assert set(pids(spawned())) <= set(four)


def test_without_warm_ranks_every_spawned_launch_starts_new_processes(monkeypatch):
    monkeypatch.setenv("DPEDU_WARM_RANKS", "0")
    first = spawned()
    assert set(pids(spawned())).isdisjoint(pids(first)) and warm_ranks.idle_pids() == set()


def test_warm_ranks_serve_spawn_with_gloo_only(monkeypatch):
    assert warm_ranks.reused("spawn", "gloo")
    assert not warm_ranks.reused("fork", "gloo") and not warm_ranks.reused("forkserver", "gloo")
    assert not warm_ranks.reused("spawn", "nccl")  # a nccl rank holds a GPU's memory
    monkeypatch.setenv("DPEDU_WARM_RANKS", "0")
    assert not warm_ranks.reused("spawn", "gloo")


def observed() -> tuple:
    """What a launch's function could change in its process that a later one would see."""
    numpy_state = np.random.get_state()
    return (os.getcwd(), torch.get_rng_state().tolist(), random.getstate(), numpy_state[1].tolist(), numpy_state[2],
            torch.get_default_dtype(), torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled(),
            torch.get_float32_matmul_precision(), torch.get_num_threads(), os.environ.get("DPEDU_TEST_LEFT_BEHIND"))


def change_everything(directory: str) -> None:
    os.chdir(directory)
    torch.manual_seed(1)
    random.seed(1)
    np.random.seed(1)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("medium")
    torch.set_num_threads(2)
    os.environ["DPEDU_TEST_LEFT_BEHIND"] = "yes"


def observed_in_rank() -> tuple:
    return os.getpid(), observed()


def change_everything_in_rank(directory: str) -> int:
    change_everything(directory)
    return os.getpid()


def test_a_reused_rank_starts_each_launch_as_a_new_one_would(tmp_path):
    before = spawned(observed_in_rank)
    changed = spawned(change_everything_in_rank, args=(str(tmp_path),))
    after = spawned(observed_in_rank)
    assert pids(after) == pids(before) == changed  # reused each time
    assert [state for _, state in after] == [state for _, state in before]


def test_fresh_state_puts_back_what_a_launch_changed(tmp_path):
    """The same comparison as above, in this process: it fails when nothing is put back."""
    np.random.get_state()  # numpy imported before the state is taken, as in a rank that has used it
    fresh = warm_ranks._FreshState()
    before = observed()
    threads = torch.get_num_threads()
    try:
        change_everything(str(tmp_path))
        assert observed() != before  # the broken subject: every change is seen
        fresh.restore()
    finally:
        torch.set_num_threads(threads)  # the launch sets each rank's threads itself
        os.environ.pop("DPEDU_TEST_LEFT_BEHIND", None)  # and its whole environment
        fresh.restore()
    assert observed() == before


def leave_a_process_running(pidfile: str) -> int:
    child = subprocess.Popen(["sleep", "60"])
    Path(pidfile).write_text(str(child.pid))
    return os.getpid()


def leave_a_thread_running() -> int:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    return os.getpid()


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_rank_that_left_a_process_running_is_stopped_with_it_not_reused(tmp_path):
    spawned()
    ranks = spawned(leave_a_process_running, world_size=1, args=(str(tmp_path / "pid"),))
    assert gone_within(int((tmp_path / "pid").read_text())) and gone_within(ranks[0])
    assert ranks[0] not in warm_ranks.idle_pids()


def test_a_rank_that_left_a_thread_running_is_not_reused():
    ranks = spawned(leave_a_thread_running)
    assert warm_ranks.idle_pids() == set() and set(pids(spawned())).isdisjoint(ranks)


def fail_on_rank_1() -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank 1 fails")
    dist.barrier()


def test_after_a_failure_no_rank_of_that_launch_is_kept():
    first = pids(spawned())
    with pytest.raises(RankFailedError, match="rank 1 fails"):
        spawned(fail_on_rank_1, timeout=30)
    assert warm_ranks.idle_pids() == set() and all(gone_within(pid) for pid in first)
    assert set(pids(spawned())).isdisjoint(first)


def test_an_idle_rank_is_stopped_after_the_idle_limit_and_replaced(monkeypatch):
    monkeypatch.setattr(warm_ranks, "IDLE_LIMIT", 1.0)
    first = pids(spawned())
    assert warm_ranks.idle_pids() == set(first) and all(gone_within(pid, 10) for pid in first)
    assert warm_ranks.idle_pids() == set() and set(pids(spawned())).isdisjoint(first)


def test_a_rank_that_died_while_idle_is_reported_and_replaced():
    first = pids(spawned())
    os.kill(first[1], signal.SIGKILL)
    time.sleep(0.05)  # a killed process's pipe closes a moment after it shows as exited
    try:  # found dead when taken and replaced, or found dead when its work is sent and reported
        results = spawned()
    except RankFailedError as error:
        assert "without returning a result" in str(error)
        results = spawned()
    assert first[1] not in pids(results) and [total for _, total in results] == [2.0, 2.0]


KERNEL = textwrap.dedent("""
    import os, sys, time
    from dpedu import launch
    from dpedu.runtime import warm_ranks

    def pid():
        return os.getpid()

    print(*launch(pid, 2, start_method="spawn"), flush=True)
    if sys.argv[1] == "killed":
        time.sleep(600)
""")


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
@pytest.mark.parametrize("end", ["exits", "killed"])
def test_warm_ranks_end_with_the_kernel_whether_it_exits_or_is_killed(end):
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, end], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "DPEDU_QUIET": "1"})
    try:
        ranks = [int(pid) for pid in kernel.stdout.readline().split()]
        assert len(ranks) == 2
        if end == "killed":
            kernel.send_signal(signal.SIGKILL)
        kernel.wait(60)
        assert all(gone_within(pid, 10) for pid in ranks)
    finally:
        kernel.kill()
        kernel.wait()


LONE_CHECK = textwrap.dedent("""
    import os, subprocess
    from dpedu.runtime import warm_ranks

    class NoProc:  # as on macOS: no /proc, so pgrep is asked
        def __init__(self, *parts): pass
        def exists(self): return False

    os.setpgid(0, 0)  # as a rank does: the leader of its own process group
    warm_ranks.Path = NoProc
    alone = warm_ranks._nothing_left_running()
    child = subprocess.Popen(["sleep", "60"])
    print(alone, warm_ranks._nothing_left_running())
    child.kill()
""")


@pytest.mark.skipif(not Path("/usr/bin/pgrep").exists() and not Path("/bin/pgrep").exists(), reason="needs pgrep")
def test_without_proc_pgrep_tells_whether_the_rank_is_alone_in_its_group():
    run = subprocess.run([sys.executable, "-c", LONE_CHECK], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["True", "False"], run.stderr


def test_after_a_cell_changes_the_environment_the_next_launch_starts_new_ranks(monkeypatch):
    first = pids(spawned())
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")  # read once, as torch.distributed is imported
    second = pids(spawned())
    assert set(second).isdisjoint(first) and all(gone_within(pid) for pid in first)
    assert pids(spawned()) == second  # the same environment again: reused


def import_a_stateful_module() -> int:
    import torch.distributed.checkpoint  # noqa: F401 - caches save plans per process

    return os.getpid()


def set_debug_level() -> int:
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    return os.getpid()


@pytest.mark.parametrize("fn", [import_a_stateful_module, set_debug_level])
def test_a_rank_that_used_what_keeps_state_per_process_is_not_reused(fn):
    ranks = spawned(fn)
    assert warm_ranks.idle_pids() == set() and all(gone_within(pid) for pid in ranks)


def test_a_rank_that_used_only_collectives_is_reused():
    """The same checks on a launch that leaves nothing behind: they do not retire every rank."""
    ranks = pids(spawned())
    assert warm_ranks.idle_pids() == set(ranks)
