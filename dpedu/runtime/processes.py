"""Starting, supervising and stopping processes safely: Ctrl-C never strands a half-started one, no wait
lasts past its deadline, and stopping a process also stops every process it started, without touching
anyone else's.

Each process dpedu starts leads its own process group (a rank calls ``setpgid``; a command runs in a
new session), so one signal to the group also reaches its children. The leader itself is signalled
too: a rank that is still starting (importing torch under spawn) has no group of its own yet. Both
are signalled before the leader is reaped: an unreaped leader keeps its pid, so what is signalled
can only be ours, never a newcomer's that was given a freed pid.

Every process the course starts is waited for the same way (``Supervisor``): ranks of
``dpedu.launch``, Hogwild's workers, commands run together, Slurm's daemons and jobs.

Used by ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12), ``run_together`` (lessons 03, 09, 10), Hogwild's
workers (lesson 06) and the Slurm cluster (lesson 09).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import TracebackType

Process = BaseProcess | subprocess.Popen  # a rank or a worker (multiprocessing); a command or a daemon


@dataclass(frozen=True)
class LiveProcess:
    """A process that is running (not a zombie), as ``/proc/PID/stat`` shows it."""

    pid: int
    parent: int
    group: int  # its process group: a rank's own, and every process the rank started
    session: int
    name: str  # the command's name, cut to 15 characters by the kernel
    owner: int  # the user id it runs as: the owner of its /proc files, which Linux gives to root for a process
    # it marks non-dumpable (ssh-agent, a setuid program's child); a user's shell and kernels show as theirs


def live_processes() -> list[LiveProcess]:
    """Every live process on this machine, read from /proc (Linux; elsewhere an empty list)."""
    proc = Path("/proc")
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            with open(entry / "stat") as file:
                stat, owner = file.read(), os.fstat(file.fileno()).st_uid
        except OSError:  # gone meanwhile
            continue
        # "pid (name) state parent group session ...": the name may itself hold spaces and parentheses
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, parent, group, session = rest.split()[:4]
        if state != "Z":
            found.append(LiveProcess(int(entry.name), int(parent), int(group), int(session), name, owner))
    return found


def has_exited(process: Process) -> bool:
    """Has ``process`` ended (reaped or not)? Asked without reaping it, so its pid stays ours to signal."""
    if isinstance(process, subprocess.Popen):
        if process.returncode is not None:  # reaped already
            return True
        if hasattr(os, "waitid"):
            return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        return process.poll() is not None  # reaps (macOS before 3.13): there, its empty group could be reused
    # A forkserver's process is the server's child, not ours, so waitid cannot ask. Under every start
    # method its sentinel (a pipe it holds open) is readable once it exits; its exit code may come a moment later.
    return bool(wait([process.sentinel], timeout=0))


def signal_group(pid: int, sig: int, leader_exited: bool = False) -> None:
    """Send ``sig`` to the process ``pid`` (unless it has exited) and then to the group it leads.

    The process first: once it has stopped it can start no new child, so the group signalled next
    holds every child it ever started. An exited leader is not signalled: under forkserver it is
    reaped by the server as it exits, and its pid may already be someone else's. Its group still
    is: a pid stays reserved while a group of that number has members.
    """
    for send in ((os.killpg,) if leader_exited else (os.kill, os.killpg)):
        try:
            send(pid, sig)
        except (ProcessLookupError, PermissionError):  # gone, or no group yet (macOS says EPERM for zombies)
            pass


def stop_and_reap(processes: Sequence[Process], exit_grace: float = 0.0, grace: float = 1.0) -> None:
    """Stop each started process of ``processes`` and the group it leads, then reap it.

    They get ``exit_grace`` s to end by themselves, then SIGTERM, and ``grace`` s later SIGKILL goes
    to every group, whether or not its leader has exited, since a leader's children may outlive it.
    Each is then reaped (a RuntimeWarning names one still there 5 s after SIGKILL) and, if from
    multiprocessing, closed.
    """
    started = [p for p in processes if p.pid is not None]
    # Not a rank reaped already (one that died silently: failures.died stopped its group): its pid is free.
    # Read from _popen because Process.exitcode would reap the rank, freeing its pid before its group is signalled.
    # A command is reaped early only where has_exited must (no waitid), and its children may live on.
    running = [p for p in started if isinstance(p, subprocess.Popen) or p._popen.returncode is None]
    wait_until(lambda: all(has_exited(p) for p in running), exit_grace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in running:
            signal_group(p.pid, sig, leader_exited=has_exited(p))
        wait_until(lambda: all(has_exited(p) for p in running), grace)
    for p in started:  # SIGKILLed just now: only a process stuck in the kernel could take longer than 5 s
        if not _reap(p, 5.0):
            name = p.args[0] if isinstance(p, subprocess.Popen) else p.name
            warnings.warn(f"{name} (pid {p.pid}) did not end after SIGKILL", RuntimeWarning, stacklevel=2)


def _reap(process: Process, seconds: float) -> bool:
    """Wait ``seconds`` at most for ``process`` to end, and reap it; False if it is still there."""
    if isinstance(process, subprocess.Popen):
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True
    process.join(seconds)
    if process.exitcode is None:
        return False
    process.close()  # its pipe and sentinel: a kernel session runs many launches
    return True


def wait_until(condition: Callable[[], bool], seconds: float, poll: float = 0.002) -> bool:
    """A clean-up's wait (Ctrl-C is held back there): until ``condition()`` holds, ``seconds`` at most.

    Never raises; True if the condition held."""
    deadline = time.monotonic() + seconds
    while not (held := condition()) and time.monotonic() < deadline:
        time.sleep(poll)
    return held


class InterruptGuard:
    """While active, Ctrl-C (SIGINT) is only recorded; ``check()`` raises it where that is safe.

    Code that starts and stops processes must never be cut short between two steps: a rank started
    but not yet recorded, or a clean-up abandoned half-way, would outlive the call. So the guard
    holds every interrupt back, the wait loop calls ``check()`` to turn one into ``KeyboardInterrupt``,
    and an interrupt that arrives during the clean-up is raised when the guard exits, after it.
    Outside the main thread (where no signal handler can be set) it does nothing.
    """

    def __init__(self) -> None:
        self._received = 0
        self._previous = None
        self._active = False

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._record)
            self._active = True
        return self

    def _record(self, signum, frame) -> None:
        self._received += 1

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if Ctrl-C came since the last check (and it is not ignored)."""
        if self._received and self._previous != signal.SIG_IGN:
            self._received = 0
            raise KeyboardInterrupt
        self._received = 0

    def __exit__(self, *exc_info) -> None:
        if self._active:
            signal.signal(signal.SIGINT, self._previous)
            self._active = False
        self.check()  # a Ctrl-C during the clean-up: delivered now that the clean-up is done


class Supervisor:
    """Start processes inside ``with Supervisor(stop) as supervisor:``, then ``supervisor.wait`` for them.

    Guaranteed: ``stop(succeeded)`` runs on every way out of the block (return, error, timeout,
    Ctrl-C), with ``succeeded`` False when the block raised: it is where the caller stops and reaps
    what it started (``stop_and_reap``); None where that is done after the block. Ctrl-C is raised
    only where ``wait`` checks for it, never half-way through starting a process or through ``stop``;
    one that arrives during ``stop`` is raised after it. Every ``wait`` ends by its deadline, or as
    soon after it as the ``done()`` call then running returns (Slurm's is a command with its own timeout).
    """

    def __init__(self, stop: Callable[[bool], None] | None = None) -> None:
        self._stop = stop
        self._interrupts = InterruptGuard()

    def __enter__(self) -> Supervisor:
        self._interrupts.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        try:
            if self._stop is not None:
                self._stop(exc_type is None)
        finally:
            self._interrupts.__exit__()

    def wait(self, done: Callable[[], bool], seconds: float, timed_out: Callable[[], Exception], *,
             wake_on: Callable[[], Sequence[Connection | int]] | None = None, poll: float = 0.05) -> None:
        """Return once ``done()`` is true; raise ``timed_out()`` if it is still false after ``seconds``.

        ``done`` is asked at once and after each pause; it may raise itself (a failure it saw).
        Before each pause Ctrl-C becomes ``KeyboardInterrupt``. A pause lasts ``poll`` s, less when
        one of ``wake_on()`` becomes ready (a pipe with data, a process's sentinel as it exits).
        """
        deadline = time.monotonic() + seconds
        while not done():
            self._interrupts.check()  # the one place Ctrl-C is raised
            left = deadline - time.monotonic()
            if left <= 0:
                raise timed_out()
            if wake_on is None:
                time.sleep(min(left, poll))
            else:
                wait(wake_on(), timeout=min(left, poll))
