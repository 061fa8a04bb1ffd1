"""Run a circulating snippet as a plain script, the way a learner would: ``python snippet.py``, no launcher.

Used by the appendix notebook ("the circulating code, run as written"). ``run_script`` writes the
snippet's text to a file in a temporary folder and runs it with this kernel's Python. A snippet that
waits forever (a lone rank in ``init_process_group``) is stopped by a watchdog inside the script's own
process — Python's ``faulthandler``, which prints every thread's stack and exits — so the outcome says
where it was waiting. Whatever happens, the process and everything it started are stopped and reaped
before ``run_script`` returns (``dpedu.runtime.commands.run_together``, with a deadline of its own).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dpedu._validate import real
from dpedu.cluster.troubleshooting import readable
from dpedu.runtime.commands import run_together

SNIPPET = "snippet.py"  # the name the script runs under, as its tracebacks show it
# Imports torch.distributed, arms the watchdog, then runs the file as `python snippet.py` would: as __main__,
# with its folder (the working directory) first on sys.path and its name as sys.argv[0]. The import comes first
# so that the watchdog's time is the snippet's own: importing torch takes seconds on a busy machine (more with
# the CUDA build), and a watchdog running meanwhile would stop a snippet at its `import torch`.
_WATCHED = ("import faulthandler, runpy, sys; import torch.distributed; "
            "faulthandler.dump_traceback_later(float(sys.argv[2]), exit=True); "
            "sys.argv = sys.argv[1:2]; runpy.run_path(sys.argv[0], run_name='__main__')")
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')
_GRACE = 30.0  # the outer deadline's margin over the watchdog: starting Python and importing torch


@dataclass(frozen=True)
class ScriptOutcome:
    """How a script ended: ``"returned"`` (exit code 0), ``"raised"`` (any other exit; after an uncaught
    exception ``error`` is its last line) or ``"hung"`` (stopped by the watchdog at ``timeout``:
    ``waiting`` says where)."""

    ending: str
    seconds: float
    returncode: int
    error: str  # the exception's last line, without torch's C++ source locations, or ""
    waiting: str  # for a hang: "in FUNCTION, called at snippet.py line N", or ""
    stdout: str
    stderr: str


def run_script(source: str, *, timeout: float, env: dict[str, str] | None = None) -> ScriptOutcome:
    """Run ``source`` as a plain script named ``snippet.py``; stop it after ``timeout`` seconds; say how it ended.

    ``env`` adds to (or overrides) this process's environment; a value of ``None`` in it is not allowed,
    leave a variable out to keep it. Tracebacks come as plain text: ``PYTHON_COLORS=0``, since Python 3.13
    colours them where the environment forces colour, as a Jupyter kernel's does. The script is reaped
    before this returns, and so is everything it started; if even the watchdog fails, ``run_together``'s
    ``TimeoutError`` is raised after the clean-up.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError("source must be the non-empty text of a Python script")
    real("timeout", timeout, above=0)
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise TypeError("env must map variable names to string values")
    with tempfile.TemporaryDirectory(prefix="dpedu-snippet-") as folder:
        path = Path(folder) / SNIPPET
        path.write_text(source)
        start = time.perf_counter()
        (run,) = run_together([[sys.executable, "-c", _WATCHED, str(path), repr(float(timeout))]],
                              timeout=timeout + _GRACE, cwd=folder, env={"PYTHON_COLORS": "0", **(env or {})})
        seconds = time.perf_counter() - start
    stderr = run.stderr.replace(str(path), SNIPPET).replace(folder, ".")
    if run.returncode == 0:
        return ScriptOutcome("returned", seconds, 0, "", "", run.stdout, stderr)
    if run.returncode == 1 and (stderr.startswith("Timeout (") or "\nTimeout (" in stderr):  # faulthandler exits 1
        return ScriptOutcome("hung", seconds, run.returncode, "", waiting_place(stderr), run.stdout, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    return ScriptOutcome("raised", seconds, run.returncode, readable(lines[-1]) if lines else "", "",
                         run.stdout, stderr)


def waiting_place(stack: str) -> str:
    """Where a stack that ``faulthandler`` printed (innermost call first) left the snippet: the public
    function it was in (names starting with ``_`` and decorators' ``wrapper`` are skipped), and the
    snippet's line that called it."""
    frames = [m.groupdict() for m in _FRAME.finditer(stack)]
    for index, frame in enumerate(frames):
        if frame["file"].endswith(SNIPPET):
            inner = [f["function"] for f in frames[:index] if not f["function"].startswith(("_", "<"))
                     and f["function"] != "wrapper"]
            where = f"in {inner[-1]}, " if inner else ""
            return f"{where}called at {SNIPPET} line {frame['line']}"
    return ""
