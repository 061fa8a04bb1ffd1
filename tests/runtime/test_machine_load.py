"""machine_load: a timing claim is asserted where the machine could show it, and otherwise explained in
plain words, never failed with a bare assert. The verdicts are tested on given speed-ups (no timed test);
one measurement is only checked to be a number the verdicts can use."""

import math

import pytest

from dpedu.runtime import machine_load
from dpedu.runtime.commands import Finished
from dpedu.runtime.machine_load import Machine, parallel_speedup, timing_claim, watched


@pytest.fixture(autouse=True)
def no_record(monkeypatch):
    """These tests' busy machines are made up: none of their claims goes into a record CI keeps."""
    monkeypatch.delenv("DPEDU_UNCHECKED_CLAIMS", raising=False)


def test_an_idle_machine_asserts_the_claim_and_says_what_was_expected_and_seen(capsys):
    assert timing_claim(True, "2 ranks are faster", expected="1.1x to 2x", seen="1.5x", machine=Machine(2, 1.9))
    with pytest.raises(AssertionError) as failed:
        timing_claim(False, "2 ranks are faster", expected="1.1x to 2x", seen="1.02x", machine=Machine(2, 1.9))
    message = str(failed.value)
    assert message.startswith("2 ranks are faster: expected 1.1x to 2x, seen 1.02x.")
    assert "1.90x" in message and "rerun this cell when the machine is idle" in message
    assert capsys.readouterr().out == ""


def test_a_busy_machine_says_why_the_claim_is_not_checked_and_does_not_fail(capsys):
    # one core of two taken by another program: two busy processes get about 1.3x the work of one
    assert not timing_claim(False, "2 ranks are faster", expected="1.1x to 2x", seen="0.9x",
                            machine=Machine(2, 1.31), needs=1.6)
    said = capsys.readouterr().out
    assert said.startswith("Not checked on this machine just now: 2 ranks are faster. That needs 2 idle cores")
    assert "this machine gave 1.31x" in said and "Rerun this cell when the machine is idle" in said
    assert "hardware threads of one physical core" in said  # where rerunning cannot help
    assert not timing_claim(True, "claim", expected="", seen="", machine=Machine(2, 1.49))  # the default bar: 1.5


def test_watched_keeps_the_worse_of_before_and_after(monkeypatch):
    measured = iter([1.95, 1.2])
    monkeypatch.setattr(machine_load, "parallel_speedup", lambda processes: next(measured))
    with watched() as machine:
        assert machine.speedup == 1.95
    assert machine.speedup == 1.2 and not machine.can_show(1.5)


def test_fewer_usable_cores_than_processes_is_a_busy_machine(monkeypatch):
    monkeypatch.setattr(machine_load.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(machine_load, "parallel_speedup", lambda processes: pytest.fail("not measured"))
    with watched(2) as machine:
        pass
    assert machine.speedup == 1.0 and not machine.can_show(1.5)


def test_a_measurement_is_a_finite_positive_speed_up_and_bad_arguments_are_named():
    speedup = parallel_speedup(2, seconds=0.05)
    assert math.isfinite(speedup) and speedup > 0
    with pytest.raises(ValueError, match="processes must be an int from 2 to 64"):
        parallel_speedup(1)
    with pytest.raises(ValueError, match="seconds must be a finite number > 0"):
        parallel_speedup(2, seconds=0)


def test_each_unchecked_claim_is_recorded_where_the_busy_machine_benchmark_asks(monkeypatch, tmp_path, capsys):
    record = tmp_path / "unchecked.txt"
    monkeypatch.setenv("DPEDU_UNCHECKED_CLAIMS", str(record))
    timing_claim(True, "4 ranks do not beat 2", expected="", seen="", machine=Machine(2, 1.2))
    timing_claim(True, "checked", expected="", seen="", machine=Machine(2, 1.9))
    assert record.read_text() == "4 ranks do not beat 2 (1.20x)\n"


def test_processes_that_could_not_begin_together_read_as_a_busy_machine(monkeypatch):
    # a late starter's window overlaps the others' less, which would read as a higher speed-up: not trusted
    answers = iter([["1000 0.0"], ["1000 5.00", "1000 5.10"], ["1000 0.0"], ["950 7.00", "940 7.01"]])

    def run_together(commands, timeout):
        return [Finished(list(c), 0, out, "") for c, out in zip(commands, next(answers), strict=True)]

    monkeypatch.setattr(machine_load, "run_together", run_together)
    assert parallel_speedup(2) == 1.0
    assert parallel_speedup(2) == pytest.approx(1.89)
