"""machine_load: a timing claim that holds is asserted whatever the load; one that does not fails where the
machine could show it, and is otherwise explained with the cause found (a limit of the machine, a measurement
that could not be taken, or load now), never with a number that was not measured. The verdicts are tested on
given machines (no timed test); one real measurement is only checked to be a number the verdicts can use."""

import json
import math
import sys
import types
from pathlib import Path

import pytest

from dpedu.runtime import machine_load
from dpedu.runtime.commands import Finished
from dpedu.runtime.machine_load import (
    Machine,
    cell_fingerprint,
    cpu_quota,
    machine_limit,
    measured_now,
    parallel_speedup,
    physical_cores,
    timing_claim,
    watched,
)


def test_an_idle_machine_asserts_the_claim_and_says_what_was_expected_and_seen(capsys):
    assert timing_claim(True, "2 ranks are faster", expected="1.1x to 2x", seen="1.5x", machine=Machine(2, 1.9))
    with pytest.raises(AssertionError) as failed:
        timing_claim(False, "2 ranks are faster", expected="1.1x to 2x", seen="1.02x", machine=Machine(2, 1.9))
    message = str(failed.value)
    assert message.startswith("2 ranks are faster: expected 1.1x to 2x, seen 1.02x.")
    assert "1.90x" in message and "rerun this cell when the machine is idle" in message
    assert capsys.readouterr().out == ""


def test_a_claim_that_holds_is_checked_on_a_busy_machine_too(capsys):
    assert timing_claim(True, "SyncBN is slower", expected="", seen="", machine=Machine(2, 1.2))
    assert timing_claim(True, "SyncBN is slower", expected="", seen="", machine=Machine(2, limit="one core"))
    assert capsys.readouterr().out == ""


def test_a_busy_machine_says_why_a_claim_that_failed_is_not_checked(capsys):
    # one core of two taken by another program: two busy processes get about 1.3x the work of one
    assert not timing_claim(False, "2 ranks are faster", expected="1.1x to 2x", seen="0.9x",
                            machine=Machine(2, 1.31), needs=1.6)
    said = capsys.readouterr().out
    assert said.startswith("Not checked on this machine: 2 ranks are faster (expected 1.1x to 2x, seen 0.9x).")
    assert "just now they got 1.31x" in said and "Rerun this cell when the machine is idle" in said
    assert not timing_claim(False, "claim", expected="", seen="", machine=Machine(2, 1.49))  # the default bar: 1.5
    with pytest.raises(AssertionError):
        timing_claim(False, "claim", expected="", seen="", machine=Machine(2, 1.5))


def test_a_machine_that_can_never_show_the_claim_says_so_and_is_not_measured(monkeypatch, capsys):
    monkeypatch.setattr(machine_load, "usable_cpus", lambda: {0})
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: pytest.fail("not measured"))
    with watched(2) as machine:
        pass
    assert machine.speedup is None and not machine.can_show(1.5)
    assert not timing_claim(False, "claim", expected="x", seen="y", machine=machine)
    said = capsys.readouterr().out
    assert "may use 1 CPU(s) (its CPU affinity)" in said and "Rerunning will not help" in said
    assert "busy" not in said and "x" in said  # the cause found, not load blamed


@pytest.mark.parametrize("quota, cores, cause", [
    (1.5, 2, "may use 1.5 CPUs (its cgroup's CPU quota)"),
    (None, 1, "2 CPUs are hardware threads of 1 physical core(s)"),
    (2.0, 2, None),
])
def test_a_quota_and_hardware_threads_are_limits_found_before_any_measurement(monkeypatch, quota, cores, cause):
    monkeypatch.setattr(machine_load, "usable_cpus", lambda: {0, 1})
    monkeypatch.setattr(machine_load, "cpu_quota", lambda: quota)
    monkeypatch.setattr(machine_load, "physical_cores", lambda cpus: cores)
    limit = machine_limit(2)
    assert (limit is None) if cause is None else (cause in limit)


def test_the_quota_and_the_topology_are_read_from_the_files_linux_keeps(tmp_path):
    own = tmp_path / "cgroup"
    own.write_text("0::/pod\n")  # cgroup v2, in a container: its own cgroup
    (tmp_path / "pod").mkdir()
    (tmp_path / "pod" / "cpu.max").write_text("150000 100000\n")
    assert cpu_quota(str(tmp_path), str(own)) == 1.5
    (tmp_path / "pod" / "cpu.max").write_text("max 100000\n")
    assert cpu_quota(str(tmp_path), str(own)) is None
    own.write_text("0::/user.slice/session.scope\n")  # the quota set on a parent
    (tmp_path / "user.slice" / "session.scope").mkdir(parents=True)
    (tmp_path / "user.slice" / "cpu.max").write_text("50000 100000\n")
    assert cpu_quota(str(tmp_path), str(own)) == 0.5
    own.write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")  # cgroup v1, the path of the cpu line
    (tmp_path / "cpu" / "docker" / "abc").mkdir(parents=True)
    (tmp_path / "cpu" / "docker" / "abc" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "docker" / "abc" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpu_quota(str(tmp_path), str(own)) == 1.0
    assert cpu_quota(str(tmp_path), str(tmp_path / "missing")) is None
    for cpu, siblings in ((0, "0-1"), (1, "0-1"), (2, "2-3"), (3, "2-3")):
        (tmp_path / f"cpu{cpu}" / "topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}" / "topology" / "thread_siblings_list").write_text(siblings + "\n")
    assert physical_cores({0, 1}, str(tmp_path)) == 1 and physical_cores({0, 1, 2, 3}, str(tmp_path)) == 2
    assert physical_cores({0, 7}, str(tmp_path)) == 2  # no topology file: every CPU counts


def test_watched_keeps_the_worse_of_before_and_after(monkeypatch):
    measured = iter([(1.95, None), (1.2, None)])
    monkeypatch.setattr(machine_load, "machine_limit", lambda processes: None)
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: next(measured))
    with watched() as machine:
        assert machine.speedup == 1.95
    assert machine.speedup == 1.2 and not machine.can_show(1.5)


def test_work_that_spans_cells_is_measured_before_and_after_and_keeps_the_worse(monkeypatch):
    measured = iter([(1.95, None), (1.9, None), (1.1, None)])
    monkeypatch.setattr(machine_load, "machine_limit", lambda processes: None)
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: next(measured))
    machine = measured_now()
    assert machine.speedup == 1.95
    machine.measure()
    assert machine.speedup == 1.9 and machine.can_show(1.5)
    machine.measure()
    assert machine.speedup == 1.1 and not machine.can_show(1.5)
    monkeypatch.setattr(machine_load, "machine_limit", lambda processes: "one core")
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: pytest.fail("a limited machine is measured"))
    assert measured_now().limit == "one core"


def test_a_measurement_not_taken_records_no_number_and_says_why(monkeypatch, capsys):
    measured = iter([(1.95, None), (None, "a measuring process failed (the other measuring processes never started)")])
    monkeypatch.setattr(machine_load, "machine_limit", lambda processes: None)
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: next(measured))
    with watched() as machine:
        pass
    assert not machine.can_show(1.5)
    assert not timing_claim(False, "claim", expected="", seen="", machine=machine)
    said = capsys.readouterr().out
    assert "could not be measured" in said and "never started" in said and "1.00x" not in said


def test_a_measurement_is_a_finite_positive_speed_up_and_bad_arguments_are_named():
    speedup, why_not = machine_load.measure_speedup(2, slot=0.02, cycles=1)
    assert speedup is None or (math.isfinite(speedup) and speedup > 0)
    assert why_not is None or "failed" not in why_not  # the counting script itself runs and prints what is read
    [counted] = machine_load._slots(1, 0.02, 2)  # one process: its slot alone and "all together" each cycle
    assert sorted(counted) == [0, 1, 2, 3]
    # a busy machine (CI's tests run two at a time) can keep it off a CPU for a whole slot: 0 then, never less
    assert all(rate >= 0 and 0 <= share <= 1.05 for rate, share in counted.values()), counted
    with pytest.raises(ValueError, match="processes must be an int from 2 to 64"):
        parallel_speedup(1)
    with pytest.raises(ValueError, match="slot must be a finite number > 0"):
        parallel_speedup(2, slot=0)
    with pytest.raises(ValueError, match="cycles must be an int from 1 to 20"):
        parallel_speedup(2, cycles=0)


def test_the_counting_script_prints_each_slot_and_its_share_on_a_cpu(monkeypatch, tmp_path, capsys):
    # on a clock where the process runs half of every millisecond, it must print, for each slot it counts in (its
    # own and the one of all together, here slots 0 and 1 of one cycle), a share of 0.5 (not its CPU seconds, not
    # a constant) and its turns per second of the slot (a turn a millisecond here)
    clock = {"now": 1.8e9}

    def tick() -> float:
        clock["now"] += 0.001
        return clock["now"]

    def sleep(seconds: float) -> None:
        clock["now"] += seconds

    def counted(late: float) -> list[tuple[float, float]]:
        """(rate, share) of each slot the script prints, woken ``late`` seconds after each slot begins."""
        fake_time = types.SimpleNamespace(time=tick, process_time=lambda: clock["now"] / 2,
                                          sleep=lambda seconds: sleep(seconds + late))
        monkeypatch.setitem(sys.modules, "time", fake_time)
        folder = tmp_path / str(late)
        folder.mkdir()
        monkeypatch.setattr(sys, "argv", ["-c", str(folder), "0", "1", "0.2", "1"])
        exec(machine_load._SPIN, {})
        lines = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert [index for index, _, _ in lines] == ["0", "1"]
        return [(float(rate), float(share)) for _, rate, share in lines]

    for rate, share in counted(late=0):
        assert share == pytest.approx(0.5, abs=0.01) and rate == pytest.approx(1000, rel=0.02)
    # woken half its 0.18 s of counting late, as when other programs hold the cores: it was kept off a CPU for
    # that time, so its slot counts from when it should have begun: half the rate and half the share
    for rate, share in counted(late=0.09):
        assert share == pytest.approx(0.25, abs=0.01) and rate == pytest.approx(500, rel=0.03)


def fake_measurements(monkeypatch, *cycles: list[tuple[str, str]]) -> None:
    """Two measuring processes print, for each of ``cycles``, their slot alone and their slot together, each
    given as "turns/s CPU-share" per process: [(first's alone, first's together), (second's ...)]; "" for a
    process that failed."""
    def run_together(commands, timeout):
        assert len(commands) == 2 and all(int(command[-1]) == len(cycles) for command in commands)
        done = []
        for me in range(2):
            if any("" in cycle[me] for cycle in cycles):
                done.append(Finished(list(commands[me]), 1, "", "the other measuring processes never started"))
                continue
            lines = [f"{cycle * 3 + slot} {reading}" for cycle, readings in enumerate(cycles)
                     for slot, reading in zip((me, 2), readings[me], strict=True)]
            done.append(Finished(list(commands[me]), 0, "\n".join(lines) + "\n", ""))
        return done

    monkeypatch.setattr(machine_load, "run_together", run_together)


IDLE = [("1000 1.0", "990 1.0"), ("1010 1.0", "1000 1.0")]  # each keeps its speed alone when both count: 1.98x


def test_a_host_that_slows_its_cpus_for_a_moment_is_outvoted_not_read_as_load(monkeypatch):
    # A cloud machine's host slowed both CPUs by half for a second (measured here: a process alone counted at 285
    # then 550 thousand turns a tenth of a second): the cycle whose slot together fell in the slow moment reads
    # about 1x, the others near 2x, and the median is the idle machine's. The sum of all the rates together over
    # one rate alone taken a second away, as measured before, read this as a busy machine.
    slow = [("1000 1.0", "500 1.0"), ("1000 1.0", "510 1.0")]
    fake_measurements(monkeypatch, IDLE, slow, IDLE, IDLE, IDLE)
    assert machine_load.measure_speedup(2, cycles=5) == (pytest.approx(1.98, abs=0.01), None)
    # a host that sped one process up between its slot alone and its slot together gives it no more than its
    # core: 1 + 0.6 where the other kept 60 % of its speed, not 2 + 0.6 (and 2x at most where both sped up)
    fake_measurements(monkeypatch, [("500 1.0", "1000 1.0"), ("1000 1.0", "600 1.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (pytest.approx(1.6), None)
    fake_measurements(monkeypatch, [("500 1.0", "1000 1.0"), ("500 1.0", "1000 1.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (pytest.approx(2.0), None)


def test_a_core_kept_busy_by_another_program_shows_however_linux_places_the_processes(monkeypatch):
    # How CI's readings on 2 cores with one kept busy came about: of the two counting together, one has a core to
    # itself while the other shares the busy one, on a CPU half the slot; alone, each had the free core. Their
    # rates together sum to 1.5x, but ranks that meet at every step go at the pace of the one that shares: 2 x 0.5.
    shared = [("1000 1.0", "1000 1.0"), ("1000 1.0", "500 0.5")]
    fake_measurements(monkeypatch, shared, shared, IDLE)
    assert machine_load.measure_speedup(2, cycles=3) == (pytest.approx(1.0), None)
    # both on a CPU the whole slot but slower together, as on hardware threads of one core: their rates tell,
    # each against its own speed alone per second on a CPU (the first shared its core alone: 500 turns in half
    # a slot is still one core's 1000, so 600 together is 0.6 of it, not 1.2)
    fake_measurements(monkeypatch, [("500 0.5", "600 1.0"), ("1000 1.0", "620 1.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (pytest.approx(1.22, abs=0.01), None)
    # one of the two kept off a CPU the whole slot together: 0x, the busiest machine, not a cycle left out
    fake_measurements(monkeypatch, [("1000 1.0", "1000 1.0"), ("1000 1.0", "0 0.0")], IDLE, IDLE)
    assert machine_load.measure_speedup(2, cycles=3) == (pytest.approx(1.98, abs=0.01), None)  # outvoted, as any moment
    fake_measurements(monkeypatch, [("1000 1.0", "1000 1.0"), ("1000 1.0", "0 0.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (0.0, None)


KEPT_OFF = ("the processes that measure how busy the cores are were kept off the CPUs when each should have counted "
            "alone (less than 10% of the slot on a CPU, in every cycle)")


def test_a_measurement_that_could_not_be_taken_says_why_not_a_number(monkeypatch):
    # no CPU time alone: no speed to compare with, so that cycle is left out; none left is not measured
    fake_measurements(monkeypatch, [("1000 0.0", "1000 1.0"), ("1000 1.0", "1000 1.0")], IDLE)
    assert machine_load.measure_speedup(2, cycles=2) == (pytest.approx(1.98, abs=0.01), None)
    fake_measurements(monkeypatch, [("1000 0.0", "1000 1.0"), ("1000 1.0", "1000 1.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (None, KEPT_OFF)
    # woken only after its slot's counting had ended (CI's busy pass 1b): a moment on a CPU but no turns counted,
    # or so late that it counted a few turns in a moment: no speed to compare with, as with no CPU time at all
    for late in ("0 0.02", "40 0.05"):
        fake_measurements(monkeypatch, [(late, "1000 1.0"), ("1000 1.0", "1000 1.0")], IDLE)
        assert machine_load.measure_speedup(2, cycles=2) == (pytest.approx(1.98, abs=0.01), None)
        fake_measurements(monkeypatch, [(late, "1000 1.0"), ("1000 1.0", "1000 1.0")])
        assert machine_load.measure_speedup(2, cycles=1) == (None, KEPT_OFF)
    # a tenth of the slot is enough: 100 turns in it is one core's 1000 a second, as 1000 together is
    fake_measurements(monkeypatch, [("100 0.1", "1000 1.0"), ("1000 1.0", "1000 1.0")])
    assert machine_load.measure_speedup(2, cycles=1) == (pytest.approx(2.0), None)
    fake_measurements(monkeypatch, [("1000 1.0", "1000 1.0"), ("", "")])  # a measuring process that failed
    assert machine_load.measure_speedup(2, cycles=1) == (
        None, "a measuring process failed (the other measuring processes never started)")


def test_every_judgement_is_recorded_with_its_pass_cell_verdict_and_cause(monkeypatch, tmp_path, capsys):
    record = tmp_path / "claims.jsonl"
    monkeypatch.setenv("DPEDU_TIMING_CLAIMS", str(record))
    monkeypatch.setenv("DPEDU_CI_PASS", "1b")
    monkeypatch.setattr(machine_load, "_cell_fingerprint", lambda: "abc")
    timing_claim(False, "4 ranks do not beat 2", expected="", seen="", machine=Machine(2, 1.2))
    timing_claim(True, "held", expected="", seen="", machine=Machine(2, 1.9))
    timing_claim(True, "held anyway", expected="", seen="", machine=Machine(2, 1.2))
    with pytest.raises(AssertionError):
        timing_claim(False, "broken", expected="", seen="", machine=Machine(2, 1.9))
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    assert [(e["claim"], e["verdict"], e["cause"]) for e in lines] == [
        ("4 ranks do not beat 2", "not checked", "busy now"), ("held", "checked", None),
        ("held anyway", "checked under load", "busy now"), ("broken", "failed", None)]
    assert all(e["pass"] == "1b" and e["cell"] == "abc" for e in lines) and lines[0]["speedup"] == 1.2


def test_the_cell_is_found_from_the_kernels_execute_request(monkeypatch):
    class Kernel:
        @staticmethod
        def get_parent():
            return {"header": {}, "content": {"code": "timing_claim(...)"}}

    class Shell:
        kernel = Kernel()

    class IPython:
        @staticmethod
        def get_ipython():
            return Shell()

    monkeypatch.setitem(machine_load.sys.modules, "IPython", IPython)
    assert machine_load._cell_fingerprint() == cell_fingerprint("timing_claim(...)")
    Shell.kernel = None  # IPython in a terminal: no kernel
    assert machine_load._cell_fingerprint() is None
    monkeypatch.delitem(machine_load.sys.modules, "IPython")
    assert machine_load._cell_fingerprint() is None


def test_no_published_lesson_shows_a_claim_that_was_not_checked():
    """The cells that judge timing claims are not compared by nbval (their times vary), so a lesson run on a
    busy machine and committed would publish "Not checked" as its output: the committed runs checked them."""
    notebooks = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
    assert notebooks
    shown = [f"{path.name}, cell {i}" for path in notebooks
             for i, cell in enumerate(json.loads(path.read_text())["cells"])
             if "Not checked on this machine" in json.dumps(cell.get("outputs", []))]
    assert not shown, f"stored outputs where a timing claim went unchecked (rerun on an idle machine): {shown}"
