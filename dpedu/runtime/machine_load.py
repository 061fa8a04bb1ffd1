"""How much of this machine a timing claim can count on right now, and how such a claim is judged.

A cell that asserts a speed (2 ranks are faster than one, a pipeline idles as its formula says) assumes
idle cores. A learner's laptop rarely has them (a browser, a video call, an indexer), and a class server
shares its cores between learners. So such a cell measures the machine around its timed work: how many
times the work of one busy process ``processes`` busy processes get done at once, now (``parallel_speedup``;
close to 2 on an idle 2-core machine, close to 1.3 with one core taken by another program; processes that
cannot even begin counting together count as a busy machine). Then
``timing_claim`` asserts the claim where the machine could show it, with a message saying what was
expected, what was seen and what to do; where it could not, it says so in plain words and the lesson
goes on.

Used in lessons 04, 05, 08, 12 and 13.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dpedu._validate import real, whole
from dpedu.runtime.commands import run_together

# Each process waits for a common start, then counts loop turns for the window: startup skew is not counted.
_SPIN = """\
import sys, time
start, seconds = float(sys.argv[1]), float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
turns, woke, begun = 0, time.time(), time.perf_counter()
while time.perf_counter() - begun < seconds:
    turns += 1
print(turns / (time.perf_counter() - begun), woke)
"""
LATE_S = 0.03  # a process that begins counting later than this after the others was kept waiting for a core


def parallel_speedup(processes: int = 2, seconds: float = 0.2) -> float:
    """How many times one busy process's work ``processes`` busy processes get done at once, measured now:
    about ``processes`` where that many cores are idle, less where other programs use them."""
    whole("processes", processes, minimum=2, maximum=64)
    real("seconds", seconds, above=0, at_most=5)

    def rates(count: int) -> list[tuple[float, float]]:  # (turns per second, when counting began)
        start = time.time() + 0.15  # every process started before the window opens
        done = run_together([[sys.executable, "-c", _SPIN, repr(start), repr(seconds)]] * count,
                            timeout=30 + seconds)
        return [tuple(map(float, d.stdout.split())) for d in done]

    alone = rates(1)[0][0]
    together = rates(processes)
    began = [woke for _, woke in together]
    if max(began) - min(began) > LATE_S:  # their windows did not overlap: the speed-up would read too high
        return 1.0
    return sum(rate for rate, _ in together) / alone


@dataclass
class Machine:
    """What ``watched`` saw: the smaller of the speed-ups measured before and after the timed work."""
    processes: int
    speedup: float = float("inf")

    def can_show(self, needs: float) -> bool:
        return self.speedup >= needs


@contextmanager
def watched(processes: int = 2) -> Iterator[Machine]:
    """Measure ``parallel_speedup(processes)`` before and after the ``with`` block: load that came or went
    during it shows in one of the two. Fewer usable cores than ``processes`` counts as a busy machine."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    machine = Machine(processes, parallel_speedup(processes) if usable >= processes else 1.0)
    yield machine
    if usable >= processes:
        machine.speedup = min(machine.speedup, parallel_speedup(processes))


def timing_claim(holds: bool, claim: str, *, expected: str, seen: str, machine: Machine,
                 needs: float = 1.5) -> bool:
    """Assert a claim about time on a machine that could show it; elsewhere say why it is not checked.

    ``needs``: the speed-up ``machine.processes`` busy processes must have had (before and after the timed
    work) for the claim to be measurable. Returns True when the claim was asserted, False when the machine
    was too busy; an AssertionError says what was expected, what was seen and what to do."""
    if not machine.can_show(needs):
        if record := os.environ.get("DPEDU_UNCHECKED_CLAIMS"):  # a file benchmarks/busy_machine.py counts
            with open(record, "a") as file:
                file.write(f"{claim} ({machine.speedup:.2f}x)\n")
        print(f"Not checked on this machine just now: {claim}. That needs {machine.processes} idle cores "
              f"({machine.processes} busy processes getting {needs:.1f}x the work of one done at once); this machine "
              f"gave {machine.speedup:.2f}x, so other programs are using its cores. Rerun this cell when the "
              f"machine is idle (where its cores are hardware threads of one physical core, as on many cloud "
              f"machines, rerunning will not help).")
        return False
    assert holds, (f"{claim}: expected {expected}, seen {seen}. The cores were free before and after "
                   f"({machine.processes} busy processes got {machine.speedup:.2f}x the work of one); if another "
                   f"program ran meanwhile, rerun this cell when the machine is idle.")
    return True
