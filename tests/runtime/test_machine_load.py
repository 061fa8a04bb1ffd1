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


def test_a_measurement_not_taken_records_no_number_and_says_why(monkeypatch, capsys):
    measured = iter([(1.95, None), (None, "the processes that measure began counting 40 ms apart")])
    monkeypatch.setattr(machine_load, "machine_limit", lambda processes: None)
    monkeypatch.setattr(machine_load, "measure_speedup", lambda processes: next(measured))
    with watched() as machine:
        pass
    assert not machine.can_show(1.5)
    assert not timing_claim(False, "claim", expected="", seen="", machine=machine)
    said = capsys.readouterr().out
    assert "could not be measured" in said and "began counting 40 ms apart" in said and "1.00x" not in said


def test_a_measurement_is_a_finite_positive_speed_up_and_bad_arguments_are_named():
    speedup, why_not = machine_load.measure_speedup(2, seconds=0.05)
    assert speedup is None or (math.isfinite(speedup) and speedup > 0)
    assert why_not is None or "failed" not in why_not  # the counting script itself runs and prints what is read
    [(rate, began, share)] = machine_load._rates(1, 0.05)
    assert rate > 0 and began > 0 and 0 < share <= 1.05, (rate, began, share)
    with pytest.raises(ValueError, match="processes must be an int from 2 to 64"):
        parallel_speedup(1)
    with pytest.raises(ValueError, match="seconds must be a finite number > 0"):
        parallel_speedup(2, seconds=0)


def test_the_counting_script_prints_its_share_of_the_window_on_a_cpu(monkeypatch, tmp_path, capsys):
    # on a clock where the process runs half of every millisecond of the window, it must print a share of 0.5
    # (not its CPU seconds, not a constant) and its turns per second of the window (a turn a millisecond here)
    clock = {"now": 100.0}

    def tick() -> float:
        clock["now"] += 0.001
        return clock["now"]

    fake_time = types.SimpleNamespace(time=tick, perf_counter=tick, process_time=lambda: clock["now"] / 2,
                                      sleep=lambda seconds: None)
    monkeypatch.setitem(sys.modules, "time", fake_time)
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path), "1", "0.2"])
    exec(machine_load._SPIN, {})
    rate, began, share = map(float, capsys.readouterr().out.split())
    assert share == pytest.approx(0.5, abs=0.01) and rate == pytest.approx(1000, rel=0.02) and began > 100


def fake_measurements(monkeypatch, *answers: list[str]) -> None:
    """Each measuring run prints the next of ``answers``: a line per process, "turns/s began CPU-share", or ""
    for a process that failed."""
    answers = iter(answers)

    def run_together(commands, timeout):
        outputs = next(answers)
        return [Finished(list(c), 0 if out else 1, out, "" if out else "the other measuring processes never started")
                for c, out in zip(commands, outputs, strict=True)]

    monkeypatch.setattr(machine_load, "run_together", run_together)


def test_processes_that_could_not_begin_together_give_no_speed_up(monkeypatch):
    # a late starter's window overlaps the others' less, which would read as a higher speed-up: not trusted;
    # the faster of the two readings alone is the one process's rate
    fake_measurements(monkeypatch, ["1000 0.0 1.0"], ["1000 5.00 1.0", "1000 5.10 1.0"], ["900 0.0 1.0"],
                      ["800 0.0 1.0"], ["950 7.00 1.0", "940 7.01 1.0"], ["1000 0.0 1.0"],
                      ["1000 0.0 1.0"], ["", "1000 5.0 1.0"], ["1000 0.0 1.0"])
    speedup, why_not = machine_load.measure_speedup(2)
    assert speedup is None and "began counting 100 ms apart" in why_not
    assert machine_load.measure_speedup(2) == (pytest.approx(1.89), None)
    speedup, why_not = machine_load.measure_speedup(2)  # a measuring process that failed: said, not a traceback
    assert speedup is None and why_not == "a measuring process failed (the other measuring processes never started)"


def test_a_core_kept_busy_by_another_program_shows_however_linux_places_the_processes(monkeypatch):
    # How CI's readings on 2 cores with one kept busy (2.01x, then 1.84x, where the lessons' claims need 1.5x) come
    # about, as seen here: the lone process shares its core with the busy program, at half its speed, and of the
    # two measured together one has a core to itself while the other shares. Read per second on a CPU, one process
    # alone does 1000 turns; the two together did 1.5x that, but one of them was on a CPU half the window: 2 x 0.5.
    # (The sum of the two rates over the faster lone rate, as measured before, read 2.88x: an idle machine.)
    fake_measurements(monkeypatch, ["500 0.0 0.5"], ["500 3.00 0.5", "1000 3.01 1.0"], ["520 0.0 0.52"])
    assert machine_load.measure_speedup(2) == (pytest.approx(1.0), None)
    # both on a CPU the whole window but slower, as on hardware threads of one core: their rates tell, against
    # one process's rate per second on a CPU (here the lone process shared its core: 2.44x per second of window)
    fake_measurements(monkeypatch, ["500 0.0 0.5"], ["600 3.00 1.0", "620 3.01 1.0"], ["495 0.0 0.5"])
    assert machine_load.measure_speedup(2) == (pytest.approx(1.22), None)
    fake_measurements(monkeypatch, ["1000 0.0 0.0"], ["1000 3.00 1.0", "1000 3.01 1.0"], ["1000 0.0 0.0"])
    assert machine_load.measure_speedup(2) == (
        None, "the process that measures one core's work alone was given no CPU time")
    # one of the pair given no CPU time is not measured, never a speed-up of 0x
    fake_measurements(monkeypatch, ["1000 0.0 1.0"], ["1000 3.00 1.0", "0 3.01 0.0"], ["1000 0.0 1.0"])
    assert machine_load.measure_speedup(2) == (
        None, "a process that measures how busy the cores are was given no CPU time")


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
