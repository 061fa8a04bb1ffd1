"""Starting and stopping processes safely: Ctrl-C never strands a half-started one, and stopping a
process also stops every process it started, without touching anyone else's.

Each process dpedu starts leads its own process group (a rank calls ``setpgid``; a command runs in a
new session), so one signal to the group also reaches its children. Groups are signalled before
their leader is reaped: an unreaped leader keeps its pid, so the group signalled can only be ours,
never a newcomer's that was given a freed pid.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager


def signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group led by ``pid``; an empty group is already stopped."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):  # no members left (macOS says EPERM for zombies)
        pass


def stop_groups(leaders: Mapping[int, Callable[[], bool]], exit_grace: float = 0.0, grace: float = 1.0) -> None:
    """Give the leaders ``exit_grace`` s to end, then SIGTERM, and ``grace`` s later SIGKILL, each group.

    ``leaders`` maps each leader's pid to a check "has it exited?" that must not reap it. Nothing
    is reaped here; the caller reaps the leaders afterwards.
    """
    _wait_until(lambda: all(exited() for exited in leaders.values()), exit_grace)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in leaders:
            signal_group(pid, sig)
        _wait_until(lambda: all(exited() for exited in leaders.values()), grace)


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.002)


@contextmanager
def interrupts_deferred():
    """Hold back SIGINT inside the block and deliver it at the end, so the block runs whole."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(frame))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received and callable(previous):
        previous(signal.SIGINT, received[0])  # Python's default handler raises KeyboardInterrupt
    elif received and previous != signal.SIG_IGN:
        raise KeyboardInterrupt
