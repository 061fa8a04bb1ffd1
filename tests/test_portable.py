"""Names of Python's os and signal modules that Linux has and macOS lacks are only used where their absence is
handled: a lesson run on a Mac must not stop at an AttributeError (lesson 13 once did, at os.sched_getaffinity).
The names are those CI's macOS-like pass removes (.ci/as_on_macos/sitecustomize.py), which is checked here too:
a process started with it on PYTHONPATH meets macOS's os module, spawn as the default start method, and no /proc."""

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AS_ON_MACOS = ROOT / ".ci" / "as_on_macos"


def linux_only() -> dict[str, tuple[str, ...]]:
    """LINUX_ONLY of the macOS-like pass, read from its source (importing it would change this process)."""
    tree = ast.parse((AS_ON_MACOS / "sitecustomize.py").read_text())
    [value] = [node.value for node in tree.body if isinstance(node, ast.Assign)
               and [target.id for target in node.targets if isinstance(target, ast.Name)] == ["LINUX_ONLY"]]
    return ast.literal_eval(value)


LINUX_ONLY = [(module, name) for module, names in linux_only().items() for name in names]
# Code that runs on Linux alone, by its own check: a local Slurm cluster refuses every other system first
# (slurm.unavailable_reason)
LINUX_ONLY_CODE = {"dpedu/cluster/slurm.py",
                   ".ci/as_on_macos/sitecustomize.py"}  # and the emulation, which names them to remove them


def unguarded(source: str) -> list[str]:
    """The Linux-only names ``source`` calls without asking whether this os module has them."""
    return [name for module, name in LINUX_ONLY if re.search(rf"\b{module}\.{name}\b", source)
            and not re.search(rf"hasattr\({module}, [\"']{name}[\"']\)", source)]


def sources() -> list[tuple[str, str]]:
    """(where, code) for every module of dpedu, benchmark and CI script, and every code cell of the lessons."""
    found = [(str(path.relative_to(ROOT)), path.read_text())
             for folder in ("dpedu", "benchmarks", ".ci") for path in sorted((ROOT / folder).rglob("*.py"))]
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        found += [(f"{path.name}, cell {i}", "".join(cell["source"]))
                  for i, cell in enumerate(json.loads(path.read_text())["cells"]) if cell["cell_type"] == "code"]
    return found


def test_linux_only_calls_are_guarded_everywhere_a_mac_runs():
    bad = {where: names for where, code in sources() if where not in LINUX_ONLY_CODE and (names := unguarded(code))}
    assert not bad, f"calls that stop on macOS (guard them with hasattr(MODULE, NAME)): {bad}"


def test_the_rule_sees_an_unguarded_call_and_accepts_a_guarded_one():
    assert unguarded("usable = len(os.sched_getaffinity(0))") == ["sched_getaffinity"]
    assert unguarded('n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()') == []
    assert unguarded("os.cpu_count()") == []
    assert unguarded("signal.pidfd_send_signal(fd, signal.SIGKILL)") == ["pidfd_send_signal"]
    assert unguarded("os.waitid(os.P_PIDFD, fd, os.WEXITED)") == ["P_PIDFD", "waitid"]


def interpreters() -> list[str]:
    """This Python, and where it is here the oldest the course supports (CI's pass 3 runs on it): Python 3.10's
    pathlib reaches os.stat through a class that copied it, which the emulation must reach too."""
    found = [sys.executable, shutil.which("python3.10")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10.*/bin/python3.10")))[:1]
    runs = [path for path in dict.fromkeys(found) if path and subprocess.run([path, "-c", "pass"]).returncode == 0]
    return list(dict.fromkeys(os.path.realpath(path) for path in runs))


PROBE = """
import multiprocessing, os, pathlib, pickle, signal
print(hasattr(os, "sched_getaffinity"), hasattr(os, "waitid"), hasattr(signal, "pidfd_send_signal"))
print(multiprocessing.get_start_method(), pathlib.Path("/proc").exists(), os.path.exists("/proc/self/stat"))
try:
    open("/proc/self/stat")
except FileNotFoundError as error:
    print("no /proc:", error.filename)
print(pathlib.Path("/").is_dir(), pickle.loads(pickle.dumps(os.stat)) is os.stat,
      os.stat in os.supports_follow_symlinks)
"""


@pytest.mark.parametrize("python", interpreters())
def test_the_macos_like_pass_meets_macos_os_module_start_method_and_no_proc(python):
    environ = {**os.environ, "PYTHONPATH": str(AS_ON_MACOS)}
    seen = subprocess.run([python, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=60)
    assert seen.stdout.splitlines() == ["False False False", "spawn False False", "no /proc: /proc/self/stat",
                                        "True True True"], seen
