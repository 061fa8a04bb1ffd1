"""Run a function on several ranks from a notebook cell: ``dpedu.launch``.

Each rank is a real process with ``torch.distributed`` initialised, the way ``torchrun`` would start
it, so everything a lesson shows about processes, ranks and collectives is the real thing. On top of
what a plain ``mp.spawn`` gives, ``launch`` guarantees what a classroom needs:

- rank outputs appear in the cell, labelled and in rank order (so stored notebook outputs reproduce);
- an exception in any rank is raised in the caller with that rank's traceback, and stops the others;
- a rank stuck in a collective is stopped after ``timeout`` seconds;
- no child process outlives the call, whatever happens (error, timeout, Ctrl-C / kernel interrupt).

The child side (what runs inside each rank) lives in :mod:`dpedu._rank`.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import wait
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist

from dpedu import _rank
from dpedu._processes import interrupts_deferred, signal_group, stop_groups
from dpedu._rank import RankFailedError
from dpedu._validate import real, whole
from dpedu.commands import free_port

__all__ = ["launch", "LaunchTimeoutError", "RankFailedError", "choose_start_method"]

_BACKENDS = ("gloo", "nccl")  # mpi needs ranks started by mpirun (lesson 08), not by launch
_said_why: set[str] = set()


class LaunchTimeoutError(TimeoutError):
    """Some ranks did not finish within the launch's ``timeout``; ``unfinished`` lists them."""

    def __init__(self, unfinished: list[int], timeout: float):
        self.unfinished = unfinished
        super().__init__(
            f"rank(s) {unfinished} did not finish within timeout={timeout:g} s and were stopped "
            "(a rank waiting in a collective that another rank never joins waits forever)"
        )


def choose_start_method(start_method: str | None = None) -> tuple[str, str | None]:
    """Return ``(method, why_not_fork)``: fork where it is safe, else spawn with the reason.

    Fork is fast (the child already has torch imported) but unsafe once CUDA is initialised, and
    unavailable or unreliable off Linux. ``spawn`` re-imports torch in every child (seconds), but
    with cloudpickle it still runs functions defined in a notebook cell.
    """
    forced = start_method or mp.get_start_method(allow_none=True)
    if forced is not None:
        if forced not in mp.get_all_start_methods():
            raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}, got {forced!r}")
        return forced, None if forced == "fork" else f"the start method {forced!r} was requested"
    if not sys.platform.startswith("linux"):
        return "spawn", f"fork is not reliable on {sys.platform}"
    if torch.cuda.is_initialized():
        return "spawn", "CUDA is already initialised in this process, and a forked child cannot use it"
    return "fork", None


def _default_backend(world_size: int) -> str:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = dist.is_available() and dist.is_nccl_available()
    return "nccl" if nccl and gpus >= world_size else "gloo"


def _loopback_interface() -> str | None:
    """The loopback interface's name ("lo" on Linux, "lo0" on macOS), where the OS can list them."""
    import socket

    try:
        return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)
    except (AttributeError, OSError):
        return None


def _check_arguments(fn: Any, world_size: Any, args: Any, timeout: Any, backend: Any, threads: Any) -> bytes:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    whole("world_size", world_size)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of arguments for fn, got {type(args).__name__}")
    real("timeout", timeout, above=0)
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"backend must be None or one of {_BACKENDS}, got {backend!r}")
    whole("threads_per_rank", threads)
    try:  # every start method gets the same rule: what cannot be pickled cannot be sent
        return cloudpickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise TypeError(f"fn or args cannot be sent to the ranks (not picklable): {exc}") from None


def _stop(processes: Sequence[mp.process.BaseProcess], exit_grace: float = 0.0) -> None:
    """Give ranks ``exit_grace`` s to exit, stop each rank's process group (its children too), reap all."""
    started = [p for p in processes if p.pid is not None]
    stop_groups({p.pid: partial(_has_exited, p) for p in started}, exit_grace=exit_grace)
    for p in started:
        p.join()
        p.close()


def _has_exited(process: mp.process.BaseProcess) -> bool:
    return bool(wait([process.sentinel], timeout=0))  # the sentinel tells without reaping


def launch(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    *,
    timeout: float = 60.0,
    backend: str | None = None,
    stream: bool = False,
    threads_per_rank: int = 1,
    start_method: str | None = None,
) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` ranks and return their results, indexed by rank.

    Every rank has ``torch.distributed`` initialised (``backend``: nccl when each rank can have its
    own GPU, else gloo), the torchrun variables ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` set, ``threads_per_rank`` CPU threads, and its process group
    destroyed at the end. Printed output is shown labelled ``[rank r]``: in rank order once all
    ranks are done, or live with ``stream=True``.

    Raises ``RankFailedError`` (naming the rank, carrying its traceback) as soon as a rank fails,
    and ``LaunchTimeoutError`` when ranks are still running after ``timeout`` seconds. In every
    case, Ctrl-C included, all child processes are stopped and reaped before this returns.
    Seed inside ``fn``: with the spawn start method ranks do not inherit the caller's RNG state.
    """
    payload = _check_arguments(fn, world_size, args, timeout, backend, threads_per_rank)
    method, why_not_fork = choose_start_method(start_method)
    if why_not_fork and why_not_fork not in _said_why:
        _said_why.add(why_not_fork)
        print(f"dpedu.launch: starting ranks with {method!r}, not 'fork', because {why_not_fork}; "
              "each rank imports torch itself, so start-up takes a few seconds.", file=sys.stderr)
    backend = backend or _default_backend(world_size)
    ctx = mp.get_context(method)
    deadline = time.monotonic() + timeout
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world_size)}
    if "GLOO_SOCKET_IFNAME" not in os.environ and (loopback := _loopback_interface()):
        env["GLOO_SOCKET_IFNAME"] = loopback  # all ranks are on this machine; skip hostname lookups
    with tempfile.TemporaryDirectory(prefix="dpedu-launch-") as logdir:
        outputs = [_rank.RankOutput(logdir, r) for r in range(world_size)]
        processes, readers = [], []
        try:
            with interrupts_deferred():  # a Ctrl-C now would leave a started rank unrecorded
                for r in range(world_size):
                    reader, writer = ctx.Pipe(duplex=False)
                    spec = _rank.RankSpec(r, world_size, backend, timeout, threads_per_rank, env, logdir)
                    # not daemonic: a rank may start processes of its own (DataLoader workers, Hogwild)
                    p = ctx.Process(target=_rank.run_rank, args=(spec, payload, writer, os.getpid()),
                                    name=f"dpedu-rank-{r}")
                    with warnings.catch_warnings():  # Python 3.12+ frowns on forking a threaded kernel;
                        warnings.simplefilter("ignore", DeprecationWarning)  # the child never uses them
                        p.start()
                    writer.close()
                    processes.append(p)
                    readers.append(reader)
            results = _collect(processes, readers, outputs, deadline, timeout, stream)
        except BaseException:  # rank failure, timeout or Ctrl-C: stop everything now
            _stop(processes)
            raise
        else:  # every rank reported; let them tear down their process groups and exit
            _stop(processes, exit_grace=5.0)
        finally:
            _rank.show_outputs(outputs, final=True)
    return results


def _collect(processes, readers, outputs, deadline, timeout, stream) -> list[Any]:
    """Wait for every rank's report; fail fast on the first error, a silent death or the deadline."""
    results: list[Any] = [None] * len(processes)
    pending = {reader: rank for rank, reader in enumerate(readers)}
    sentinels = {p.sentinel: rank for rank, p in enumerate(processes)}
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise LaunchTimeoutError(sorted(pending.values()), timeout)
        # Short slices: a signal (Ctrl-C, a kernel interrupt) may be taken by another thread of this
        # process, and then only the main thread's next bytecode raises KeyboardInterrupt.
        ready = wait(list(pending) + [s for s, r in sentinels.items() if r in pending.values()],
                     timeout=min(left, 0.05))
        if stream:
            _rank.show_outputs(outputs, final=False)
        errors = []
        for reader in [r for r in ready if r in pending]:
            rank = pending.pop(reader)
            try:
                status, value = pickle.loads(reader.recv_bytes())
            except EOFError:  # the pipe closed with no report: the rank died
                raise _died(processes[rank], rank) from None
            if status == "error":
                errors.append((value[2], rank, value[:2]))
            else:
                results[rank] = value
        if errors:
            raise _first_failure(errors, pending, processes)
        for sentinel in ready:
            rank = sentinels.get(sentinel)
            if rank in pending.values() and not readers[rank].poll():
                raise _died(processes[rank], rank)  # (poll: a report sent just before exiting is read)
    return results


def _first_failure(errors: list, pending: dict, processes) -> RankFailedError:
    """Tell the failure that came first from those it caused: a failing rank makes its peers fail too.

    A rank that died without a report (killed, crashed) goes first: its death closed the connections
    its peers then failed on. Otherwise the earliest report is the cause.
    """
    wait([processes[rank].sentinel for rank in pending.values()], timeout=0.2)  # a death shows at once
    reports = dict(_reports_sent(pending))
    for rank in sorted(pending.values()):
        if rank not in reports and _has_exited(processes[rank]):  # exited, reported nothing
            return _died(processes[rank], rank)
    errors += [(value[2], rank, value[:2]) for rank, (status, value) in reports.items() if status == "error"]
    _, rank, (summary, remote_traceback) = min(errors)
    return RankFailedError(rank, summary, remote_traceback)


def _reports_sent(pending: dict) -> list[tuple[int, tuple[str, Any]]]:
    """The reports already waiting in the pipes of ``pending`` ranks, read without blocking."""
    reports = []
    for reader, rank in pending.items():
        try:
            if reader.poll():
                reports.append((rank, pickle.loads(reader.recv_bytes())))
        except (EOFError, OSError):  # closed without a report: the rank died
            pass
    return reports


def _died(process: mp.process.BaseProcess, rank: int) -> RankFailedError:
    signal_group(process.pid, signal.SIGKILL)  # its children, before reaping it
    process.join(1.0)
    code = process.exitcode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return RankFailedError(rank, f"the process ended ({how}) without returning a result", "")
