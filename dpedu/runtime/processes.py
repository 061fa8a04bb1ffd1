"""Starting and stopping processes safely: Ctrl-C never strands a half-started one, and stopping a
process also stops every process it started, without touching anyone else's.

Each process dpedu starts leads its own process group (a rank calls ``setpgid``; a command runs in a
new session), so one signal to the group also reaches its children. The leader itself is signalled
too: a rank that is still starting (importing torch under spawn) has no group of its own yet. Both
are signalled before the leader is reaped: an unreaped leader keeps its pid, so what is signalled
can only be ours, never a newcomer's that was given a freed pid.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LiveProcess:
    """A process that is running (not a zombie), as ``/proc/PID/stat`` shows it."""

    pid: int
    parent: int
    session: int
    name: str  # the command's name, cut to 15 characters by the kernel


def live_processes() -> list[LiveProcess]:
    """Every live process on this machine, read from /proc (Linux; elsewhere an empty list)."""
    proc = Path("/proc")
    found = []
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # "pid (name) state parent group session ...": the name may itself hold spaces and parentheses
        name, rest = stat.split("(", 1)[1].rsplit(")", 1)
        state, parent, _, session = rest.split()[:4]
        if state != "Z":
            found.append(LiveProcess(int(entry.name), int(parent), int(session), name))
    return found


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


def stop_groups(leaders: Mapping[int, Callable[[], bool]], exit_grace: float = 0.0, grace: float = 1.0) -> None:
    """Give the leaders ``exit_grace`` s to end, then SIGTERM, and ``grace`` s later SIGKILL, each group.

    ``leaders`` maps each leader's pid to a check "has it exited?" that must not reap it. Nothing
    is reaped here; the caller reaps the leaders afterwards. SIGKILL goes to every group whether or
    not its leader has exited, since a leader's children may outlive it.
    """
    _wait_until(lambda: all(exited() for exited in leaders.values()), exit_grace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, exited in leaders.items():
            signal_group(pid, sig, leader_exited=exited())
        _wait_until(lambda: all(exited() for exited in leaders.values()), grace)


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)


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
