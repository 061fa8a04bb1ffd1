"""Names of Python's os module that Linux has and macOS lacks are only called where their absence is handled: a
lesson run on a Mac must not stop at an AttributeError (lesson 13 once did, at os.sched_getaffinity)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINUX_ONLY = ("sched_getaffinity", "sched_setaffinity", "pidfd_open", "waitid")
# Code that runs on Linux alone, by its own check: a local Slurm cluster refuses every other system first
# (slurm.unavailable_reason)
LINUX_ONLY_CODE = {"dpedu/cluster/slurm.py"}


def unguarded(source: str) -> list[str]:
    """The Linux-only names ``source`` calls without asking whether this os module has them."""
    return [name for name in LINUX_ONLY
            if re.search(rf"\bos\.{name}\(", source) and not re.search(rf"hasattr\(os, [\"']{name}[\"']\)", source)]


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
    assert not bad, f"calls that stop on macOS (guard them with hasattr(os, NAME)): {bad}"


def test_the_rule_sees_an_unguarded_call_and_accepts_a_guarded_one():
    assert unguarded("usable = len(os.sched_getaffinity(0))") == ["sched_getaffinity"]
    assert unguarded('n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()') == []
    assert unguarded("os.cpu_count()") == []
