"""Run several commands at once from a notebook (torchrun agents, mpirun), never leaving one behind."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from dpedu._validate import real
from dpedu.runtime.processes import InterruptGuard, stop_groups


@dataclass(frozen=True)
class Finished:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_together(commands: Sequence[Sequence[str]], *, timeout: float, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> list[Finished]:
    """Start every command at once and wait for all; return what each printed, in order.

    Each command runs in its own session, so stopping it also stops the processes it started.
    If any is still running after ``timeout`` seconds, or on Ctrl-C or any error here, all of
    them are stopped and reaped before the exception propagates (``TimeoutError`` names them); a
    second Ctrl-C during that clean-up is raised after it.
    """
    if not commands or any(isinstance(c, str) or not c for c in commands):
        raise ValueError("commands must be a non-empty list of argument lists, e.g. [['torchrun', 'x.py']]")
    real("timeout", timeout, above=0)
    environment = {**os.environ, **(env or {})}
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="dpedu-run-") as logs, InterruptGuard() as interrupts:
        files = [(open(os.path.join(logs, f"{i}.out"), "w+"), open(os.path.join(logs, f"{i}.err"), "w+"))
                 for i in range(len(commands))]
        try:
            for command, (out, err) in zip(commands, files, strict=True):
                processes.append(subprocess.Popen(list(command), cwd=cwd, env=environment, stdout=out, stderr=err,
                                                  stdin=subprocess.DEVNULL, start_new_session=True))
            deadline = time.monotonic() + timeout
            while running := [" ".join(c) for c, p in zip(commands, processes, strict=True) if not _has_exited(p)]:
                interrupts.check()  # Ctrl-C is raised here, never in the middle of starting or stopping
                if time.monotonic() > deadline:
                    raise TimeoutError(f"still running after timeout={timeout:g} s, stopped: {running}")
                time.sleep(0.05)
        finally:  # every command's whole session (torchrun's workers too), then reap
            stop_groups({p.pid: partial(_has_exited, p) for p in processes}, grace=2.0)
            for p in processes:
                try:
                    p.wait(5.0)  # SIGKILLed just now: only a process stuck in the kernel could take longer
                except subprocess.TimeoutExpired:
                    warnings.warn(f"run_together: {p.args[0]} (pid {p.pid}) did not end after SIGKILL",
                                  RuntimeWarning, stacklevel=2)
            for out, err in files:
                out.seek(0)
                err.seek(0)
        results = [Finished(list(c), p.returncode, out.read(), err.read())
                   for c, p, (out, err) in zip(commands, processes, files, strict=True)]
        for out, err in files:
            out.close()
            err.close()
    return results


def _has_exited(process: subprocess.Popen) -> bool:
    """Has the command ended? Asked without reaping it where Python has waitid (not macOS before 3.13)."""
    if hasattr(os, "waitid"):
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    return process.poll() is not None  # reaps: there, a finished command's empty group could be reused
