"""Spawned ranks kept warm between launches, so that under spawn (macOS's way) only the first launch waits.

A spawned rank is a fresh interpreter: it spends one to four seconds importing torch before it can join a
process group, at every launch. Forked ranks copy the kernel and skip that; a forkserver's ranks copy a server
that has imported it. Spawn has nothing to copy, so ``dpedu.launch`` keeps what it paid for: the ranks of a
spawned launch that ended well stay alive, idle, torch imported, and take the next launch's work. Each joins a
fresh process group on a fresh port, with the environment, working directory and ``sys.path`` of that moment,
as a new rank would.

A reused process is not a new one: whatever a launch changes in it that outlives the process group is there
for the next launch. So a rank is reused only where that is known not to matter:

- the environment is the one it started with (the rendezvous variables apart): libraries read some variables
  once per process (TORCH_DISTRIBUTED_DEBUG, oneDNN's and OpenMP's), so after a cell changes ``os.environ``
  the next launch starts new ranks; and so it does after a source file a rank imported (a lesson's, dpedu's,
  the learner's own module) has changed;
- the launch left nothing running in it: no thread but its own, and no process in its process group
  (DataLoader workers, a command it ran). Otherwise it is stopped, with all it started;
- the launch used nothing known to keep state per process: distributed checkpoints (their save plans are
  cached), accelerate (one AcceleratorState per process), a changed debug level of torch.distributed, a
  ``DeviceMesh`` (FSDP2 and tensor parallelism build one; DTensor caches results under a key blind to the rank
  that computed them);
- and before each launch, what a function may have changed is set as a new process has it: the random
  generators seeded afresh (torch, Python, NumPy), default dtype and device, grad and anomaly modes,
  deterministic algorithms, float32 matmul precision, print options, warning filters, the root logger, signal
  handlers, torch.compile's caches and settings.
A launch that called ``torch.set_num_interop_threads``, which torch takes once per process, is not reused
either. What is not put back (a C++ warning shown once per process) differs from a new rank;
``DPEDU_WARM_RANKS=0`` turns reuse off, every spawned launch starting new ranks. CI's pass 3 runs every
lesson under spawn with reuse and compares its outputs with the stored ones.

After a failure, a timeout or Ctrl-C, every rank of that launch is stopped and reaped, as without reuse.
The idle ranks are stopped ``IDLE_LIMIT`` s after the kernel's last launch (by the launcher: a rank that ended
itself could do so just as a launch sends it work), when the kernel exits (at exit; on Linux, and by its pipe
closing elsewhere, even when the kernel is killed), and at ``close()``.

Reused only under spawn with gloo, from the main thread: a forkserver already starts ranks in tenths of a
second, a nccl rank holds a GPU's memory, and on Linux a rank dies with the thread that started it.

Used by ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12) wherever ranks are spawned.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import logging
import multiprocessing
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass, field
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
_expiry: threading.Timer | None = None  # stops the idle ranks IDLE_LIMIT s after the last launch put some back


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
    sources: dict[str, int] = field(default_factory=dict)  # files of modules it imported: modification times

    def still_fresh(self, environment: dict[str, str]) -> bool:
        """Alive, started with ``environment``, and no source file it imported changed since."""
        return (not has_exited(self.process) and self.environment == environment
                and all(_modified(path) == modified for path, modified in self.sources.items()))


def _modified(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _environment() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in _PER_LAUNCH}


def reused(method: str, backend: str) -> bool:
    """Whether a launch with this start method and backend, from this thread, runs on warm ranks."""
    return (method == "spawn" and backend == "gloo" and os.environ.get("DPEDU_WARM_RANKS", "1") != "0"
            and threading.current_thread() is threading.main_thread())


def take(ctx: BaseContext, count: int, taken: list[WarmRank]) -> int:
    """Put ``count`` ranks into ``taken``: idle ones first, then new ones, each as soon as it exists (so
    that the caller stops it whatever happens next); return how many were idle ones. A new one is still
    importing torch when this returns."""
    environment = _environment()
    with _lock:
        ended = [rank for rank in _idle if not rank.still_fresh(environment)]
        alive = [rank for rank in _idle if rank not in ended]
        taken += alive[:count]
        _idle[:] = alive[count:]
    kept = len(taken)
    stop_and_reap([rank.process for rank in ended])
    while len(taken) < count:
        mine, its = ctx.Pipe(duplex=True)
        process = ctx.Process(target=serve, args=(os.getpid(), its), name="dpedu-warm-rank")
        process.start()  # not daemonic: a rank may start processes of its own (DataLoader workers, Hogwild)
        its.close()
        taken.append(WarmRank(process, mine, environment))
    return kept


def send_work(rank: WarmRank, spec: _rank.RankSpec, payload_path: Path) -> None:
    """Give ``rank`` a launch's work, with this process's working directory and ``sys.path`` (what spawn gives a
    new rank). The payload goes through a file: a large one written to the pipe would block this process until
    a new rank, still importing torch, reads it."""
    try:
        rank.connection.send_bytes(pickle.dumps((spec, str(payload_path), os.getcwd(), sys.path)))
    except OSError:  # it died while idle (killed): launch reads no report from it and says so
        pass


def put_back(ranks: list[WarmRank]) -> list[BaseProcess]:
    """After a launch that went well: make idle each rank that says it can be reused; return the others,
    for the caller to stop."""
    global _expiry
    reusable = [rank for rank in ranks if _ready(rank)]
    with _lock:
        _idle.extend(reusable)
    if _expiry is not None:  # every idle rank was put back by now, so all go IDLE_LIMIT s after this launch
        _expiry.cancel()
    _expiry = threading.Timer(IDLE_LIMIT, close)
    _expiry.daemon = True
    _expiry.start()
    return [rank.process for rank in ranks if rank not in reusable]


def _ready(rank: WarmRank) -> bool:
    """Whether ``rank`` says, within _SETTLE_LIMIT s, that it left its process group and can be reused."""
    try:
        if not rank.connection.poll(_SETTLE_LIMIT):
            return False
        status, reusable, rank.sources = pickle.loads(rank.connection.recv_bytes())
    except (EOFError, OSError):
        return False
    return status == READY and reusable


def idle_pids() -> set[int]:
    """The idle warm ranks of this process: kept by design, so not counted as left running."""
    with _lock:
        return {rank.process.pid for rank in _idle}


def close() -> None:
    """Stop and reap every idle warm rank (the next spawned launch starts new ones)."""
    with _lock:
        ranks = list(_idle)
        _idle.clear()
    stop_and_reap([rank.process for rank in ranks])
    for rank in ranks:
        rank.connection.close()


# Registered after multiprocessing's own exit handler (imported above, with multiprocessing.connection), so run
# before it: that handler joins every child still running, idle ranks included, and would wait for them forever.
atexit.register(close)


# --- inside a warm rank -----------------------------------------------------------------------------------

def serve(launcher_pid: int, connection: Connection) -> None:
    """Entry point of a warm rank: run each launch's work sent through ``connection``, until the launcher
    goes or a launch leaves it unusable."""
    _rank._die_with_parent(launcher_pid, child_of_launcher=True)
    for module in start_methods.PRELOAD:  # before any process group exists (see start_methods.PRELOAD)
        importlib.import_module(module)
    fresh = _FreshState()
    _record_calls_that_stay_with_the_process()
    while True:
        try:
            spec, payload_path, directory, path = pickle.loads(connection.recv_bytes())
        except EOFError:  # the launcher has gone
            break
        fresh.restore()
        os.chdir(directory)
        sys.path[:] = path
        reusable = (_rank.run_work(spec, Path(payload_path).read_bytes(), connection) and _nothing_left_running()
                    and not any(module in sys.modules for module in STATEFUL_MODULES)
                    and dist.get_debug_level() == fresh.debug_level and not _per_process_calls_made)
        connection.send_bytes(pickle.dumps((READY, reusable, _sources())))
        if not reusable:
            break
    connection.close()
    os._exit(0)  # as _rank.run_rank ends, without interpreter shutdown


_per_process_calls_made: list[str] = []  # calls of this launch whose effect a later launch in this process would meet


def _record_calls_that_stay_with_the_process() -> None:
    """Two calls leave what a new rank would not have, so a rank whose launch made one is not reused:
    - ``torch.set_num_interop_threads``, which torch takes once per process (the next launch, calling it again,
      would fail where a new rank would not);
    - building a ``DeviceMesh``, which records this process's rank while torch caches what DTensors compute under
      a key whose mesh compares equal whatever the rank (DTensor's sharding propagation returns specs that keep the
      mesh of the call that filled the cache). A rank reused under another rank number then got the old rank's
      shard offsets: in lesson 11b a checkpoint saved after FSDP had run in reused ranks was written with two
      ranks' offsets swapped. FSDP2, DTensor and tensor parallelism build meshes."""
    from torch.distributed.device_mesh import DeviceMesh

    torch.set_num_interop_threads = _recorded(torch.set_num_interop_threads, "set_num_interop_threads")
    DeviceMesh.__init__ = _recorded(DeviceMesh.__init__, "DeviceMesh")


def _recorded(call, name: str):
    @functools.wraps(call)
    def recorded(*args, **kwargs):
        _per_process_calls_made.append(name)
        return call(*args, **kwargs)

    return recorded


class _FreshState:
    """What a launch's function may change in its process, as a new process has it."""

    _SIGNALS = [getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGUSR2")
                if hasattr(signal, name)]

    def __init__(self) -> None:
        self.dtype = torch.get_default_dtype()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.matmul_precision = torch.get_float32_matmul_precision()
        self.debug_level = dist.get_debug_level()  # read from the environment as torch.distributed was imported
        self.warning_filters = list(warnings.filters)
        self.root_logger = (logging.root.level, list(logging.root.handlers))
        self.handlers = {number: signal.getsignal(number) for number in self._SIGNALS}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            self.compile_settings = sys.modules["torch._dynamo"].config.get_config_copy()  # imported in serve
        self.numpy_print = sys.modules["numpy"].get_printoptions() if "numpy" in sys.modules else None

    def restore(self) -> None:
        torch.seed()  # a new process seeds its generators afresh: so does each launch here
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
            if self.numpy_print is not None:
                sys.modules["numpy"].set_printoptions(**self.numpy_print)
        torch.set_default_dtype(self.dtype)
        torch.set_default_device(None)
        torch.set_grad_enabled(True)
        torch.autograd.set_detect_anomaly(False)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.set_printoptions(profile="default")
        warnings.filters[:] = self.warning_filters
        if hasattr(warnings, "_filters_mutated"):  # forget which warnings were shown once already
            warnings._filters_mutated()
        logging.root.setLevel(self.root_logger[0])
        logging.root.handlers[:] = self.root_logger[1]
        if hasattr(signal, "alarm"):
            signal.alarm(0)
        for number, handler in self.handlers.items():
            signal.signal(number, handler)
        dynamo = sys.modules["torch._dynamo"]
        dynamo.reset()  # compiled graphs of the last launch
        dynamo.utils.counters.clear()  # and what they counted
        with warnings.catch_warnings():  # reading or setting a deprecated setting warns
            warnings.simplefilter("ignore", FutureWarning)
            for name, value in self.compile_settings.items():
                if getattr(dynamo.config, name) != value:
                    setattr(dynamo.config, name, value)


def _sources() -> dict[str, int]:
    """The files of the modules imported here from outside Python's and the environment's own installation
    (a lesson's, dpedu's, the learner's), with their modification times."""
    installed = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    files = {getattr(module, "__file__", None) for module in list(sys.modules.values())}
    return {path: modified for path in files if path and not path.startswith(installed)
            and (modified := _modified(path)) is not None}


def _nothing_left_running() -> bool:
    """No thread but this one, and no live process in this rank's process group but itself."""
    multiprocessing.active_children()  # reaps the rank's own children that have ended
    if threading.active_count() > 1:
        return False
    me = os.getpid()
    if Path("/proc").exists():
        return all(process.pid == me for process in live_processes() if process.group == me)
    try:  # macOS: ps, which is in this group too while it runs (pgrep would leave out its parent, this rank)
        ps = subprocess.Popen(["ps", "-A", "-o", "pid=", "-o", "pgid=", "-o", "stat="], stdout=subprocess.PIPE,
                              text=True)
        listed, _ = ps.communicate(timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False  # cannot tell: not reused
    members = [line.split() for line in listed.splitlines()]
    return not [pid for pid, group, state, *_ in members
                if int(group) == me and int(pid) not in (me, ps.pid) and not state.startswith("Z")]
