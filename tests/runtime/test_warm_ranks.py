"""Spawned ranks kept warm between launches (dpedu.runtime.warm_ranks): reused only when that is safe, fresh
for each launch, and never left running by accident."""

import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from processes import gone_within

from dpedu import launch, leftover_processes
from dpedu.runtime import warm_ranks
from dpedu.runtime.failures import RankFailedError

# tests/conftest.py: nothing left running after each test but idle ranks, which the next test may use
pytestmark = pytest.mark.usefixtures("no_leftover_processes_but_idle_ranks")


def pid_and_sum() -> tuple[int, float]:
    total = torch.ones(1)
    dist.all_reduce(total)
    return os.getpid(), total.item()


def spawned(fn=pid_and_sum, world_size=2, **kwargs):
    return launch(fn, world_size, start_method="spawn", **kwargs)


def pids(results) -> list[int]:
    return [pid for pid, _ in results]


@pytest.fixture
def two_idle_ranks() -> set[int]:
    """Two idle ranks, as a kernel holds after its first launch: those the test before left, where it left two
    (a new pair costs seconds: PyPI's CUDA build takes longer to import)."""
    if len(warm_ranks.idle_pids()) != 2:
        warm_ranks.close()
        spawned()
    return warm_ranks.idle_pids()


@pytest.fixture
def no_idle_ranks() -> None:
    warm_ranks.close()


def test_a_second_spawned_launch_runs_on_the_first_ones_ranks_with_a_fresh_process_group(no_idle_ranks):
    first = spawned()
    second = spawned()
    assert pids(second) == pids(first) and [total for _, total in second] == [2.0, 2.0]
    assert warm_ranks.idle_pids() == set(pids(first))


def test_idle_warm_ranks_are_not_left_running(two_idle_ranks):
    assert set(pids(spawned())) == two_idle_ranks
    assert leftover_processes() == [] and warm_ranks.idle_pids() == two_idle_ranks


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_what_an_idle_warm_rank_started_is_left_running(no_idle_ranks, monkeypatch):
    """A shell stands in for an idle rank, its sleep for a process the rank left behind."""
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"], start_new_session=True)
    try:
        monkeypatch.setattr(warm_ranks, "idle_pids", lambda: {shell.pid})
        deadline = time.monotonic() + 5
        while not (left := leftover_processes()) and time.monotonic() < deadline:
            time.sleep(0.02)  # until the shell has started its sleep
        assert len(left) == 1 and left[0] != shell.pid
    finally:
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait()


def test_a_launch_with_more_ranks_adds_new_ones_and_a_smaller_one_reuses_some(two_idle_ranks):
    two = pids(spawned())
    four = pids(spawned(world_size=4))
    assert set(two) <= set(four) and len(set(four)) == 4
    assert set(pids(spawned())) <= set(four)


def test_without_warm_ranks_every_spawned_launch_starts_new_processes(no_idle_ranks, monkeypatch):
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
    """What a launch's function could change in its process that a later one would see (the random generators
    apart: a new process seeds them afresh)."""
    import torch._dynamo

    return (os.getcwd(), torch.get_default_dtype(), torch.empty(1).device.type, torch.is_grad_enabled(),
            torch.is_anomaly_enabled(), torch.are_deterministic_algorithms_enabled(),
            torch.get_float32_matmul_precision(), torch.get_num_threads(), os.environ.get("DPEDU_TEST_LEFT_BEHIND"),
            str(torch.tensor([1 / 3])), len(warnings.filters), len(logging.root.handlers),
            signal.getsignal(signal.SIGTERM), torch._dynamo.config.optimize_ddp,
            sum(torch._dynamo.utils.counters["stats"].values()))


def change_everything(directory: str) -> None:
    import torch._dynamo

    os.chdir(directory)
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    torch.autograd.set_detect_anomaly(True)
    torch.use_deterministic_algorithms(True)
    torch.set_float32_matmul_precision("medium")
    torch.set_num_threads(3)
    os.environ["DPEDU_TEST_LEFT_BEHIND"] = "yes"
    torch.set_printoptions(precision=2)
    warnings.simplefilter("ignore")
    logging.root.addHandler(logging.NullHandler())
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch._dynamo.config.optimize_ddp = False
    torch.compile(torch.sin, backend="eager")(torch.ones(1))  # counted in dynamo's stats
    torch.set_default_device("meta")


def random_draws() -> tuple:
    return torch.rand(1).item(), random.random(), np.random.rand()


def observed_in_rank() -> tuple:
    return os.getpid(), observed()


def change_everything_in_rank(directory: str) -> int:
    change_everything(directory)
    return os.getpid()


def test_a_reused_rank_starts_each_launch_as_a_new_one_would(two_idle_ranks, tmp_path):
    before = spawned(observed_in_rank)
    changed = spawned(change_everything_in_rank, args=(str(tmp_path),))
    after = spawned(observed_in_rank)
    assert pids(after) == pids(before) == changed  # reused each time
    assert [state for _, state in after] == [state for _, state in before]


def test_a_reused_rank_draws_new_random_numbers_at_each_launch_as_a_new_one_does(two_idle_ranks):
    first, second = spawned(random_draws), spawned(random_draws)
    assert all(a != b for one, other in zip(first, second, strict=True) for a, b in zip(one, other, strict=True))


def cwd_and_path() -> tuple[str, str]:
    return os.getcwd(), sys.path[0]


def test_a_reused_rank_works_in_the_kernels_directory_and_path_of_the_moment(two_idle_ranks, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert spawned(cwd_and_path) == [(str(tmp_path), str(tmp_path))] * 2


def test_a_source_file_changed_since_a_rank_imported_it_gets_new_ranks(tmp_path, monkeypatch):
    module = tmp_path / "learners_module.py"
    module.write_text("def answer():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import learners_module

    first = spawned(learners_module.answer)
    assert spawned(learners_module.answer) == first  # unchanged: the same ranks, the module kept
    module.write_text("def answer():\n    return 2\n")
    os.utime(module, ns=(time.time_ns() + 10**9,) * 2)  # a later time than the first write's, at any clock
    assert spawned(learners_module.answer) == [2, 2]


def test_fresh_state_puts_back_what_a_launch_changed(tmp_path, monkeypatch):
    """The same comparison as above, in this process, where each change is first shown to be seen."""
    monkeypatch.chdir(os.getcwd())  # the launch sets the directory, threads and environment itself
    monkeypatch.delenv("DPEDU_TEST_LEFT_BEHIND", raising=False)
    threads = torch.get_num_threads()
    np.random.get_state()  # numpy imported before the state is taken, as in a rank that has used it
    fresh = warm_ranks._FreshState()
    before = observed()
    try:
        change_everything(str(tmp_path))
        changed = observed()
    finally:
        fresh.restore()
        torch.set_num_threads(threads)
        os.chdir(before[0])
        os.environ.pop("DPEDU_TEST_LEFT_BEHIND", None)
    assert [i for i, (old, new) in enumerate(zip(before, changed, strict=True)) if old == new] == []  # all seen
    assert observed() == before


def leave_a_process_running(pidfile: str) -> int:
    child = subprocess.Popen(["sleep", "60"])
    Path(pidfile).write_text(str(child.pid))
    return os.getpid()


def leave_a_thread_running() -> int:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
    return os.getpid()


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_a_rank_that_left_a_process_running_is_stopped_with_it_not_reused(two_idle_ranks, tmp_path):
    ranks = spawned(leave_a_process_running, world_size=1, args=(str(tmp_path / "pid"),))
    assert gone_within(int((tmp_path / "pid").read_text())) and gone_within(ranks[0])
    assert ranks[0] not in warm_ranks.idle_pids()


def test_a_rank_that_left_a_thread_running_is_not_reused(two_idle_ranks):
    ranks = spawned(leave_a_thread_running)
    assert warm_ranks.idle_pids() == set() and set(pids(spawned())).isdisjoint(ranks)


def fail_on_rank_1() -> None:
    if dist.get_rank() == 1:
        raise ValueError("rank 1 fails")
    dist.barrier()


def test_after_a_failure_no_rank_of_that_launch_is_kept(two_idle_ranks):
    first = pids(spawned())
    with pytest.raises(RankFailedError, match="rank 1 fails"):
        spawned(fail_on_rank_1, timeout=30)
    assert warm_ranks.idle_pids() == set() and all(gone_within(pid) for pid in first)
    assert set(pids(spawned())).isdisjoint(first)


def test_an_idle_rank_is_stopped_after_the_idle_limit_and_replaced(two_idle_ranks, monkeypatch):
    monkeypatch.setattr(warm_ranks, "IDLE_LIMIT", 1.0)
    first = pids(spawned())
    assert warm_ranks.idle_pids() == set(first) and all(gone_within(pid, 10) for pid in first)
    assert warm_ranks.idle_pids() == set() and set(pids(spawned())).isdisjoint(first)


def test_a_rank_that_died_while_idle_is_reported_and_replaced(two_idle_ranks):
    first = pids(spawned())
    os.kill(first[1], signal.SIGKILL)
    time.sleep(0.05)  # a killed process's pipe closes a moment after it shows as exited
    results = spawned()  # found dead when taken, or when it reads no work: started again either way
    assert first[1] not in pids(results) and [total for _, total in results] == [2.0, 2.0]


def test_a_rank_that_dies_as_the_launch_takes_it_starts_the_launch_again(two_idle_ranks, monkeypatch):
    """The race the test above may miss: the rank passes the check at take() and dies before it reads its work."""
    first = pids(spawned())
    monkeypatch.setattr(warm_ranks.WarmRank, "still_fresh", lambda self, environment: True)
    os.kill(first[1], signal.SIGKILL)
    assert [total for _, total in spawned()] == [2.0, 2.0]


def launch_from_a_thread() -> list:
    results = []
    thread = threading.Thread(target=lambda: results.append(spawned()))
    thread.start()
    thread.join()
    return results[0]


def test_ranks_a_thread_launched_are_not_kept_since_they_die_with_the_thread(no_idle_ranks):
    assert [total for _, total in launch_from_a_thread()] == [2.0, 2.0]
    assert warm_ranks.idle_pids() == set() and [total for _, total in spawned()] == [2.0, 2.0]


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
        try:
            kernel.wait(20)
        except subprocess.TimeoutExpired:
            pytest.fail("the kernel did not exit: multiprocessing waits at exit for ranks nobody stopped")
        assert all(gone_within(pid, 10) for pid in ranks)
    finally:
        kernel.kill()
        kernel.wait()


LONE_CHECK = textwrap.dedent("""
    import os, subprocess
    from dpedu.runtime import warm_ranks

    class NoProc:  # as on macOS: no /proc, so ps is asked
        def __init__(self, *parts): pass
        def exists(self): return False

    os.setpgid(0, 0)  # as a rank does: the leader of its own process group
    warm_ranks.Path = NoProc
    alone = warm_ranks._nothing_left_running()
    child = subprocess.Popen(["sleep", "60"])
    print(alone, warm_ranks._nothing_left_running())
    child.kill()
""")


def test_without_proc_ps_tells_whether_the_rank_is_alone_in_its_group():
    run = subprocess.run([sys.executable, "-c", LONE_CHECK], capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["True", "False"], run.stderr


def test_after_a_cell_changes_the_environment_the_next_launch_starts_new_ranks(two_idle_ranks, monkeypatch):
    first = pids(spawned())
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")  # read once, as torch.distributed is imported
    second = pids(spawned())
    assert set(second).isdisjoint(first) and all(gone_within(pid) for pid in first)
    assert pids(spawned()) == second  # the same environment again: reused


def import_a_stateful_module() -> int:
    import torch.distributed.checkpoint  # noqa: F401 - caches save plans per process

    return os.getpid()


def set_interop_threads() -> int:
    torch.set_num_interop_threads(1)  # torch takes it once per process
    return os.getpid()


def set_debug_level() -> int:
    dist.set_debug_level(dist.DebugLevel.DETAIL)
    return os.getpid()


@pytest.mark.parametrize("fn", [import_a_stateful_module, set_debug_level, set_interop_threads])
def test_a_rank_that_used_what_keeps_state_per_process_is_not_reused(two_idle_ranks, fn):
    ranks = spawned(fn)
    assert warm_ranks.idle_pids() == set() and all(gone_within(pid) for pid in ranks)


def test_a_rank_that_used_only_collectives_is_reused(two_idle_ranks):
    """The same checks on a launch that leaves nothing behind: they do not retire every rank."""
    ranks = pids(spawned())
    assert warm_ranks.idle_pids() == set(ranks)


def dtensor_coordinate() -> tuple[int, int, int]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    doubled = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)]) * 2  # through DTensor's sharding propagation
    return os.getpid(), dist.get_rank(), doubled.device_mesh.get_coordinate()[0]


def test_a_rank_that_built_a_device_mesh_is_not_reused_so_a_dtensor_keeps_its_own_rank(no_idle_ranks):
    """torch caches DTensor results under a key whose mesh compares equal whatever the rank: reused ranks that had
    built a mesh came back, after launches of other sizes had reordered them, with the results of the rank they
    were before (rank 0 holding rank 1's coordinate, and so shard offsets: lesson 11b's checkpoint loaded with
    halves swapped). Not reusing them is what keeps this equal."""
    first = spawned(dtensor_coordinate)
    assert warm_ranks.idle_pids() == set() and all(gone_within(pid) for pid, _, _ in first)
    with warm_ranks._lock:  # what launches of other sizes do to idle ranks (4, then 2 and 3 reordered lesson 11b's)
        warm_ranks._idle.reverse()
    again = spawned(dtensor_coordinate)
    assert [(rank, coordinate) for _, rank, coordinate in again] == [(0, 0), (1, 1)]


def ddp_step() -> int:
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
    model(torch.ones(1, 2)).sum().backward()
    return os.getpid()


def test_a_rank_that_took_a_ddp_step_is_reused(two_idle_ranks):
    """DDP builds no device mesh: the lessons' DDP launches keep their warm ranks."""
    assert warm_ranks.idle_pids() == set(spawned(ddp_step))


def test_a_rank_that_set_its_interop_threads_is_not_reused_so_the_next_launch_may_set_them_too():
    first = spawned(set_interop_threads)
    assert set(spawned(set_interop_threads)).isdisjoint(first)
