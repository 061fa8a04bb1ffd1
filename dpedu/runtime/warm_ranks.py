"""Spawned ranks kept warm between launches, so that under spawn (macOS's way) only the first launch waits.

A spawned rank is a fresh interpreter: it spends one to four seconds importing torch before it can join a
process group, at every launch. Forked ranks copy the kernel and skip that; a forkserver's ranks copy a server
that has imported it. Spawn has nothing to copy, so ``dpedu.launch`` keeps what it paid for: the ranks of a
spawned launch that ended well stay alive, idle, torch imported, and take the next launch's work. Each joins a
fresh process group on a fresh port, with the environment of that moment, as a new rank would.

A reused process is not a new one: whatever a launch changes in it that outlives the process group is
there for the next launch. So a rank is reused only where that is known not to matter:

- the environment is the one it started with (the rendezvous variables apart): libraries read some
  variables once per process (TORCH_DISTRIBUTED_DEBUG, oneDNN's and OpenMP's), so after a cell changes
  ``os.environ`` the next launch starts new ranks;
- the launch left nothing running in it: no thread but its own, and no process in its process group
  (DataLoader workers, a command it ran). Otherwise it is stopped, with all it started;
- the launch used nothing known to keep state per process: distributed checkpoints (their save plans are
  cached), accelerate (one AcceleratorState per process), a changed debug level of torch.distributed;
- and what a function may change and a new process would not have is put back before each launch: working
  directory, random generators (torch, Python, NumPy), default dtype, grad mode, deterministic
  algorithms, float32 matmul precision, torch.compile's caches.
Running every lesson under spawn with reuse (CI's pass 3) checks that their outputs are those of new ranks.
- after a failure, a timeout or Ctrl-C, every rank of that launch is stopped and reaped, as without reuse;
- an idle rank is stopped after ``IDLE_LIMIT`` s without work (by the launcher: a rank that ended itself
  could do so just as a launch sends it work), when the kernel exits (at exit; on Linux, and by its pipe
  closing elsewhere, even when the kernel is killed), and at ``close()``.

Reused only under spawn with gloo: a forkserver already starts ranks in tenths of a second, and a nccl rank
holds a GPU's memory. ``DPEDU_WARM_RANKS=0`` turns reuse off (every spawned launch starts new ranks).

Used by ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12) wherever ranks are spawned.
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing
import os
import pickle
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from pathlib import Path

import torch
import torch.distributed as dist

from dpedu.runtime import _rank, start_methods
from dpedu.runtime.processes import has_exited, live_processes, stop_and_reap

__all__ = ["IDLE_LIMIT", "close", "idle_pids", "reused"]

IDLE_LIMIT = 600.0  # seconds an idle rank waits for work before it is stopped (its memory back to the machine)
READY = "ready"  # a rank's last word on a launch that went well: ("ready", reusable)
_SETTLE_LIMIT = 5.0  # seconds a rank may take to leave its process group and say whether it can be reused

_idle: list[WarmRank] = []
_lock = threading.Lock()  # launches from two threads never take the same rank
_close_at_exit = False


# Modules whose use leaves state in the process that a later launch would see: a rank that has one loaded is
# not reused (distributed checkpoints cache save plans per process; accelerate keeps one state per process).
STATEFUL_MODULES = ("torch.distributed.checkpoint", "accelerate")
# Variables launch sets for each launch itself: not a change of the environment.
_PER_LAUNCH = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")


@dataclass
class WarmRank:
    process: BaseProcess
    connection: Connection  # jobs go in; "started", the outcome and "ready" come back
    environment: dict[str, str]  # the launcher's, when this rank was started
    idle_since: float = 0.0  # time.monotonic() when it was last put back


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in _PER_LAUNCH}


def reused(method: str, backend: str) -> bool:
    """Whether a launch with this start method and backend runs on warm ranks."""
    return method == "spawn" and backend == "gloo" and os.environ.get("DPEDU_WARM_RANKS", "1") != "0"


def take(ctx: BaseContext, count: int, taken: list[WarmRank]) -> None:
    """Put ``count`` ranks into ``taken``: idle ones first, then new ones, each as soon as it exists (so
    that the caller stops it whatever happens next). A new one is still importing torch when this returns."""
    global _close_at_exit
    environment = _environment()
    with _lock:  # not reused: one killed while idle, or one started with another environment
        ended = [rank for rank in _idle if has_exited(rank.process) or rank.environment != environment]
        alive = [rank for rank in _idle if rank not in ended]
        taken += alive[:count]
        _idle[:] = alive[count:]
        if not _close_at_exit:
            atexit.register(close)
            _close_at_exit = True
    stop_and_reap([rank.process for rank in ended])
    while len(taken) < count:
        mine, its = ctx.Pipe(duplex=True)
        process = ctx.Process(target=serve, args=(os.getpid(), its), name="dpedu-warm-rank")
        process.start()  # not daemonic: a rank may start processes of its own (DataLoader workers, Hogwild)
        its.close()
        taken.append(WarmRank(process, mine, environment))


def send_work(rank: WarmRank, spec: _rank.RankSpec, payload_path: Path) -> None:
    """Give ``rank`` a launch's work. The payload goes through a file: a large one written to the pipe
    would block this process until a new rank, still importing torch, reads it."""
    try:
        rank.connection.send_bytes(pickle.dumps((spec, str(payload_path))))
    except OSError:  # it died while idle (killed): launch reads no report from it and says so
        pass


def put_back(ranks: list[WarmRank]) -> list[BaseProcess]:
    """After a launch that went well: make idle each rank that says it can be reused; return the others,
    for the caller to stop."""
    unusable = []
    for rank in ranks:
        try:
            said = rank.connection.poll(_SETTLE_LIMIT) and pickle.loads(rank.connection.recv_bytes())
            reusable = said == (READY, True)
        except (EOFError, OSError):
            reusable = False
        if not reusable:
            unusable.append(rank.process)
    now = time.monotonic()
    with _lock:
        for rank in ranks:
            if rank.process not in unusable:
                rank.idle_since = now
                _idle.append(rank)
    expiry = threading.Timer(IDLE_LIMIT, _stop_expired)
    expiry.daemon = True
    expiry.start()
    return unusable


def idle_pids() -> set[int]:
    """The idle warm ranks of this process: kept by design, so not counted as left running."""
    with _lock:
        return {rank.process.pid for rank in _idle}


def _stop_expired() -> None:
    """Stop the ranks idle for ``IDLE_LIMIT`` s or more (a timer's thread, ``IDLE_LIMIT`` s after each put_back)."""
    with _lock:
        expired = [rank for rank in _idle if time.monotonic() - rank.idle_since >= IDLE_LIMIT - 0.01]
        _idle[:] = [rank for rank in _idle if rank not in expired]
    stop_and_reap([rank.process for rank in expired])


def close() -> None:
    """Stop and reap every idle warm rank (the next spawned launch starts new ones)."""
    with _lock:
        ranks = list(_idle)
        _idle.clear()
    stop_and_reap([rank.process for rank in ranks])
    for rank in ranks:
        rank.connection.close()


# --- inside a warm rank -----------------------------------------------------------------------------------

def serve(launcher_pid: int, connection: Connection) -> None:
    """Entry point of a warm rank: run each launch's work sent through ``connection``, until the launcher
    goes or a launch leaves it unusable."""
    _rank._die_with_parent(launcher_pid, child_of_launcher=True)
    for module in start_methods.PRELOAD:  # before any process group exists (see start_methods.PRELOAD)
        importlib.import_module(module)
    fresh = _FreshState()
    while True:
        try:
            spec, payload_path = pickle.loads(connection.recv_bytes())
        except EOFError:  # the launcher has gone
            break
        fresh.restore()
        reusable = (_rank.run_work(spec, Path(payload_path).read_bytes(), connection) and _nothing_left_running()
                    and not any(module in sys.modules for module in STATEFUL_MODULES)
                    and dist.get_debug_level() == fresh.debug_level)
        connection.send_bytes(pickle.dumps((READY, reusable)))
        if not reusable:
            break
    connection.close()
    os._exit(0)  # as _rank.run_rank ends, without interpreter shutdown


class _FreshState:
    """What a launch's function may change in its process and the next launch must not see."""

    def __init__(self) -> None:
        self.cwd = os.getcwd()
        self.torch_random = torch.get_rng_state()
        self.python_random = random.getstate()
        self.numpy_random = sys.modules["numpy"].random.get_state() if "numpy" in sys.modules else None
        self.dtype = torch.get_default_dtype()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.matmul_precision = torch.get_float32_matmul_precision()
        self.debug_level = dist.get_debug_level()  # read from the environment as torch.distributed was imported

    def restore(self) -> None:
        os.chdir(self.cwd)
        torch.set_rng_state(self.torch_random)
        random.setstate(self.python_random)
        if self.numpy_random is not None:
            sys.modules["numpy"].random.set_state(self.numpy_random)
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(True)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.set_float32_matmul_precision(self.matmul_precision)
        sys.modules["torch._dynamo"].reset()  # compiled graphs of the last launch (imported in serve, not here)


def _nothing_left_running() -> bool:
    """No thread but this one, and no live process in this rank's process group but itself."""
    multiprocessing.active_children()  # reaps the rank's own children that have ended
    if threading.active_count() > 1:
        return False
    me = os.getpid()
    if Path("/proc").exists():
        return all(process.pid == me for process in live_processes() if process.group == me)
    try:  # macOS: pgrep lists the group's members, not itself
        listed = subprocess.run(["pgrep", "-g", str(me)], capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return False  # cannot tell: not reused
    return listed == [str(me)]

