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
  forkserver where ranks start from one; and under spawn, the ranks of a launch that went well, idle,
  kept warm for the next launch (:mod:`dpedu.runtime.warm_ranks`: reused only when nothing of the
  launch runs on in them; stopped when the kernel ends, ten minutes after its last launch, or at ``close()``).

The child side (what runs inside each rank) lives in :mod:`dpedu.runtime._rank`; how ranks are started
(fork, forkserver, spawn) in :mod:`dpedu.runtime.start_methods`; how spawned ranks are kept for the next
launch in :mod:`dpedu.runtime.warm_ranks`; how failures and hangs are told apart and explained in
:mod:`dpedu.runtime.failures`.

Used in lessons 00, 03 to 05 and 08 to 12 (and by ``./course check-gpu``).
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import cloudpickle

from dpedu._validate import real, whole
from dpedu.runtime import _rank, start_methods, warm_ranks
from dpedu.runtime.failures import LaunchTimeoutError, died, first_failure, where_stuck
from dpedu.runtime.processes import Supervisor, stop_and_reap
from dpedu.runtime.rendezvous import free_port, on_loopback

__all__ = ["launch"]

_BACKENDS = ("gloo", "nccl")  # mpi needs ranks started by mpirun (lesson 09), not by launch
_PORT_TRIES = 3
# Seconds a rank may take to start (import torch and what fn needs, join the process group) before
# ``timeout`` begins. Generous: a spawned rank on a loaded classroom server can take tens of seconds.
START_UP_LIMIT = 120.0
_said_why: set[str] = set()


class _StartAgain(Exception):
    """No rank's function ran, and the launch can start again: a kept rank had died while idle."""


class _PortTaken(_StartAgain):
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
    (``torch.cuda.set_device(rank)``), computing there in full float32 (no TF32, whatever the
    environment says: ``float32_precision``), and a group that sends CUDA tensors through nccl and CPU
    tensors through gloo. Printed output is shown labelled ``[rank r]``: in rank order once all ranks
    are done, or live with ``stream=True``.

    Raises ``RankFailedError`` (naming the rank, carrying its traceback) as soon as a rank fails,
    and ``LaunchTimeoutError`` (saying where each unfinished rank was) when ranks are still running
    ``timeout`` seconds after every rank has started, or have not started within ``START_UP_LIMIT``
    seconds (starting is importing torch and joining the process group: milliseconds when forked,
    seconds at a first launch under spawn, and not the function's fault). In every case, Ctrl-C included,
    all child processes are stopped and reaped before this returns, within a few seconds, but for the
    idle warm ranks a spawned launch that went well leaves for the next one. Seed inside ``fn``: ranks
    that are not forked from the caller do not inherit its random state.
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
        except _StartAgain:
            continue  # every rank was stopped; start them again on another port
    raise RuntimeError(f"the ranks could not start {_PORT_TRIES} times in a row: the rendezvous port was taken by "
                       "another program, or a rank kept from an earlier launch had died")


def _run(payload: bytes, world_size: int, backend: str, method: str, timeout: float, threads: int,
         stream: bool) -> list[Any]:
    """One attempt at a launch, on one rendezvous port."""
    ctx = start_methods.context(method)
    # The whole environment, as it is now: a forkserver's ranks would otherwise see the server's, frozen
    # at the first launch, and miss what a later cell set (NCCL_DEBUG, CUDA_VISIBLE_DEVICES, ...).
    # All ranks are on this machine: loopback, unless the caller chose an interface.
    env = {**on_loopback(), **os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": str(world_size)}
    processes: list[BaseProcess] = []
    warm: list[warm_ranks.WarmRank] = []  # the ranks of this launch, when they are reused ones
    with tempfile.TemporaryDirectory(prefix="dpedu-launch-") as logdir:
        outputs = [_rank.RankOutput(logdir, r) for r in range(world_size)]

        def stop(succeeded: bool) -> None:  # success: let the ranks tear down their groups; else stop all now
            if warm and succeeded:  # warm ranks that can be reused stay, idle; the others end as below
                stop_and_reap(warm_ranks.put_back(warm), exit_grace=5.0)
            else:
                stop_and_reap([rank.process for rank in warm] + processes, exit_grace=5.0 if succeeded else 0.0)
            _rank.show_outputs(outputs, final=True)

        with Supervisor(stop) as supervisor:
            readers = []

            def spec(r: int) -> _rank.RankSpec:
                return _rank.RankSpec(r, world_size, backend, timeout, threads, env, logdir, os.getpid(),
                                      child_of_launcher=method != "forkserver")

            kept = 0  # how many of the ranks served an earlier launch (the first of ``warm``)
            if warm_ranks.reused(method, backend):
                kept = warm_ranks.take(ctx, world_size, warm)
                payload_path = Path(logdir, "payload")
                payload_path.write_bytes(payload)
                for r, rank in enumerate(warm):
                    warm_ranks.send_work(rank, spec(r), payload_path)
                readers = [rank.connection for rank in warm]
            for r in range(len(warm), world_size):
                reader, writer = ctx.Pipe(duplex=False)
                # not daemonic: a rank may start processes of its own (DataLoader workers, Hogwild)
                p = ctx.Process(target=_rank.run_rank, args=(spec(r), payload, writer), name=f"dpedu-rank-{r}")
                with warnings.catch_warnings():  # Python 3.12+ frowns on forking a threaded kernel;
                    warnings.simplefilter("ignore", DeprecationWarning)  # the child never uses them
                    p.start()
                writer.close()
                processes.append(p)
                readers.append(reader)
            ranks = _Ranks([rank.process for rank in warm] + processes, readers, outputs, stream, logdir,
                           kept=set(range(kept)))
            # Two deadlines: START_UP_LIMIT until every rank has said it started, then ``timeout``, so that a
            # slow start (spawn, a cold forkserver, a loaded machine) never eats into the function's own time.
            supervisor.wait(ranks.all_started, START_UP_LIMIT, partial(ranks.timed_out, START_UP_LIMIT, starting=True),
                            wake_on=ranks.waiting_on)
            supervisor.wait(ranks.all_finished, timeout, partial(ranks.timed_out, timeout), wake_on=ranks.waiting_on)
            return ranks.results


class _Ranks:
    """What launch knows of its ranks while they run: every report read, failing fast on the first error,
    a silent death or a port taken."""

    def __init__(self, processes: list[BaseProcess], readers: list[Connection], outputs: list[_rank.RankOutput],
                 stream: bool, logdir: str, kept: set[int]) -> None:
        self.processes, self.readers, self.outputs, self.logdir = processes, readers, outputs, logdir
        self.kept = kept  # the ranks that served an earlier launch (warm_ranks)
        self.stream = stream  # show output as it arrives
        self.results: list[Any] = [None] * len(processes)
        self.pending = {reader: rank for rank, reader in enumerate(readers)}
        self.sentinels = {p.sentinel: rank for rank, p in enumerate(processes)}
        self.started: set[int] = set()
        self.finished: list[int] = []

    def waiting_on(self) -> list[Connection | int]:
        """The pipes of the ranks not done yet, and their sentinels (ready when a rank dies)."""
        return list(self.pending) + [s for s, r in self.sentinels.items() if r in self.pending.values()]

    def all_started(self) -> bool:
        self._read()
        return len(self.started) == len(self.processes)

    def all_finished(self) -> bool:
        self._read()
        return not self.pending

    def timed_out(self, limit: float, starting: bool = False) -> LaunchTimeoutError:
        """The error for ranks not started (``starting``) or not finished within ``limit`` s."""
        unfinished = sorted(self.pending.values())
        where = where_stuck(self.processes, unfinished, self.logdir)
        ranks = sorted(set(unfinished) - self.started) if starting else unfinished
        return LaunchTimeoutError(ranks, limit, where, self.finished, starting=starting)

    def _read(self) -> None:
        """Take every report that has arrived, without waiting; raise the failure, if any."""
        ready = wait(self.waiting_on(), timeout=0)
        if self.stream:
            _rank.show_outputs(self.outputs, final=False)
        errors = []
        for reader in [r for r in ready if r in self.pending]:
            rank = self.pending[reader]
            try:
                status, value = pickle.loads(reader.recv_bytes())
            except (EOFError, ConnectionResetError):  # the pipe closed with no report: the rank died
                raise self._died(rank) from None
            if status == _rank.STARTED:
                self.started.add(rank)
                continue
            del self.pending[reader]
            if status == _rank.PORT_TAKEN:
                raise _PortTaken
            if status == "error":
                errors.append((value[2], rank, value[:2]))
            else:
                self.results[rank] = value
                self.finished.append(rank)
        if errors:  # let the others' reports (or deaths) arrive, to tell the first failure from its effects
            wait([self.processes[rank].sentinel for rank in self.pending.values()], timeout=0.2)
            reports = _reports_sent(self.pending)
            if any(status == _rank.PORT_TAKEN for status, _ in reports.values()):
                raise _PortTaken  # the others failed because rank 0 could not listen
            errors += [(value[2], rank, value[:2]) for rank, (status, value) in reports.items() if status == "error"]
            silent = [r for r in self.pending.values() if r not in reports]
            raise first_failure(errors, silent, self.processes, self.finished)
        for sentinel in ready:
            rank = self.sentinels.get(sentinel)
            if rank in self.pending.values() and not self.readers[rank].poll():
                raise self._died(rank)  # (poll: a report sent just before exiting is read)

    def _died(self, rank: int) -> Exception:
        if rank in self.kept and rank not in self.started:  # killed while idle: no function ran anywhere yet
            return _StartAgain()
        return died(self.processes[rank], rank)


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
