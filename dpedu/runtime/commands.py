"""Run several commands at once from a notebook (torchrun agents, mpirun), never leaving one behind; find
the programs pip installed (mpiexec) wherever it put them.

Used in lessons 03, 09 and 10.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path

from dpedu._validate import real
from dpedu.runtime.failures import leftover_processes
from dpedu.runtime.processes import Supervisor, has_exited, signal_group, stop_and_reap


@dataclass(frozen=True)
class Finished:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_together(commands: Sequence[Sequence[str]], *, timeout: float, cwd: str | None = None,
                 env: dict[str, str] | None = None,
                 start_when: Sequence[str | None] | None = None) -> list[Finished]:
    """Start every command at once and wait for all; return what each printed, in order.

    ``start_when`` holds the commands back: command i starts once the text ``start_when[i]`` has
    appeared in what the commands before it printed on stdout (``None``: at once, as without it), so that a cell
    can start a second torchrun agent after the first one has reached a given step (lesson 10); if
    those commands all end without printing it, ``RuntimeError`` says so at once.
    The commands' ``TMPDIR`` is a folder removed when they end, unless ``env`` sets it: what they leave
    there (torchrun's logs) goes with it.
    Each command runs in its own session, so stopping it also stops the processes it started, and
    those it started in sessions of their own (torchrun's workers) are found and stopped too.
    If any is still running, or not yet started, after ``timeout`` seconds, or on Ctrl-C or any error
    here, all of them are stopped and reaped before the exception propagates (``TimeoutError`` names
    them); a second Ctrl-C during that clean-up is raised after it.
    """
    if not commands or any(isinstance(c, str) or not c for c in commands):
        raise ValueError("commands must be a non-empty list of argument lists, e.g. [['torchrun', 'x.py']]")
    real("timeout", timeout, above=0)
    start_when = [None] * len(commands) if start_when is None else list(start_when)
    if len(start_when) != len(commands) or any(t is not None and (not isinstance(t, str) or not t)
                                               for t in start_when):
        raise ValueError(f"start_when must hold, for each of the {len(commands)} commands, a text to wait for "
                         f"or None, got {start_when!r}")
    processes: list[subprocess.Popen] = []

    def running() -> list[str]:
        return [" ".join(c) for c, p in zip(commands[:len(processes)], processes, strict=True) if not has_exited(p)]

    with tempfile.TemporaryDirectory(prefix="dpedu-run-") as logs, ExitStack() as files:
        # The commands' temporary folder is ``logs``, removed with it: torchrun and accelerate launch would
        # otherwise leave a torchelastic_* folder in the system's on every run.
        environment = {**os.environ, "TMPDIR": logs, **(env or {})}
        outputs = [tuple(files.enter_context(open(os.path.join(logs, f"{i}.{stream}"), "w+"))
                         for stream in ("out", "err")) for i in range(len(commands))]

        def printed_so_far() -> str:
            return "".join(Path(out.name).read_text() for out, _ in outputs[:len(processes)])

        def start_those_due() -> bool:
            """Start the next commands whose text has appeared; True once all are started and have exited."""
            while len(processes) < len(commands):
                awaited = start_when[len(processes)]
                if awaited is not None and awaited not in printed_so_far():
                    # nothing left that could still print it (read again: it may have come as they ended)
                    if processes and not running() and awaited not in printed_so_far():
                        raise RuntimeError(f"{' '.join(commands[len(processes)])} waited for {awaited!r}, which the "
                                           f"commands before it never printed; they have all ended")
                    return False
                out, err = outputs[len(processes)]
                processes.append(subprocess.Popen(list(commands[len(processes)]), cwd=cwd, env=environment,
                                                  stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                                  start_new_session=True))
            return not running()

        def timed_out() -> TimeoutError:
            waiting = [f"{' '.join(c)} (waiting for {t!r})" for c, t in
                       zip(commands[len(processes):], start_when[len(processes):], strict=True)]
            return TimeoutError(f"still running after timeout={timeout:g} s, stopped: {running()}"
                                + (f"; never started: {waiting}" if waiting else ""))

        # Stopped: every command's whole session and the sessions it started, whatever happens.
        with Supervisor(lambda succeeded: stop_with_their_sessions(processes)) as supervisor:
            supervisor.wait(start_those_due, timeout, timed_out)
        for out, err in outputs:
            out.seek(0)
            err.seek(0)
        return [Finished(list(c), p.returncode, out.read(), err.read())
                for c, p, (out, err) in zip(commands, processes, outputs, strict=True)]


def _command_line(pid: int) -> bytes | None:
    with suppress(OSError):  # gone, or no /proc
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return None


def stop_with_their_sessions(processes: list[subprocess.Popen]) -> None:
    """``stop_and_reap`` the commands, then SIGKILL what they started in sessions of their own, which
    signals to the commands' groups do not reach: torchrun starts each worker so, and a worker whose
    agent is stopped before it could stop it would live on. They are listed first, while their parents
    still name them (Linux; elsewhere only the commands' groups are stopped)."""
    started = {pid: _command_line(pid) for p in processes if not has_exited(p) for pid in leftover_processes(p.pid)}
    stop_and_reap(processes, grace=2.0)
    for pid, command in started.items():
        if command is not None and _command_line(pid) == command:  # still that process, not a new one
            signal_group(pid, signal.SIGKILL)


def installed_program(name: str) -> str:
    """The path of the program ``name`` that pip installed for this Python (``mpiexec`` from the ``mpich``
    wheel), wherever pip put it: next to the interpreter (a virtual environment), in the scripts folder of
    its installation or of ``pip install --user`` (``~/.local/bin``, which a hosted notebook's PATH often
    lacks), else on PATH. FileNotFoundError says what to install when there is none."""
    if not isinstance(name, str) or not name or os.sep in name:
        raise ValueError(f"name must be a program's name, such as 'mpiexec', got {name!r}")
    folders = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    user_scheme = sysconfig.get_preferred_scheme("user")
    folders.append(Path(sysconfig.get_path("scripts", user_scheme)))
    for folder in folders:
        if (found := shutil.which(name, path=str(folder))) is not None:
            return found
    if (found := shutil.which(name)) is not None:
        return found
    raise FileNotFoundError(f"{name} is not installed for {sys.executable} (looked in {', '.join(map(str, folders))} "
                            f"and on PATH): install the package that brings it (mpiexec: pip install mpich mpi4py)")
