"""How much of this machine a timing claim can count on, and how such a claim is judged.

A cell that asserts a speed (2 ranks are faster than one, a pipeline idles as its formula says) assumes
idle cores. A learner's laptop rarely has them (a browser, a video call, an indexer), a class server
shares its cores between learners, and some machines can never show such a claim: a CPU quota (a
JupyterHub pod), two CPUs that are hardware threads of one core (many 2-vCPU cloud machines), or fewer
cores than the claim needs. So a cell first finds what keeps this machine from showing a claim at all
(``machine_limit``), then measures how many times the work of one busy process ``processes`` busy
processes get done at once, now (``parallel_speedup``: close to 2 on an idle 2-core machine, about 0.8 to
1 with one core taken by another program). Each process is compared with its own speed a moment before, so
that a virtual machine's host, which can slow the machine's CPUs for a second at a time unseen by the machine,
does not make an idle machine read as a busy one.

``timing_claim`` then looks at the claim first: a claim that holds is asserted and counted as checked,
whatever the load. A claim that does not hold fails where the machine could show it, with a message
saying what was expected and what was seen; where it could not, the cell says which cause it found and
whether rerunning can help, and the lesson goes on. Every claim should also have a looser bound that no
plausible load can break, asserted with a plain ``assert`` beside it, so a regression cannot hide behind a
busy machine. Each judgement goes to the file ``DPEDU_TIMING_CLAIMS`` names, if set (CI's table of claims).

Used in lessons 04, 05, 08, 10, 12 and 13.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dpedu._validate import real, whole
from dpedu.runtime.commands import run_together

# Each process counts loop turns in the slots of a grid that all of them share: in every cycle, each process alone
# in a slot of its own, then all of them together. A process's speed together is compared with its own speed alone
# a slot or two before, not with a reading taken a second away: a virtual machine's host can slow its CPUs by half
# for a second or more at a time, unseen by the machine itself, which readings that far apart count as load. The
# grid starts a little after the last process has arrived (a file each in a shared folder, named with the time it
# arrived), so a slow interpreter start-up is not read as a busy machine; a process woken late for its slot was
# kept off a CPU, so its slot counts from when it should have begun. It prints a line per slot it counted in: the
# slot's index, its turns per second of the slot, and the share of the slot it spent on a CPU.
_SPIN = """\
import os, sys, time
folder, me, count, slot, cycles = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
open(os.path.join(folder, f"{me} {time.time()!r}"), "w").close()
deadline = time.time() + 20
while len(os.listdir(folder)) < count:
    if time.time() > deadline:
        sys.exit("the other measuring processes never started")
    time.sleep(0.001)
start = max(float(name.split()[1]) for name in os.listdir(folder)) + 0.1
for index in range(cycles * (count + 1)):
    if index % (count + 1) not in (me, count):
        continue
    begins = start + index * slot
    time.sleep(max(0.0, begins - time.time()))
    turns, cpu, ends = 0, time.process_time(), begins + 0.9 * slot
    while time.time() < ends:
        turns += 1
    window = time.time() - begins
    print(index, turns / window, (time.process_time() - cpu) / window)
"""


def _slots(count: int, slot: float, cycles: int) -> list[dict[int, tuple[float, float]]] | str:
    """For each of ``count`` processes counting on one grid of ``cycles`` cycles: slot index -> (turns per second,
    share of the slot on a CPU) of each slot it counted in; or why there are none."""
    with tempfile.TemporaryDirectory(prefix="dpedu-spin-") as folder:
        done = run_together([[sys.executable, "-c", _SPIN, folder, str(me), str(count), repr(slot), str(cycles)]
                             for me in range(count)], timeout=40 + cycles * (count + 1) * slot)
    if failed := [d for d in done if d.returncode != 0]:
        return f"a measuring process failed ({(failed[0].stderr.strip().splitlines() or ['no output'])[-1]})"
    slots = [{int(index): (float(rate), float(share))
              for index, rate, share in (line.split() for line in d.stdout.splitlines())} for d in done]
    if any(len(counted) != 2 * cycles for counted in slots):
        return "a measuring process failed (it did not print a line for each of its slots)"
    return slots


# A process's speed alone is read from a slot in which it was on a CPU for at least this share of the slot.
_LEAST_SHARE_ALONE = 0.1


def measure_speedup(processes: int = 2, slot: float = 0.1, cycles: int = 4) -> tuple[float | None, str | None]:
    """(speed-up, why not): how many times one busy process's work ``processes`` busy processes get done at
    once, or None and why it could not be measured: a measuring process failed, or in no cycle was each of them
    on a CPU for a tenth of its slot alone (its speed alone, per second on a CPU, is the measure of the rest).

    In each of ``cycles`` cycles, each process counts alone for ``slot`` seconds, then all of them together. A
    cycle's work together is the sum, over the processes, of each one's speed together over its own speed alone
    per second on a CPU (no more than 1 each: a host that sped up between the two slots is not more cores), but
    no more than ``processes`` times the smallest share of the slot that any of them spent on a CPU: Linux can
    leave one of them sharing a core with another program for the whole slot while the others run free (1 + 1/2
    on two cores with one kept busy), and ranks that meet at every step go at that one's pace. The speed-up is
    the median of the cycles, so that a moment's change of the host's speed between two slots is outvoted."""
    whole("processes", processes, minimum=2, maximum=64)
    real("slot", slot, above=0, at_most=1)
    whole("cycles", cycles, minimum=1, maximum=20)
    slots = _slots(processes, slot, cycles)
    if isinstance(slots, str):
        return None, slots
    readings = []
    for cycle in range(cycles):
        first = cycle * (processes + 1)
        alone = [slots[me][first + me] for me in range(processes)]
        together = [slots[me][first + processes] for me in range(processes)]
        # no speed alone to compare with: kept off a CPU, or woken so late in its slot that it counted a few turns,
        # or none, in a moment on a CPU (a speed from that is noise; from none, a division by zero)
        if any(share < _LEAST_SHARE_ALONE for _, share in alone):
            continue
        work = sum(min(1.0, rate / (alone_rate / alone_share))
                   for (rate, _), (alone_rate, alone_share) in zip(together, alone, strict=True))
        readings.append(min(work, processes * min(share for _, share in together)))
    if not readings:
        return None, ("the processes that measure how busy the cores are were kept off the CPUs when each should have "
                      f"counted alone (less than {_LEAST_SHARE_ALONE:.0%} of the slot on a CPU, in every cycle)")
    return statistics.median(readings), None


def parallel_speedup(processes: int = 2, slot: float = 0.1, cycles: int = 4) -> float | None:
    """How many times one busy process's work ``processes`` busy processes get done at once, measured now:
    about ``processes`` where that many cores are idle, less where other programs use them; None where it
    could not be measured (``measure_speedup`` says why)."""
    return measure_speedup(processes, slot, cycles)[0]


def cpu_quota(cgroups: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup") -> float | None:
    """The CPUs this process's cgroup may use: the smallest quota on the way from its own cgroup up to the root
    (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); None if unlimited or unknown (not Linux)."""
    try:
        lines = Path(own).read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            roots, limit = [Path(cgroups)], _v2_quota
        elif "cpu" in controllers.split(","):
            roots, limit = [Path(cgroups, "cpu"), Path(cgroups, "cpu,cpuacct"), Path(cgroups, controllers)], _v1_quota
        else:
            continue
        parts = [part for part in path.split("/") if part]
        for root in roots:
            for depth in range(len(parts), -1, -1):  # own cgroup first, then each parent (in a container: "/")
                if (quota := limit(root.joinpath(*parts[:depth]))) is not None:
                    quotas.append(quota)
    return min(quotas, default=None)


def _v2_quota(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1_quota(folder: Path) -> float | None:
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        return None if quota < 0 else quota / int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None


def usable_cpus() -> set[int]:
    """The CPUs this process may run on (its affinity; every CPU where the system does not say)."""
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))


def physical_cores(cpus: set[int], topology: str = "/sys/devices/system/cpu") -> int:
    """How many physical cores ``cpus`` are: hardware threads of one core count once (Linux's topology
    files; ``len(cpus)`` where they are missing)."""
    siblings = set()
    for cpu in cpus:
        try:
            siblings.add(Path(topology, f"cpu{cpu}", "topology", "thread_siblings_list").read_text().strip())
        except OSError:
            return len(cpus)
    return len(siblings)


def machine_limit(processes: int = 2) -> str | None:
    """Why this machine can never give ``processes`` busy processes a core each, in words; None if it can.
    Rerunning cannot help with any of these."""
    cpus = usable_cpus()
    if len(cpus) < processes:
        return f"this Python may use {len(cpus)} CPU(s) (its CPU affinity), fewer than the {processes} it needs"
    quota = cpu_quota()
    if quota is not None and quota < processes:
        return (f"this machine's container may use {quota:g} CPUs (its cgroup's CPU quota), fewer than the "
                f"{processes} it needs")
    cores = physical_cores(cpus)
    if cores < processes:
        return (f"this machine's {len(cpus)} CPUs are hardware threads of {cores} physical core(s), which "
                f"{processes} busy processes must share")
    return None


@dataclass
class Machine:
    """What ``measured_now`` and ``watched`` found: a limit that keeps this machine from ever showing the claim,
    or the smaller of the speed-ups measured before and after the timed work (None until one is measured)."""
    processes: int
    speedup: float | None = None
    limit: str | None = None  # see machine_limit
    unmeasured: str | None = None  # why a measurement gave no speed-up

    def can_show(self, needs: float) -> bool:
        return self.limit is None and self.unmeasured is None and self.speedup is not None and self.speedup >= needs

    def measure(self) -> None:
        """Measure the speed-up now and keep the smaller; nothing on a machine with a limit, which never shows it."""
        if self.limit is not None:
            return
        speedup, why_not = measure_speedup(self.processes)
        if speedup is None:
            self.unmeasured = why_not
        else:
            self.speedup = speedup if self.speedup is None else min(self.speedup, speedup)

    def why_not(self, needs: float, rerun: str = "this cell") -> tuple[str, str]:
        """(cause, sentence) of why a claim needing ``needs`` cannot be shown here, the sentence saying to rerun
        ``rerun`` where that can help; cause is one of "limit", "not measured", "busy now"."""
        if self.limit is not None:
            return "limit", f"It cannot be shown on this machine: {self.limit}. Rerunning will not help here."
        if self.unmeasured is not None or self.speedup is None:
            return "not measured", (f"How busy the cores are could not be measured: {self.unmeasured}. "
                                    f"Rerun {rerun} when the machine is idle.")
        return "busy now", (f"It needs {self.processes} idle cores ({self.processes} busy processes getting "
                            f"{needs:.1f}x the work of one done at once); just now they got {self.speedup:.2f}x, so "
                            f"other programs are using the cores. Rerun {rerun} when the machine is idle.")


def measured_now(processes: int = 2) -> Machine:
    """Find this machine's limit; where there is none, measure ``parallel_speedup(processes)`` now. For timed
    work that spans cells: call it before the work and ``machine.measure()`` after it (the smaller is kept)."""
    machine = Machine(processes, limit=machine_limit(processes))
    machine.measure()
    return machine


@contextmanager
def watched(processes: int = 2) -> Iterator[Machine]:
    """``measured_now`` before the ``with`` block and measured again after it. Load present before or after the
    block shows; a burst that comes and goes within it does not (a claim it breaks fails, with a message that
    says to rerun)."""
    machine = measured_now(processes)
    yield machine
    machine.measure()


def timing_claim(holds: bool, claim: str, *, expected: str, seen: str, machine: Machine,
                 needs: float = 1.5, rerun: str = "this cell") -> bool:
    """Judge a claim about time: one that holds is asserted whatever the load; one that does not fails where
    the machine could show it (``needs``: the speed-up ``machine.processes`` busy processes must have had,
    before and after the timed work) and is otherwise reported with the cause ``machine`` found. ``rerun``: what
    to run again to time the work anew, where it began in an earlier cell.

    Returns True when the claim was checked, False when it was not; an AssertionError says what was
    expected, what was seen and what to do."""
    if holds:
        shown = machine.can_show(needs)
        _record(claim, "checked" if shown else "checked under load", None if shown else machine.why_not(needs)[0],
                machine)
        return True
    if not machine.can_show(needs):
        cause, sentence = machine.why_not(needs, rerun)
        _record(claim, "not checked", cause, machine)
        print(f"Not checked on this machine: {claim} (expected {expected}, seen {seen}). {sentence}")
        return False
    _record(claim, "failed", None, machine)
    raise AssertionError(f"{claim}: expected {expected}, seen {seen}. The cores were free before and after "
                         f"({machine.processes} busy processes got {machine.speedup:.2f}x the work of one); if "
                         f"another program ran meanwhile, rerun {rerun} when the machine is idle.")


def _record(claim: str, verdict: str, cause: str | None, machine: Machine) -> None:
    """One JSON line per judgement, in the file DPEDU_TIMING_CLAIMS names (CI's table of timing claims)."""
    if not (path := os.environ.get("DPEDU_TIMING_CLAIMS")):
        return
    entry = {"pass": os.environ.get("DPEDU_CI_PASS", ""), "cell": _cell_fingerprint(), "claim": claim,
             "verdict": verdict, "cause": cause, "speedup": machine.speedup}
    with open(path, "a") as file:
        file.write(json.dumps(entry) + "\n")


def cell_fingerprint(source: str) -> str:
    """What the record calls a notebook cell: the start of the hash of its source."""
    return hashlib.sha1(source.encode()).hexdigest()[:12]


def _cell_fingerprint() -> str | None:
    """The fingerprint of the notebook cell running now (the code of the kernel's execute request, which nbval
    keeps out of the input history), None outside a notebook."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    try:
        return cell_fingerprint(shell.kernel.get_parent()["content"]["code"])
    except (AttributeError, KeyError, TypeError):
        return None
