"""Run a function on several ranks from a notebook cell: ``dpedu.launch``.

Each rank is a real process with ``torch.distributed`` initialised, the way ``torchrun`` would start
it, so everything a lesson shows about processes, ranks and collectives is the real thing. On top of
what a plain ``mp.spawn`` gives, ``launch`` guarantees what a classroom needs:

- rank outputs appear in the cell, labelled and in rank order (so stored notebook outputs reproduce);
- an exception in any rank is raised in the caller with that rank's traceback, and stops the others;
- a rank stuck in a collective is stopped after ``timeout`` seconds, and the error says where it was;
- no rank, and no process a rank started, outlives the call, whatever happens (error, timeout,
  Ctrl-C / kernel interrupt, a second Ctrl-C during the clean-up), under every start method. Only
  multiprocessing's own helpers stay, one of each per kernel: its resource tracker, and the
  forkserver where ranks start from one.

The child side (what runs inside each rank) lives in :mod:`dpedu.runtime._rank`; how ranks are started
(fork, forkserver, spawn) in :mod:`dpedu.runtime.start_methods`; how failures and hangs are told apart and
explained in :mod:`dpedu.runtime.failures`.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

import cloudpickle

from dpedu._validate import real, whole
from dpedu.runtime import _rank, start_methods
from dpedu.runtime.failures import LaunchTimeoutError, died, first_failure, has_exited, where_stuck
from dpedu.runtime.processes import InterruptGuard, stop_groups
from dpedu.runtime.rendezvous import free_port, loopback_interface

__all__ = ["launch"]

_BACKENDS = ("gloo", "nccl")  # mpi needs ranks started by mpirun (lesson 08), not by launch
_PORT_TRIES = 3
# Seconds a rank may take to start (import torch and what fn needs, join the process group) before
# ``timeout`` begins. Generous: a spawned rank on a loaded classroom server can take tens of seconds.
START_UP_LIMIT = 120.0
_said_why: set[str] = set()


class _PortTaken(Exception):
    """Rank 0 could not listen on the chosen port: another program took it first."""


def _default_backend(backend: str | None, world_size: int) -> str:
    """gloo unless nccl is asked for, so that the same cell gives the same numbers on every machine.

    nccl moves CUDA tensors only, and each rank needs a GPU of its own: asked for without enough
    GPUs, it is refused here, before any process starts.
    """
    if backend != "nccl":
        return "gloo"
    gpus = start_methods.gpu_count()
    if gpus < world_size:
        raise ValueError(f"backend='nccl' needs a GPU per rank: world_size={world_size}, but this machine "
                         f"has {gpus} GPU(s); use backend='gloo' (the default) or fewer ranks")
    return "nccl"


def _check_arguments(fn: Any, world_size: Any, args: Any, timeout: Any, backend: Any, threads: Any,
                     stream: Any) -> bytes:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    whole("world_size", world_size)
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of arguments for fn, got {type(args).__name__}")
    real("timeout", timeout, above=0)
    if timeout > 1e7:  # the process group's timedelta overflows long before; no lesson waits 4 months
        raise ValueError(f"timeout must be at most 1e7 seconds, got {timeout!r}")
    if backend is not None and backend not in _BACKENDS:
        raise ValueError(f"backend must be None or one of {_BACKENDS}, got {backend!r}")
    whole("threads_per_rank", threads)
    if not isinstance(stream, bool):
        raise TypeError(f"stream must be True or False, got {stream!r}")
    try:  # every start method gets the same rule: what cannot be pickled cannot be sent
        return cloudpickle.dumps((fn, tuple(args)))
    except Exception as exc:
        raise TypeError(f"fn or args cannot be sent to the ranks (not picklable): {exc}") from None


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

    Every rank has ``torch.distributed`` initialised, the torchrun variables ``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, ``threads_per_rank`` CPU threads, and its
    process group destroyed at the end. ``backend``: gloo by default, on every machine, so that a
    cell computes the same thing everywhere; ``"nccl"`` gives each rank its own GPU
    (``torch.cuda.set_device(rank)``) and a group that sends CUDA tensors through nccl and CPU
    tensors through gloo. Printed output is shown labelled ``[rank r]``: in rank order once all ranks
    are done, or live with ``stream=True``.

    Raises ``RankFailedError`` (naming the rank, carrying its traceback) as soon as a rank fails,
    and ``LaunchTimeoutError`` (saying where each unfinished rank was) when ranks are still running
    ``timeout`` seconds after every rank has started, or have not started within ``START_UP_LIMIT``
    seconds (starting is importing torch and joining the process group: milliseconds when forked,
    seconds under spawn, and not the function's fault). In every case, Ctrl-C included, all child
    processes are stopped and reaped before this returns, within a few seconds. Seed inside ``fn``:
    ranks that are not forked from the caller do not inherit its random state.
    """
    payload = _check_arguments(fn, world_size, args, timeout, backend, threads_per_rank, stream)
    backend = _default_backend(backend, world_size)
    method, why_not_fork = start_methods.choose_start_method(start_method)
    if why_not_fork and why_not_fork not in _said_why and not os.environ.get("DPEDU_QUIET"):
        _said_why.add(why_not_fork)  # once per reason; environment_report() says it too
        print(f"dpedu.launch: starting ranks with {method!r}, not 'fork', because {why_not_fork}.", file=sys.stderr)
    for _ in range(_PORT_TRIES):
        try:
            return _run(payload, world_size, backend, method, timeout, threads_per_rank, stream)
        except _PortTaken:
            continue  # every rank was stopped; start them again on another port
    raise RuntimeError(f"the rendezvous port was taken by another program {_PORT_TRIES} times in a row")


def _run(payload: bytes, world_size: int, backend: str, method: str, timeout: float, threads: int,
         stream: bool) -> list[Any]:
    """One attempt at a launch, on one rendezvous port."""
    ctx = start_methods.context(method)
    # The whole environment, as it is now: a forkserver's ranks would otherwise see the server's, frozen
    # at the first launch, and miss what a later cell set (NCCL_DEBUG, CUDA_VISIBLE_DEVICES, ...).
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world_size)}
    if "GLOO_SOCKET_IFNAME" not in os.environ and (loopback := loopback_interface()):
        env["GLOO_SOCKET_IFNAME"] = loopback  # all ranks are on this machine; skip hostname lookups
    processes: list[BaseProcess] = []
    finished_ok = False
    with tempfile.TemporaryDirectory(prefix="dpedu-launch-") as logdir, InterruptGuard() as interrupts:
        outputs = [_rank.RankOutput(logdir, r) for r in range(world_size)]
        try:
            readers = []
            for r in range(world_size):
                reader, writer = ctx.Pipe(duplex=False)
                spec = _rank.RankSpec(r, world_size, backend, timeout, threads, env, logdir, os.getpid(),
                                      child_of_launcher=method != "forkserver")
                # not daemonic: a rank may start processes of its own (DataLoader workers, Hogwild)
                p = ctx.Process(target=_rank.run_rank, args=(spec, payload, writer), name=f"dpedu-rank-{r}")
                with warnings.catch_warnings():  # Python 3.12+ frowns on forking a threaded kernel;
                    warnings.simplefilter("ignore", DeprecationWarning)  # the child never uses them
                    p.start()
                writer.close()
                processes.append(p)
                readers.append(reader)
            results = _collect(processes, readers, outputs, timeout, stream, interrupts, logdir)
            finished_ok = True
        finally:  # success: let the ranks tear down their groups; otherwise stop everything now
            _stop(processes, exit_grace=5.0 if finished_ok else 0.0)
            _rank.show_outputs(outputs, final=True)
    return results


def _stop(processes: Sequence[BaseProcess], exit_grace: float = 0.0) -> None:
    """Give ranks ``exit_grace`` s to exit, stop each rank and its process group, reap all."""
    started = [p for p in processes if p.pid is not None]
    # Not those already reaped (a rank that died silently, see failures.died): their pid is free.
    running = [p for p in started if p._popen.returncode is None]
    stop_groups({p.pid: partial(has_exited, p) for p in running}, exit_grace=exit_grace)
    for p in started:
        p.join(5.0)  # SIGKILLed just now: only a process stuck in the kernel could take longer
        if p.exitcode is None:
            warnings.warn(f"dpedu.launch: {p.name} (pid {p.pid}) did not end after SIGKILL", RuntimeWarning,
                          stacklevel=3)
        else:
            p.close()


def _collect(processes, readers, outputs, timeout, stream, interrupts, logdir) -> list[Any]:
    """Wait for every rank's report; fail fast on the first error, a silent death or a deadline.

    Two deadlines: ``START_UP_LIMIT`` until every rank has said it started, then ``timeout`` from that
    moment, so that a slow start (spawn, a cold forkserver, a loaded machine) never eats into the
    function's own time, and a hang is always reported from inside the function.
    """
    results: list[Any] = [None] * len(processes)
    pending = {reader: rank for rank, reader in enumerate(readers)}
    sentinels = {p.sentinel: rank for rank, p in enumerate(processes)}
    started: set[int] = set()
    finished: list[int] = []
    deadline = time.monotonic() + START_UP_LIMIT
    while pending:
        interrupts.check()  # Ctrl-C becomes KeyboardInterrupt here, and only here
        left = deadline - time.monotonic()
        if left <= 0:
            unfinished = sorted(pending.values())
            where = where_stuck(processes, unfinished, logdir)
            if len(started) < len(processes):
                raise LaunchTimeoutError(sorted(set(unfinished) - started), START_UP_LIMIT, where, finished,
                                         starting=True)
            raise LaunchTimeoutError(unfinished, timeout, where, finished)
        ready = wait(list(pending) + [s for s, r in sentinels.items() if r in pending.values()],
                     timeout=min(left, 0.05))
        if stream:
            _rank.show_outputs(outputs, final=False)
        errors = []
        for reader in [r for r in ready if r in pending]:
            rank = pending[reader]
            try:
                status, value = pickle.loads(reader.recv_bytes())
            except EOFError:  # the pipe closed with no report: the rank died
                raise died(processes[rank], rank) from None
            if status == _rank.STARTED:
                started.add(rank)
                if len(started) == len(processes):
                    deadline = time.monotonic() + timeout
                continue
            del pending[reader]
            if status == _rank.PORT_TAKEN:
                raise _PortTaken
            if status == "error":
                errors.append((value[2], rank, value[:2]))
            else:
                results[rank] = value
                finished.append(rank)
        if errors:  # let the others' reports (or deaths) arrive, to tell the first failure from its effects
            wait([processes[rank].sentinel for rank in pending.values()], timeout=0.2)
            reports = _reports_sent(pending)
            if any(status == _rank.PORT_TAKEN for status, _ in reports.values()):
                raise _PortTaken  # the others failed because rank 0 could not listen
            errors += [(value[2], rank, value[:2]) for rank, (status, value) in reports.items() if status == "error"]
            raise first_failure(errors, [r for r in pending.values() if r not in reports], processes, finished)
        for sentinel in ready:
            rank = sentinels.get(sentinel)
            if rank in pending.values() and not readers[rank].poll():
                raise died(processes[rank], rank)  # (poll: a report sent just before exiting is read)
    return results


def _reports_sent(pending: dict) -> dict[int, tuple[str, Any]]:
    """The final reports already waiting in the pipes of ``pending`` ranks, read without blocking."""
    reports = {}
    for reader, rank in pending.items():
        try:
            while reader.poll():
                status, value = pickle.loads(reader.recv_bytes())
                if status != _rank.STARTED:
                    reports[rank] = (status, value)
                    break
        except (EOFError, OSError):  # closed without a report: the rank died
            pass
    return reports
