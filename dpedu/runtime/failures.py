"""When ranks go wrong: which rank failed first, and where stuck ranks were waiting.

One failing rank makes its peers fail too ("connection closed by peer"), so the error worth showing
is the *first* one; a hang has no error at all, so the useful answer is where each rank was. This
module turns what ``dpedu.launch`` sees of its ranks (their reports, their exit codes, a stack each
dumps on request) into those two answers: ``RankFailedError`` and ``LaunchTimeoutError``.

Used by every ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12); ``leftover_processes`` is asserted empty in
lessons 00, 09, 10 and 11.
"""

from __future__ import annotations

import os
import re
import signal
import time
from contextlib import suppress
from multiprocessing.process import BaseProcess
from pathlib import Path

import torch

from dpedu.runtime import warm_ranks
from dpedu.runtime.processes import has_exited, live_processes, signal_group


class RankFailedError(RuntimeError):
    """A rank raised or died. ``rank`` names it; ``remote_traceback`` is its own traceback; ``signal`` is
    the name of the signal that killed it ("SIGSEGV", ...), or None when it raised or exited."""

    def __init__(self, rank: int, summary: str, remote_traceback: str = "", context: str = "",
                 signal: str | None = None):
        self.rank = rank
        self.summary = summary
        self.remote_traceback = remote_traceback
        self.context = context
        self.signal = signal
        message = f"rank {rank} failed: {summary}" + (f"\n{context}" if context else "")
        if remote_traceback:
            message += f"\n\n--- traceback in rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.rank, self.summary, self.remote_traceback, self.context, self.signal)


class LaunchTimeoutError(TimeoutError):
    """Some ranks did not finish within ``timeout`` of every rank's start (or, with ``starting``, did not
    start within the start-up limit); ``unfinished`` lists them, ``where`` where each was."""

    def __init__(self, unfinished: list[int], timeout: float, where: dict[int, str], finished: list[int],
                 starting: bool = False):
        self.unfinished, self.where, self.finished, self.starting = unfinished, where, finished, starting
        if starting:
            lines = [f"rank(s) {unfinished} did not start within {timeout:g} s and were stopped: starting is "
                     "importing torch and what the function needs, then joining the process group. The machine "
                     "may be overloaded, or a rank may be waiting for peers that never came."]
        else:
            lines = [f"rank(s) {unfinished} did not finish within timeout={timeout:g} s and were stopped."]
        lines += [f"  rank {rank} was {where[rank]}" for rank in unfinished if rank in where]
        if finished:
            lines.append(f"  rank(s) {finished} had already finished.")
        if not starting:
            lines.append("A rank in a collective that its peers never join (or join in another order) waits for "
                         "the process group's timeout; launch stops it at its own deadline, a little earlier.")
        super().__init__("\n".join(lines))


def first_failure(errors: list[tuple[float, int, tuple[str, str]]], silent: list[int],
                  processes: list[BaseProcess], finished: list[int]) -> RankFailedError:
    """Tell the failure that came first from those it caused.

    ``errors`` holds (time, rank, (summary, traceback)) of the ranks that reported one; ``silent``
    the ranks that have not reported. A rank that exited without a report (killed, crashed) goes
    first: its death closed the connections its peers then failed on. Otherwise the earliest report
    is the cause. ``finished`` ranks had returned: their peers' failure is then likely theirs.
    """
    for rank in sorted(silent):
        if has_exited(processes[rank]):
            return died(processes[rank], rank)
    _, rank, (summary, remote_traceback) = min(errors)
    context = ""
    if finished:  # the classic cause of "connection closed by peer": the peers had already left
        context = (f"rank(s) {sorted(finished)} had already finished and left the process group while rank {rank} "
                   "was still running: every rank must make the same collective calls, in the same order.")
    return RankFailedError(rank, summary, remote_traceback, context)


def died(process: BaseProcess, rank: int) -> RankFailedError:
    """The error for a rank that ended without reporting; its children are stopped first."""
    signal_group(process.pid, signal.SIGKILL, leader_exited=True)  # its children; the group is still its own
    process.join(1.0)
    code = process.exitcode
    killed_by = signal.Signals(-code).name if code is not None and code < 0 else None
    how = f"signal {killed_by}" if killed_by else f"exit code {code}"
    hint = ""
    if code == 1:  # the usual cause outside a notebook: a script whose ranks re-run its top level
        hint = ("if it was started by spawn or forkserver from a script, guard the script's top level with "
                "`if __name__ == \"__main__\":` (the rank's own error went to the terminal)")
    return RankFailedError(rank, f"the process ended ({how}) without returning a result", "", hint, killed_by)


def where_stuck(processes: list[BaseProcess], ranks: list[int], logdir: str) -> dict[int, str]:
    """Ask each of ``ranks`` to dump its Python stack (SIGUSR1), and say where each one was."""
    if not hasattr(signal, "SIGUSR1"):
        return {}
    for rank in ranks:
        if not has_exited(processes[rank]):
            os.kill(processes[rank].pid, signal.SIGUSR1)  # unreaped, so the pid is still this rank's
    time.sleep(0.2)  # the dump is written by the signal handler, at once
    return {rank: _where(Path(logdir, f"rank{rank}.stack")) for rank in ranks}


def _where(stack_file: Path) -> str:
    """Where a rank's main thread was, from its dump: e.g. "in barrier, called at train line 3"."""
    text = stack_file.read_text(errors="replace") if stack_file.exists() else ""
    main = next((block for block in text.split("\n\n") if " in run_work" in block), "")
    frames = re.findall(r'File "(.*)", line (\d+) in (\S+)', main.split(" in run_work")[0])  # innermost first
    if not frames:
        return "still starting (no Python stack yet)"
    dpedu_package = os.path.dirname(os.path.dirname(__file__))  # the lesson's own call, not dpedu's inside
    libraries = (os.path.dirname(torch.__file__), os.path.dirname(os.__file__), dpedu_package)
    ours = next(((line, name) for file, line, name in frames if not file.startswith(libraries)), None)
    innermost = frames[0][2]
    if ours is None:
        return f"in {innermost}"
    at = f"{ours[1]} line {ours[0]}"
    return f"at {at}" if innermost == ours[1] else f"in {innermost}, called at {at}"


# multiprocessing's shared helpers: one of each per parent process, living as long as it does by
# design. They are not ranks; what *they* start (a forkserver's ranks) is.
_HELPERS = (b"resource_tracker", b"multiprocessing.forkserver")


def leftover_processes(pid: int | None = None) -> list[int]:
    """Live processes started by ``pid`` (default: this one), and by those, at any depth.

    After any launch, whatever happened, there should be none: multiprocessing's resource tracker
    and forkserver are left out (one each per kernel, by design), not what a forkserver starts, and so
    are this process's idle warm ranks (``dpedu.runtime.warm_ranks``), not what they start.
    Reads /proc (Linux); elsewhere only direct children are seen (``multiprocessing.active_children``).
    """
    root = os.getpid() if pid is None else pid
    kept = warm_ranks.idle_pids() if root == os.getpid() else set()
    if not Path("/proc").exists():
        import multiprocessing

        return [p.pid for p in multiprocessing.active_children() if p.pid not in kept] if root == os.getpid() else []
    table = []
    for process in live_processes():
        with suppress(OSError):  # gone meanwhile
            table.append((process.pid, process.parent, Path(f"/proc/{process.pid}/cmdline").read_bytes()))
    found, parents = [], {root}
    while parents:
        children = [(p, command) for p, parent, command in table if parent in parents]
        found += [p for p, command in children if not any(helper in command for helper in _HELPERS) and p not in kept]
        parents = {p for p, _ in children}
    return found

