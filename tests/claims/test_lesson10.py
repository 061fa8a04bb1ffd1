"""Lesson 10's "port already in use" cell: rank 0's store cannot listen where another program holds the port
on every address, and the cell's check fails where nothing holds it (a squatter that held one address alone
would not stop the store on macOS, whose BSD rules allow a wildcard listener beside a specific one; Linux
refuses both, so that mistake cannot be shown here). And its restart's cost: a restart that replays nothing fails
the bound no load can break, and a killed run no slower than the uninterrupted one fails where the cores were free.
Each cell's own source is run, as it stands in the lesson."""

import json
import re
import socket
from contextlib import ExitStack, suppress
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch.distributed as dist

from dpedu.runtime.machine_load import Machine, timing_claim

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "10_when_things_go_wrong.ipynb"
SQUAT = 'taken = squatter.enter_context(socket.create_server(("", 0))).getsockname()[1]'
SQUAT_IPV6 = 'squatter.enter_context(socket.create_server(("::", taken), family=socket.AF_INET6))'


def port_cell() -> str:
    cells = json.loads(LESSON.read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and "another program holds" in
                "".join(c["source"])]
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


def restart_cell() -> str:
    cells = json.loads(LESSON.read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if c["cell_type"] == "code" and "killed_s > uninterrupted_s" in
                "".join(c["source"])]
    return source


class MeasuredBefore(Machine):
    """A machine whose speed-up was measured before the runs: the cell's measurement after them changes nothing."""

    def measure(self) -> None:
        pass


def judge_restart(resumed_line: str, uninterrupted_s: float, killed_s: float, speedup: float) -> dict:
    namespace = {"re": re, "timing_claim": timing_claim, "machine": MeasuredBefore(2, speedup),
                 "killed": SimpleNamespace(stdout=f"attempt 1: resuming from step 40's checkpoint\n{resumed_line}"),
                 "uninterrupted_s": uninterrupted_s, "killed_s": killed_s}
    exec(compile(restart_cell(), "lesson 10, the restart's cost", "exec"), namespace)
    return namespace


REPLAYED = "attempt 1: resumed from step 40, ran 20 steps, finished at step 60, replicas identical: True"


def test_the_restart_cell_holds_for_a_run_that_replayed_steps_and_took_longer():
    assert judge_restart(REPLAYED, 6.4, 9.1, speedup=1.9)["ran"] == 20


def test_a_restart_that_replays_nothing_fails_the_bound_no_load_can_break():
    with pytest.raises(AssertionError, match="replay the steps since its last checkpoint"):
        judge_restart(REPLAYED.replace("step 40, ran 20", "step 60, ran 0"), 6.4, 9.1, speedup=1.1)


def test_a_killed_run_no_slower_fails_on_idle_cores_and_is_left_unchecked_on_busy_ones(capsys):
    with pytest.raises(AssertionError, match="takes longer than the uninterrupted one"):
        judge_restart(REPLAYED, 9.1, 9.0, speedup=1.9)
    judge_restart(REPLAYED, 9.1, 9.0, speedup=1.1)
    assert "Not checked on this machine: the killed and restarted run takes longer" in capsys.readouterr().out
