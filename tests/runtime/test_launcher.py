"""dpedu.launch: results, output, failures, timeouts, interrupts, clean-up, bad input, start methods.

Time bounds here are hang checks with wide margins ("returns within its timeout plus a few seconds"),
not speed measurements: those live in benchmarks/.
"""

import multiprocessing as mp
import os
import pickle
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from processes import gone_within, state
from tf32 import lesson_02_batch, lesson_02_gap, lesson_02_model

import dpedu
from dpedu import LaunchTimeoutError, RankFailedError, free_port, launch
from dpedu.runtime.launcher import _default_backend

# Every start method launch may use on Linux; the slower ones run the tests that matter for them.
METHODS = ["fork", "forkserver", "spawn"]


pytestmark = pytest.mark.usefixtures("no_leftover_processes")  # tests/conftest.py


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


def when_connected_and_begun():
    return float(os.environ["CONNECTED_AT"]), time.time()


def test_no_rank_begins_its_work_before_every_rank_has_connected(monkeypatch):
    # A rank whose work returned at once tore its connections down while another was still connecting: "Connection
    # closed by peer" in gloo's full mesh (CI, a function with no collective call). Here rank 1 connects 1 s later
    # (forked ranks keep this wrapper); rank 0 must not begin before it has.
    connect = dist.init_process_group

    def rank_1_late(*args, **kwargs):
        connect(*args, **kwargs)
        if kwargs["rank"] == 1:
            time.sleep(1)
        os.environ["CONNECTED_AT"] = repr(time.time())

    monkeypatch.setattr(dist, "init_process_group", rank_1_late)
    (_, rank_0_began), (rank_1_connected, _) = launch(when_connected_and_begun, 2, start_method="fork")
    assert rank_0_began >= rank_1_connected


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


@pytest.mark.parametrize("method", METHODS)
def test_exception_names_the_rank_with_its_traceback_and_stops_the_others(method):
    start = time.monotonic()
    with pytest.raises(RankFailedError, match="rank 1 failed") as info:
        launch(rank1_raises_while_rank0_waits, 2, timeout=60, start_method=method)
    assert time.monotonic() - start < 30  # not the timeout: the failure stops rank 0 at once
    assert info.value.rank == 1
    assert "ValueError: bad shard size" in str(info.value)
    assert "rank1_raises_while_rank0_waits" in info.value.remote_traceback


def mismatched_collectives():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    else:
        dist.recv(torch.ones(1), src=0)  # waits for a send that rank 0 never makes


@pytest.mark.parametrize("method", METHODS)
def test_a_rank_stuck_in_a_collective_is_stopped_after_timeout_and_told_where(method):
    # The timeout counts from the moment every rank has started: a short one holds even for ranks that
    # import torch themselves (spawn) or start from a cold forkserver, which takes seconds.
    timeout = 1
    start = time.monotonic()
    with pytest.raises(LaunchTimeoutError, match=rf"rank\(s\) \[0, 1\] did not finish within timeout={timeout} s"
                       ) as info:
        launch(mismatched_collectives, 2, timeout=timeout, start_method=method)
    assert timeout <= time.monotonic() - start < timeout + 30  # start-up (spawn: seconds) comes on top
    assert info.value.unfinished == [0, 1] and info.value.finished == []
    assert info.value.where[0].startswith("in all_reduce, called at mismatched_collectives line ")
    assert info.value.where[1].startswith("in recv, called at mismatched_collectives line ")


def test_ranks_that_do_not_start_in_time_are_stopped_with_their_own_error(monkeypatch):
    # Spawned ranks import torch for seconds: far past a start-up limit shortened to 0.3 s.
    monkeypatch.setattr(dpedu.runtime.launcher, "START_UP_LIMIT", 0.3)
    with pytest.raises(LaunchTimeoutError, match=r"rank\(s\) \[0, 1\] did not start within 0.3 s") as info:
        launch(all_reduce_rank_plus_one, 2, timeout=60, start_method="spawn")
    assert info.value.starting and info.value.unfinished == [0, 1]
    assert "importing torch" in str(info.value)


def sleep_on_rank1():
    if dist.get_rank() == 1:
        time.sleep(600)


def test_a_timeout_says_which_ranks_had_finished():
    with pytest.raises(LaunchTimeoutError, match=r"rank\(s\) \[0\] had already finished") as info:
        launch(sleep_on_rank1, 2, timeout=2)
    assert info.value.where[1].startswith("at sleep_on_rank1 line ")


def skip_the_collective_on_rank1():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))


def test_a_peer_that_left_makes_the_collective_fail_fast_and_is_named():
    start = time.monotonic()
    with pytest.raises(RankFailedError, match="(closed|reset) by peer") as info:
        launch(skip_the_collective_on_rank1, 2, timeout=60)
    assert info.value.rank == 0 and time.monotonic() - start < 30
    assert "rank(s) [1] had already finished and left the process group while rank 0" in str(info.value)


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
    assert info.value.rank == 1 and info.value.signal is None
    with pytest.raises(RankFailedError, match="SIGKILL") as info:
        launch(kill_itself, 2, timeout=30)
    assert info.value.signal == "SIGKILL"
    assert pickle.loads(pickle.dumps(info.value)).signal == "SIGKILL"


def start_grandchild_then_fail(pidfile):
    child = subprocess.Popen(["sleep", "60"])
    Path(pidfile).write_text(str(child.pid))
    raise RuntimeError("failing with a child process running")


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
def test_processes_started_by_a_rank_are_stopped_too(tmp_path):
    pidfile = tmp_path / "pid"
    with pytest.raises(RankFailedError, match="failing with a child process running"):
        launch(start_grandchild_then_fail, 1, args=(str(pidfile),))
    assert gone_within(int(pidfile.read_text()))


def sleep_forever():
    time.sleep(600)


def interrupt_after(*seconds: float) -> None:
    for delay in seconds:
        threading.Timer(delay, os.kill, (os.getpid(), signal.SIGINT)).start()


@pytest.mark.parametrize("method", METHODS)
def test_keyboard_interrupt_stops_every_rank_and_the_next_call_works(ctrl_c_raises, method):
    launch(all_reduce_rank_plus_one, 2, start_method=method)  # a forkserver is up: ranks start at once
    interrupt_after(1.0)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        launch(sleep_forever, 2, timeout=120, start_method=method)
    assert time.monotonic() - start < 1.0 + 10
    assert launch(all_reduce_rank_plus_one, 2, start_method=method) == [3.0, 3.0]


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_keyboard_interrupt_while_ranks_are_still_starting(ctrl_c_raises, method):
    """Spawned ranks import torch for seconds before they own a process group; they are stopped too."""
    interrupt_after(0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        launch(sleep_forever, 4, timeout=120, start_method=method)
    assert time.monotonic() - start < 10


def ignore_sigterm_and_sleep(ready_dir):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so stopping it takes the whole grace period
    Path(ready_dir, str(dist.get_rank())).touch()
    time.sleep(600)


def interrupt_when_ready(ready_dir, ranks: int, times: int) -> None:
    """Once every rank is running, Ctrl-C ``times`` times 0.3 s apart: the later ones land in the clean-up."""
    def send():
        deadline = time.monotonic() + 60
        while len(list(Path(ready_dir).iterdir())) < ranks and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)

    threading.Thread(target=send, daemon=True).start()


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_second_ctrl_c_during_the_clean_up_leaves_nothing_running(ctrl_c_raises, method, tmp_path):
    interrupt_when_ready(tmp_path, ranks=2, times=3)
    with pytest.raises(KeyboardInterrupt):
        launch(ignore_sigterm_and_sleep, 2, args=(str(tmp_path),), timeout=120, start_method=method)
    time.sleep(0.5)  # the thread is done: all three interrupts were taken inside launch


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
        ({"timeout": 1e14}, ValueError, "timeout must be at most 1e7"),
        ({"backend": "mpi"}, ValueError, "backend"),
        ({"threads_per_rank": 0}, ValueError, "threads_per_rank"),
        ({"stream": "yes"}, TypeError, "stream must be True or False"),
        ({"start_method": "teleport"}, ValueError, "start_method"),
        ({"backend": "nccl"}, ValueError, r"backend='nccl' needs a GPU per rank: world_size=2, but this machine has 0"),
    ],
)
def test_bad_input_fails_before_any_process_starts(monkeypatch, kwargs, error, names):
    call = {"fn": identify, "world_size": 2} | kwargs
    monkeypatch.setattr(mp.process.BaseProcess, "start", lambda process: pytest.fail("a process was started"))
    with pytest.raises(error, match=names):
        launch(call.pop("fn"), call.pop("world_size"), **call)


NOTEBOOK_CELL = """
import torch.distributed as dist
SCALE = 10
def defined_in_a_cell():
    print("spawned rank", dist.get_rank())
    return dist.get_rank() * SCALE
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_fallbacks_run_functions_defined_in_a_notebook_cell_and_say_why_once(capsys, monkeypatch, method):
    monkeypatch.delenv("DPEDU_QUIET", raising=False)
    cell = {"__name__": "__main__"}  # like a Jupyter kernel: not importable by the children
    exec(NOTEBOOK_CELL, cell)
    dpedu.runtime.launcher._said_why.clear()
    assert launch(cell["defined_in_a_cell"], 2, start_method=method, timeout=60) == [0, 10]
    assert launch(cell["defined_in_a_cell"], 2, start_method=method, timeout=60) == [0, 10]
    captured = capsys.readouterr()
    assert captured.err.count(f"starting ranks with '{method}'") == 1  # said once, not every call
    assert "[rank 1] spawned rank 1" in captured.out


def test_dpedu_quiet_keeps_the_notice_out_of_notebook_outputs(capsys, monkeypatch):
    monkeypatch.setenv("DPEDU_QUIET", "1")  # ./course test sets it: a stored output must not depend on the OS
    dpedu.runtime.launcher._said_why.clear()
    launch(all_reduce_rank_plus_one, 2, start_method="spawn")
    assert "starting ranks" not in capsys.readouterr().err


def test_a_rendezvous_port_taken_by_another_program_is_replaced(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()  # like another program's server on the port chosen a moment ago
    ports = [taken.getsockname()[1], free_port()]
    monkeypatch.setattr(dpedu.runtime.launcher, "free_port", lambda: ports.pop(0))
    try:
        assert launch(all_reduce_rank_plus_one, 2, timeout=60) == [3.0, 3.0]
    finally:
        taken.close()
    assert ports == []  # the second port was used


def test_nccl_is_used_only_when_asked_and_every_rank_has_a_gpu(fake_gpus, monkeypatch):
    fake_gpus(8)
    assert _default_backend(None, 2) == "gloo"  # the same numbers on every machine unless nccl is asked for
    assert _default_backend("nccl", 8) == "nccl"
    with pytest.raises(ValueError, match="world_size=9, but this machine has 8 GPU"):
        _default_backend("nccl", 9)


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


def device_and_group():
    return torch.cuda.current_device(), dist.get_backend_config()


def test_with_nccl_each_rank_takes_its_own_gpu_and_cpu_tensors_still_work(fake_gpus, monkeypatch):
    """The nccl wiring, faked on a CPU machine: forked ranks inherit the fakes."""
    chosen = {}
    real_init = dist.init_process_group

    def init_recording_the_backend(backend, **kwargs):
        chosen["backend"] = backend  # asked for; gloo stands in for nccl below, which a CPU build lacks
        real_init("gloo", **kwargs)

    fake_gpus(2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: chosen.update(device=device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: chosen["device"])
    monkeypatch.setattr(dist, "get_backend_config", lambda group=None: chosen["backend"])
    monkeypatch.setattr(dist, "init_process_group", init_recording_the_backend)
    results = launch(device_and_group, 2, backend="nccl", start_method="fork")
    assert results == [(0, "cpu:gloo,cuda:nccl"), (1, "cpu:gloo,cuda:nccl")]


def precision_and_lesson_02_gap(X):
    return torch.get_float32_matmul_precision(), lesson_02_gap(lesson_02_model(), X)


def test_ranks_given_gpus_compute_in_full_float32_even_under_the_tf32_override(fake_gpus, monkeypatch,
                                                                               tf32_override):
    """The nccl wiring faked as above, with a GPU's TF32 under TORCH_ALLOW_TF32_CUBLAS_OVERRIDE emulated
    (tests/tf32.py): the ranks that nccl gives a GPU keep lesson 02's forward within its 1e-5."""
    real_init = dist.init_process_group
    fake_gpus(2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: real_init("gloo", **kwargs))
    X, _ = lesson_02_batch()
    for precision, gap in launch(precision_and_lesson_02_gap, 2, args=(X,), backend="nccl", start_method="fork"):
        assert precision == "highest" and gap < 1e-5
    for precision, gap in launch(precision_and_lesson_02_gap, 2, args=(X,), start_method="fork"):
        assert precision == "high" and gap > 1e-4  # the control: CPU ranks are left as they were
    assert torch.get_float32_matmul_precision() == "high"  # and so is the launching process


def read_setting():
    return os.environ.get("DPEDU_TEST_SETTING")


@pytest.mark.parametrize("method", METHODS)
def test_ranks_see_the_environment_of_the_moment_they_are_launched(method, monkeypatch):
    launch(read_setting, 1, start_method=method)  # a forkserver, if any, is up before the setting exists
    monkeypatch.setenv("DPEDU_TEST_SETTING", "set in a later cell")
    assert launch(read_setting, 2, start_method=method) == ["set in a later cell"] * 2


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
@pytest.mark.parametrize("method", METHODS)
def test_no_signal_goes_to_a_pid_that_is_no_longer_a_rank(method, monkeypatch):
    """A reaped rank's pid may be reused at once: signalling it could hit someone else's process."""
    sent = []
    real_kill = os.kill

    def recording_kill(pid, sig):
        sent.append((pid, sig, state(pid) is not None))  # a zombie's pid is still reserved
        real_kill(pid, sig)

    monkeypatch.setattr(os, "kill", recording_kill)
    launch(all_reduce_rank_plus_one, 2, start_method=method)
    with pytest.raises(RankFailedError, match="exit code 3"):
        launch(exit_without_result, 2, args=(3,), timeout=30, start_method=method)
    assert [(pid, sig) for pid, sig, existed in sent if not existed] == []


def test_live_processes_lists_this_process_with_its_parent_session_and_owner_but_no_zombie():
    from dpedu.runtime.processes import live_processes

    zombie = subprocess.Popen(["true"])
    assert gone_within(zombie.pid)  # exited: a zombie until it is reaped below
    me = next(p for p in live_processes() if p.pid == os.getpid())
    assert (me.parent, me.session, me.owner) == (os.getppid(), os.getsid(0), os.geteuid())
    assert me.name.startswith("python")
    assert zombie.pid not in {p.pid for p in live_processes()}
    zombie.wait()
