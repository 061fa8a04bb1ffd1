import os
import subprocess
import sys

import pytest

from dpedu import ddp, launch
from dpedu.commands import free_port
from dpedu.training import largest_difference


def two_ranks_of_16(**options):
    return ddp.train(4, 16, 0.1, **options)["model"]


def test_two_ranks_equal_one_process_with_the_whole_batch():
    reference = ddp.train(4, 32, 0.1, ddp=False)["model"]
    states = launch(two_ranks_of_16, 2)
    assert largest_difference(states[0], reference) < 1e-6
    assert largest_difference(states[0], states[1]) == 0


def test_accumulation_with_and_without_no_sync_gives_the_same_parameters():
    reference = ddp.train(4, 32, 0.1, ddp=False)["model"]
    for no_sync in (True, False):
        state = launch(lambda no_sync=no_sync: two_ranks_of_16(accumulation=2, no_sync=no_sync), 2)[0]
        assert largest_difference(state, reference) < 1e-6


def test_resuming_from_a_state_continues_the_same_run():
    whole = ddp.train(6, 32, 0.01, ddp=False, optimizer="adam")
    first = ddp.train(3, 32, 0.01, ddp=False, optimizer="adam")
    rest = ddp.train(3, 32, 0.01, ddp=False, optimizer="adam", start_step=3, state=first)
    assert largest_difference(rest["model"], whole["model"]) == 0


@pytest.mark.parametrize(("options", "name"), [({"reduction": "max"}, "reduction"),
                                               ({"optimizer": "lbfgs"}, "optimizer"),
                                               ({"accumulation": 3}, "accumulation")])
def test_bad_options_name_themselves(options, name):
    with pytest.raises(ValueError, match=name):
        ddp.train(1, 32, 0.1, ddp=False, **options)


AFTER_TRAINING = """
import os, sys
import torch.distributed as dist
from dpedu import ddp
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
ddp.train(2, 8, 0.1)
dist.destroy_process_group()
threads = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
print(sorted(name for name in threads if "gloo" in name))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads thread names from /proc")
def test_destroying_the_group_after_ddp_stops_its_gloo_threads():
    # A group that outlives destroy_process_group keeps gloo threads that can abort the interpreter
    # at exit (see the note in dpedu/ddp.py); in a fresh process, as under torchrun.
    run = subprocess.run([sys.executable, "-c", AFTER_TRAINING, str(free_port())], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"gloo threads still running after destroy_process_group: {run.stdout}"
