"""dpedu.launch: results, output, failures, timeouts, interrupts, clean-up, bad input, fallback."""

import multiprocessing as mp
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from processes import alive, children_of

import dpedu
from dpedu import LaunchTimeoutError, RankFailedError, launch
from dpedu.launcher import choose_start_method


@pytest.fixture(autouse=True)
def no_leftover_processes():
    yield
    assert mp.active_children() == []
    if Path("/proc").exists():
        assert children_of(os.getpid()) == []


def identify():
    return dist.get_rank(), dist.get_world_size(), os.environ["RANK"], os.environ["WORLD_SIZE"], \
        os.environ["LOCAL_RANK"], os.environ["MASTER_ADDR"], torch.get_num_threads()


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_results_are_indexed_by_rank_with_torchrun_variables(world_size):
    results = launch(identify, world_size)
    assert [r[:2] for r in results] == [(rank, world_size) for rank in range(world_size)]
    for rank, r in enumerate(results):
        assert r[2:] == (str(rank), str(world_size), str(rank), "127.0.0.1", 1)


def test_threads_per_rank_is_applied():
    assert [r[-1] for r in launch(identify, 2, threads_per_rank=2)] == [2, 2]


def all_reduce_rank_plus_one():
    t = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(t)
    return t.item()


def test_ranks_can_all_reduce():
    assert launch(all_reduce_rank_plus_one, 4) == [10.0] * 4


def big_tensor(n):
    return torch.arange(n, dtype=torch.float64) * (dist.get_rank() + 1)


def test_tensors_come_back_intact():
    n = 1_000_003
    results = launch(big_tensor, 2, args=(n,))
    for rank, t in enumerate(results):
        assert t.shape == (n,) and torch.equal(t, torch.arange(n, dtype=torch.float64) * (rank + 1))
        assert not t.is_shared()  # a copy, valid after the rank that made it is gone


def print_late_from_low_ranks():
    time.sleep(0.3 * (dist.get_world_size() - 1 - dist.get_rank()))
    print(f"hello from {dist.get_rank()}")
    print("second line")


def test_output_is_labelled_and_in_rank_order(capsys):
    launch(print_late_from_low_ranks, 3)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[rank {r}] {text}" for r in range(3) for text in (f"hello from {r}", "second line")]


def test_stream_shows_output_as_it_arrives(capsys):
    launch(print_late_from_low_ranks, 3, stream=True)
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "hello" in line] == [f"[rank {r}] hello from {r}" for r in (2, 1, 0)]


def rank1_raises_while_rank0_waits():
    if dist.get_rank() == 1:
        raise ValueError("bad shard size")
    dist.barrier()  # never completes: rank 1 is gone


def test_exception_names_the_rank_with_its_traceback_and_stops_the_others():
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        launch(rank1_raises_while_rank0_waits, 2, timeout=30)
    assert time.monotonic() - start < 10
    assert info.value.rank == 1
    assert "ValueError: bad shard size" in str(info.value)
    assert "rank1_raises_while_rank0_waits" in info.value.remote_traceback


def mismatched_collectives():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    else:
        dist.recv(torch.ones(1), src=0)  # waits for a send that rank 0 never makes


def test_a_rank_stuck_in_a_collective_is_stopped_after_timeout():
    start = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        launch(mismatched_collectives, 2, timeout=2)
    assert 2 <= time.monotonic() - start < 8
    assert info.value.unfinished == [0, 1]
    assert "[0, 1]" in str(info.value)


def skip_the_collective_on_rank1():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))


def test_a_peer_that_left_makes_the_collective_fail_fast_not_hang():
    start = time.monotonic()
    with pytest.raises(RankFailedError, match="(closed|reset) by peer") as info:
        launch(skip_the_collective_on_rank1, 2, timeout=30)
    assert info.value.rank == 0 and time.monotonic() - start < 10


def exit_without_result(code):
    if dist.get_rank() == 1:
        os._exit(code)
    dist.barrier()


def kill_itself():
    if dist.get_rank() == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_a_rank_that_dies_silently_is_reported():
    with pytest.raises(RankFailedError, match="exit code 3") as info:
        launch(exit_without_result, 2, args=(3,), timeout=30)
    assert info.value.rank == 1
    with pytest.raises(RankFailedError, match="SIGKILL"):
        launch(kill_itself, 2, timeout=30)


def start_grandchild_then_fail(pidfile):
    child = subprocess.Popen(["sleep", "60"])
    Path(pidfile).write_text(str(child.pid))
    raise RuntimeError("failing with a child process running")


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_processes_started_by_a_rank_are_stopped_too(tmp_path):
    pidfile = tmp_path / "pid"
    with pytest.raises(RankFailedError):
        launch(start_grandchild_then_fail, 1, args=(str(pidfile),))
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)


def sleep_forever():
    time.sleep(600)


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal or a Jupyter kernel.

    A shell ignores SIGINT in its background jobs, and Python keeps it ignored, so a test run
    started that way (as CI may be) would otherwise never see the interrupt.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_keyboard_interrupt_stops_every_rank_and_the_next_call_works(ctrl_c_raises):
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        launch(sleep_forever, 2, timeout=120)
    assert time.monotonic() - start < 6
    assert mp.active_children() == []
    assert launch(all_reduce_rank_plus_one, 2) == [3.0, 3.0]


def unpicklable_result():
    return threading.Lock()


def test_unpicklable_result_is_a_clear_error():
    with pytest.raises(RankFailedError, match="cannot be sent back"):
        launch(unpicklable_result, 1)


@pytest.mark.parametrize(
    ("kwargs", "error", "names"),
    [
        ({"world_size": 0}, ValueError, "world_size"),
        ({"world_size": -2}, ValueError, "world_size"),
        ({"world_size": 2.0}, ValueError, "world_size"),
        ({"world_size": True}, ValueError, "world_size"),
        ({"fn": 42}, TypeError, "fn must be callable"),
        ({"args": 5}, TypeError, "args"),
        ({"args": (threading.Lock(),)}, TypeError, "cannot be sent"),
        ({"timeout": 0}, ValueError, "timeout"),
        ({"timeout": float("nan")}, ValueError, "timeout"),
        ({"backend": "mpi"}, ValueError, "backend"),
        ({"threads_per_rank": 0}, ValueError, "threads_per_rank"),
        ({"start_method": "teleport"}, ValueError, "start_method"),
    ],
)
def test_bad_input_fails_fast_before_any_process_starts(kwargs, error, names):
    call = {"fn": identify, "world_size": 2} | kwargs
    start = time.monotonic()
    with pytest.raises(error, match=names):
        launch(call.pop("fn"), call.pop("world_size"), **call)
    assert time.monotonic() - start < 1
    assert mp.active_children() == []


def test_fork_is_chosen_only_where_it_is_safe(monkeypatch):
    monkeypatch.setattr(mp, "get_start_method", lambda allow_none=False: None)
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert choose_start_method() == ("fork", None)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert choose_start_method()[0] == "spawn" and "CUDA" in choose_start_method()[1]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr("sys.platform", "darwin")
    assert choose_start_method()[0] == "spawn"
    assert choose_start_method("forkserver") == ("forkserver", "the start method 'forkserver' was requested")


NOTEBOOK_CELL = """
import torch.distributed as dist
SCALE = 10
def defined_in_a_cell():
    print("spawned rank", dist.get_rank())
    return dist.get_rank() * SCALE
"""


def test_spawn_fallback_runs_functions_defined_in_a_notebook_cell(capsys):
    cell = {"__name__": "__main__"}  # like a Jupyter kernel: not importable by the children
    exec(NOTEBOOK_CELL, cell)
    dpedu.launcher._said_why.clear()
    assert launch(cell["defined_in_a_cell"], 2, start_method="spawn", timeout=60) == [0, 10]
    assert launch(cell["defined_in_a_cell"], 2, start_method="spawn", timeout=60) == [0, 10]
    captured = capsys.readouterr()
    assert captured.err.count("starting ranks with 'spawn'") == 1  # said once, not every call
    assert "[rank 1] spawned rank 1" in captured.out


def test_an_interrupt_while_ranks_start_is_delivered_once_all_are_recorded(monkeypatch, ctrl_c_raises):
    real_start = mp.process.BaseProcess.start

    def start_then_interrupt(process):
        real_start(process)
        os.kill(os.getpid(), signal.SIGINT)  # arrives between starting a rank and recording it

    monkeypatch.setattr(mp.process.BaseProcess, "start", start_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        launch(sleep_forever, 2, timeout=120)
    monkeypatch.undo()
    assert mp.active_children() == []


def test_an_ignored_ctrl_c_stays_ignored(monkeypatch):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    real_start = mp.process.BaseProcess.start

    def start_then_interrupt(process):
        real_start(process)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(mp.process.BaseProcess, "start", start_then_interrupt)
    try:
        assert launch(all_reduce_rank_plus_one, 2) == [3.0, 3.0]
    finally:
        signal.signal(signal.SIGINT, previous)
