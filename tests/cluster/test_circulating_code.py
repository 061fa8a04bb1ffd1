import os

import pytest

from dpedu import free_port, leftover_processes
from dpedu.cluster.circulating_code import run_script, waiting_place

LONE_RANK = """import torch.distributed as dist

dist.init_process_group("gloo", rank=0, world_size=2)
"""


def test_a_script_that_ends_well_returned_with_its_output():
    outcome = run_script("print('hello')\n", timeout=5)
    assert (outcome.ending, outcome.returncode, outcome.stdout, outcome.error) == ("returned", 0, "hello\n", "")


def test_it_runs_as_a_plain_script_does():
    outcome = run_script("import os, sys\nprint(__name__, os.path.basename(sys.argv[0]), len(sys.argv))\n", timeout=5)
    assert outcome.stdout == "__main__ snippet.py 1\n"


def test_an_uncaught_exception_is_reported_by_its_last_line():
    outcome = run_script("x = 1\nraise KeyError('weight')\n", timeout=5)
    assert outcome.ending == "raised" and outcome.returncode == 1 and outcome.error == "KeyError: 'weight'"
    assert 'File "snippet.py", line 2' in outcome.stderr  # the temporary folder left out


def test_the_error_is_plain_text_where_the_environment_forces_colour(monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")  # as a Jupyter kernel sets it: Python 3.13 would colour the traceback
    outcome = run_script("raise KeyError('weight')\n", timeout=5)
    assert outcome.error == "KeyError: 'weight'" and "\x1b[" not in outcome.stderr


def test_a_lone_rank_hangs_in_init_process_group_until_the_watchdog_and_nothing_is_left():
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    outcome = run_script(LONE_RANK, timeout=1, env=env)
    assert outcome.ending == "hung" and 1 <= outcome.seconds < 20
    assert outcome.waiting == "in init_process_group, called at snippet.py line 3"
    assert leftover_processes() == []


def test_what_the_script_started_is_stopped_too():
    source = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n" \
             "time.sleep(60)\n"
    outcome = run_script(source, timeout=1)
    assert outcome.ending == "hung" and outcome.waiting == "called at snippet.py line 3"
    assert leftover_processes() == []


def test_without_a_launcher_the_error_names_master_addr():
    env = {name: value for name, value in os.environ.items() if name not in ("MASTER_ADDR", "MASTER_PORT")}
    if len(env) != len(os.environ):
        pytest.skip("this shell sets MASTER_ADDR or MASTER_PORT")
    outcome = run_script(LONE_RANK, timeout=20)
    assert outcome.ending == "raised" and "environment variable MASTER_ADDR expected" in outcome.error


def test_waiting_place_reads_faulthandlers_stack_innermost_first():
    stack = """Timeout (0:00:03)!
Thread 0x00007f (most recent call first):
  File "/x/torch/distributed/store.py", line 12 in wait
  File "/x/torch/distributed/rendezvous.py", line 199 in _create_c10d_store
  File "/x/torch/distributed/distributed_c10d.py", line 1892 in init_process_group
  File "/x/torch/distributed/c10d_logger.py", line 97 in wrapper
  File "snippet.py", line 5 in <module>
  File "<frozen runpy>", line 88 in _run_code
"""
    assert waiting_place(stack) == "in init_process_group, called at snippet.py line 5"
    assert waiting_place("no stack") == ""


@pytest.mark.parametrize("source, timeout, env, error", [
    ("", 1, None, ValueError), ("print(1)", 0, None, ValueError), ("print(1)", 1, {"A": 1}, TypeError),
    (b"print(1)", 1, None, ValueError)])
def test_bad_arguments_are_refused_before_anything_starts(source, timeout, env, error):
    with pytest.raises(error, match="source|timeout|env"):
        run_script(source, timeout=timeout, env=env)
