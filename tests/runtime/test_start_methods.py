"""Which start method launch uses, and that asking never touches CUDA (faked: CI has no GPU)."""

import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time

import pytest

import dpedu
from dpedu.runtime import start_methods
from dpedu.runtime.start_methods import PRELOAD, choose_start_method


@pytest.fixture
def unforced(monkeypatch):
    monkeypatch.delenv("DPEDU_START_METHOD", raising=False)
    monkeypatch.setattr("sys.platform", "linux")


def test_linux_without_gpus_forks(fake_gpus, unforced, monkeypatch):
    fake_gpus(0)
    monkeypatch.setattr("dpedu.runtime.start_methods.autograd_device_threads", lambda: 0)  # a GPU machine's are real
    assert choose_start_method() == ("fork", None)


def test_linux_with_gpus_never_forks_from_the_kernel(fake_gpus, unforced, monkeypatch):
    fake_gpus(2)
    method, why = choose_start_method()
    assert method == "forkserver" and "2 GPU(s)" in why and "touched CUDA" in why


def test_multiprocessing_used_before_does_not_make_a_gpu_machine_fork(fake_gpus, unforced, monkeypatch):
    from tqdm import tqdm

    for _ in tqdm(range(2), disable=True):  # fixes multiprocessing's default start method ("fork" on Linux)
        pass
    assert mp.get_start_method(allow_none=True) is not None
    fake_gpus(1)
    assert choose_start_method()[0] == "forkserver"


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="threads are counted where /proc lists them")
def test_device_threads_are_counted_by_the_name_torch_gives_them(monkeypatch):
    before = start_methods.autograd_device_threads()
    named, release = threading.Event(), threading.Event()

    def stand_in():  # a thread named as torch names an autograd device thread
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write("pt_autograd_0")
        named.set()
        release.wait(30)

    thread = threading.Thread(target=stand_in)
    thread.start()
    try:
        assert named.wait(30) and start_methods.autograd_device_threads() == before + 1
    finally:
        release.set()
        thread.join(30)
    # join returns once the thread's Python code is done, a moment before the OS thread leaves /proc/self/task
    # (seen once in CI, under load): the count must come back, within seconds
    deadline = time.monotonic() + 10
    while start_methods.autograd_device_threads() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert start_methods.autograd_device_threads() == before
    monkeypatch.setattr("os.listdir", lambda path: (_ for _ in ()).throw(FileNotFoundError(path)))
    assert start_methods.autograd_device_threads() == 0  # no /proc: nothing to count


def test_once_autograd_has_started_device_threads_ranks_are_not_forked(fake_gpus, unforced, monkeypatch):
    fake_gpus(0)
    monkeypatch.setattr("dpedu.runtime.start_methods.autograd_device_threads", lambda: 8)
    method, why = choose_start_method()
    assert method == "forkserver" and "8 device threads" in why and "could not run backward" in why
    assert choose_start_method("fork") == ("fork", None)  # asked for: the learner's call


def test_macos_spawns(unforced, monkeypatch):
    monkeypatch.setattr("sys.platform", "darwin")
    assert choose_start_method() == ("spawn", "fork is not reliable on darwin")


def test_the_environment_can_force_a_method(unforced, monkeypatch):
    monkeypatch.setenv("DPEDU_START_METHOD", "spawn")  # macOS's path, tried on Linux
    assert choose_start_method() == ("spawn", "the start method 'spawn' was requested")
    assert choose_start_method("fork") == ("fork", None)  # an argument still wins


def test_an_explicit_method_wins_and_a_wrong_one_is_refused(unforced):
    assert choose_start_method("spawn") == ("spawn", "the start method 'spawn' was requested")
    assert choose_start_method("fork") == ("fork", None)
    with pytest.raises(ValueError, match="start_method must be one of"):
        choose_start_method("teleport")


# Every way torch has of initialising CUDA, replaced by a recorder before dpedu is imported. A CPU
# build of torch answers these without touching a driver, so recording the calls is the only way a
# CPU machine can check that dpedu never makes them.
NO_CUDA_PLEASE = """
import sys, torch
calls = []
def recorder(name):
    return lambda *args, **kwargs: calls.append(name) or 0
for name in ("is_available", "init", "_lazy_init", "current_device", "set_device", "get_device_properties",
             "synchronize", "mem_get_info"):
    setattr(torch.cuda, name, recorder(name))
if hasattr(torch._C, "_cuda_getDeviceCount"):
    torch._C._cuda_getDeviceCount = recorder("_cuda_getDeviceCount")
torch.cuda.device_count = lambda: 2   # what NVML would answer on a machine with two GPUs
import dpedu, dpedu.runtime.environment, dpedu.runtime.launcher, dpedu.runtime.start_methods
dpedu.runtime.gpus._CHILD = "import json; print(json.dumps([['GPU', 1]] * 2))"  # CUDA's answer in the child
for module in sys.argv[1:]:
    __import__(module)
print(dpedu.runtime.start_methods.choose_start_method()[0], dpedu.runtime.start_methods.gpu_count(),
      dpedu.runtime.launcher._default_backend("nccl", 2), dpedu.runtime.launcher._default_backend(None, 2), calls)
"""


def test_choosing_and_the_preload_never_touch_cuda():
    run = subprocess.run([sys.executable, "-c", NO_CUDA_PLEASE, *PRELOAD], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["forkserver", "2", "nccl", "gloo", "[]"]


def test_a_forking_kernel_imports_the_preload_with_dpedu_and_a_spawning_one_does_not():
    script = "import sys, dpedu; print(all(m in sys.modules for m in dpedu.runtime.start_methods.PRELOAD))"
    printed = {}
    for method in ("fork", "spawn"):
        env = {**os.environ, "DPEDU_START_METHOD": method}
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr
        printed[method] = run.stdout.strip()
    assert printed == {"fork": "True", "spawn": "False"}  # spawned ranks would import it again for nothing


def _preloaded() -> bool:
    return "torch._dynamo" in sys.modules


@pytest.mark.parametrize(("method", "warm", "preloaded"),
                         [("fork", "1", True), ("spawn", "1", True), ("spawn", "0", False)])
def test_a_rank_finds_the_preload_where_it_was_forked_or_is_kept_warm_and_a_one_off_does_not_import_it(
        method, warm, preloaded, monkeypatch, no_leftover_processes):
    # A warm rank serves many launches: it imports the preload once, before its first process group.
    # A one-off spawned rank's own import of dpedu must not (a plain all-reduce took 1.8 s instead of 1.0 s).
    monkeypatch.setenv("DPEDU_WARM_RANKS", warm)
    assert dpedu.launch(_preloaded, 2, start_method=method) == [preloaded] * 2
