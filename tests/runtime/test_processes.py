"""dpedu.runtime.processes: has_exited never reaps; a Supervisor's stop runs on every way out of its block."""

import multiprocessing as mp
import subprocess
import time
from pathlib import Path

import pytest
from processes import state

from dpedu.runtime.processes import Supervisor, has_exited, wait_until


def exit_at_once() -> None:
    pass


@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc")
@pytest.mark.parametrize("kind", ["command", "fork", "spawn"])
def test_has_exited_tells_without_reaping(kind):
    process = subprocess.Popen(["true"]) if kind == "command" else mp.get_context(kind).Process(target=exit_at_once)
    if kind != "command":
        process.start()
    assert wait_until(lambda: has_exited(process), 30, poll=0.01)
    # still a zombie, so its pid (and group number) cannot have been given to another process
    assert wait_until(lambda: state(process.pid) == "Z", 5, poll=0.01)
    if kind == "command":
        process.wait()
    else:
        process.join()
    assert state(process.pid) is None and has_exited(process)  # reaped, and still ended


def test_stop_runs_on_every_way_out_and_says_whether_the_block_succeeded():
    seen = []
    with Supervisor(seen.append) as supervisor:
        supervisor.wait(lambda: True, 1, lambda: AssertionError("done at once: no timeout"))
    with pytest.raises(TimeoutError, match="too slow"), Supervisor(seen.append) as supervisor:
        supervisor.wait(lambda: False, 0.1, lambda: TimeoutError("too slow"))

    def fails() -> bool:
        raise ValueError("a failure seen while waiting")

    with pytest.raises(ValueError, match="a failure seen"), Supervisor(seen.append) as supervisor:
        supervisor.wait(fails, 10, lambda: AssertionError("no timeout"))
    assert seen == [True, False, False]


def test_a_wait_ends_by_its_deadline_and_wakes_early_on_what_it_waits_on():
    reader, writer = mp.Pipe(duplex=False)
    with Supervisor() as supervisor:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            supervisor.wait(lambda: False, 0.2, TimeoutError, poll=10)  # the deadline, not the long poll
        assert 0.2 <= time.monotonic() - start < 5
        writer.send("ready")
        start = time.monotonic()
        supervisor.wait(reader.poll, 60, TimeoutError, wake_on=lambda: [reader], poll=10)
        assert time.monotonic() - start < 5  # woken by the pipe, not after the 10 s poll
