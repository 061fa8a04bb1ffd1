"""Lesson 10's "port already in use" cell: rank 0's store cannot listen where another program holds the port
on every address, and the cell's check fails where nothing holds it (a squatter that held one address alone
would not stop the store on macOS, whose BSD rules allow a wildcard listener beside a specific one; Linux
refuses both, so that mistake cannot be shown here). And its restart's cost: a restart that found no checkpoint
fails the bound no load can break (the killed run trains steps 41-50 again), and a killed run no slower than the
uninterrupted one fails where the cores were free before and after. Each cell's own source is run, as it stands in
the lesson (the killed run's torchrun replaced by what it printed)."""

import re
import socket
from contextlib import ExitStack, suppress
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from claims.lesson_cells import code_cell
from dpedu.runtime import machine_load
from dpedu.runtime.machine_load import Machine, timing_claim

SQUAT = 'taken = squatter.enter_context(socket.create_server(("", 0))).getsockname()[1]'
SQUAT_IPV6 = 'squatter.enter_context(socket.create_server(("::", taken), family=socket.AF_INET6))'


def cell_with(text: str) -> str:
    """The source of the lesson's one code cell that contains ``text``."""
    return code_cell("10_when_things_go_wrong.ipynb", text)


def port_cell() -> str:
    source = cell_with("another program holds")
    assert source.count(SQUAT) == source.count(SQUAT_IPV6) == 1, "the cell holds its port otherwise: update this test"
    return source


def run(source: str) -> dict:
    namespace = {"socket": socket, "dist": dist, "re": re, "ExitStack": ExitStack, "suppress": suppress,
                 "timedelta": timedelta}
    exec(compile(source, "lesson 10, the port cell", "exec"), namespace)
    return namespace


def test_the_store_fails_where_the_port_is_held_on_every_address():
    message = run(port_cell())["message"]
    assert "EADDRINUSE" in message and "code:" not in message and "PORT" in message


def test_the_check_fails_where_nothing_holds_the_port():
    with socket.create_server(("", 0)) as probe:
        free = probe.getsockname()[1]
    source = port_cell().replace(SQUAT, f"taken = {free}").replace(SQUAT_IPV6, "pass")
    with pytest.raises(AssertionError, match="listened on a port another program holds"):
        run(source)


KILLED_STDOUT = ("attempt 1: resuming from the checkpoint of step 40\n"
                 "attempt 1: resumed from step 40, ran 20 steps, finished at step 60, replicas identical: True\n")
KILLED_STDERR = "... failed (exitcode: -9) local_rank: 0 (pid: 123) of binary: python ..."


def run_killed_cell(stdout: str) -> dict:
    """The killed run's cell, its torchrun run replaced by one that printed ``stdout``."""
    final = {"weight": torch.ones(2)}
    killed = SimpleNamespace(returncode=0, stdout=stdout, stderr=KILLED_STDERR)
    namespace = {"re": re, "torch": torch, "uninterrupted_final": final,
                 "train_resumable": lambda name, *options: (killed, 9.1, final)}
    exec(compile(cell_with('train_resumable("killed"'), "lesson 10, the killed run", "exec"), namespace)
    return namespace


def test_the_killed_runs_cell_holds_for_a_restart_from_the_last_checkpoint():
    assert run_killed_cell(KILLED_STDOUT)["same"]


def test_a_restart_that_found_no_checkpoint_fails_the_bound_no_load_can_break():
    """The work behind the timing claim, asserted whatever the load: a restart trains again from step 40."""
    with pytest.raises(AssertionError):
        run_killed_cell("attempt 1: resumed from step 0, ran 60 steps, finished at step 60, replicas identical: True")


class MeasuredBefore(Machine):
    """A machine whose speed-up was measured before the runs; the cell's measurement after them is counted."""

    measured = 0

    def measure(self) -> None:
        self.measured += 1


def judge_restart(uninterrupted_s: float, killed_s: float, speedup: float) -> MeasuredBefore:
    machine = MeasuredBefore(2, speedup)
    namespace = {"timing_claim": timing_claim, "machine": machine, "uninterrupted_s": uninterrupted_s,
                 "killed_s": killed_s}
    exec(compile(cell_with("killed_s > uninterrupted_s"), "lesson 10, the restart's cost", "exec"), namespace)
    return machine


def test_the_cores_are_measured_before_the_uninterrupted_run_and_after_the_killed_one(monkeypatch):
    first = cell_with('train_resumable("uninterrupted")')
    assert first.index("machine = measured_now()") < first.index('train_resumable("uninterrupted")')
    assert judge_restart(6.4, 9.1, speedup=1.9).measured == 1
    judged = []
    monkeypatch.setattr(machine_load, "_record", lambda claim, verdict, cause, machine: judged.append(verdict))
    judge_restart(6.4, 9.1, speedup=1.9)
    assert judged == ["checked"]


def test_a_killed_run_no_slower_fails_on_idle_cores_and_is_left_unchecked_on_busy_ones(capsys):
    with pytest.raises(AssertionError, match="takes longer than the uninterrupted one.*rerun the cells from"):
        judge_restart(9.1, 9.0, speedup=1.9)
    judge_restart(9.1, 9.0, speedup=1.1)
    said = capsys.readouterr().out
    assert "Not checked on this machine: the killed and restarted run takes longer" in said
    assert "Rerun the cells from the uninterrupted run's on" in said and "-0.1 s" in said
