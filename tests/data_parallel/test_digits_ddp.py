import os
import subprocess
import sys

import pytest
import torch

from dpedu import free_port, launch
from dpedu.data_parallel import digits_ddp
from dpedu.models import largest_difference


def two_ranks_of_16(**options):
    return digits_ddp.train(steps=4, batch_size=16, lr=0.1, **options)["model"]


def test_two_ranks_equal_one_process_with_the_whole_batch():
    reference = digits_ddp.train(steps=4, batch_size=32, lr=0.1, ddp=False)["model"]
    states = launch(two_ranks_of_16, 2)
    assert largest_difference(states[0], reference) < 1e-6
    assert largest_difference(states[0], states[1]) == 0


def test_accumulation_with_and_without_no_sync_gives_the_same_parameters():
    reference = digits_ddp.train(steps=4, batch_size=32, lr=0.1, ddp=False)["model"]
    for no_sync in (True, False):
        state = launch(lambda no_sync=no_sync: two_ranks_of_16(accumulation=2, no_sync=no_sync), 2)[0]
        assert largest_difference(state, reference) < 1e-6


def test_resuming_from_a_state_continues_the_same_run_across_epochs():
    per_epoch = len(digits_ddp.digits_loader(256, num_replicas=1, rank=0))  # 5 batches of 256 in 1,437 examples
    whole = digits_ddp.train(steps=2 * per_epoch, batch_size=256, lr=0.01, ddp=False, optimizer="adam")
    first = digits_ddp.train(steps=per_epoch + 2, batch_size=256, lr=0.01, ddp=False, optimizer="adam")
    rest = digits_ddp.train(steps=per_epoch - 2, batch_size=256, lr=0.01, ddp=False, optimizer="adam",
                     start_step=per_epoch + 2, state=first)
    assert largest_difference(rest["model"], whole["model"]) == 0


def test_each_epoch_is_shuffled_anew():
    loader = digits_ddp.digits_loader(256, num_replicas=1, rank=0)
    batches = digits_ddp.batches_from(loader, start_step=0)
    first_epoch = [next(batches)[1] for _ in range(len(loader))]
    second_epoch = [next(batches)[1] for _ in range(len(loader))]
    assert not all(a.equal(b) for a, b in zip(first_epoch, second_epoch, strict=True))


@pytest.mark.parametrize(("options", "error", "name"), [
    ({"reduction": "max"}, ValueError, "reduction"),
    ({"optimizer": "lbfgs"}, ValueError, "optimizer"),
    ({"accumulation": 3}, ValueError, "accumulation=3"),
    ({"accumulation": 0}, ValueError, "accumulation must be an int >= 1"),
    ({"steps": -1}, ValueError, "steps"),
    ({"lr": 0}, ValueError, "lr"),
    ({"batch_size": 2000}, ValueError, "batch_size=2000 is larger"),
    ({"start_step": -1}, ValueError, "start_step"),
    ({"ddp": True}, RuntimeError, "ddp=True needs a process group"),
])
def test_bad_options_name_themselves(options, error, name):
    call = {"steps": 1, "batch_size": 32, "lr": 0.1, "ddp": False} | options
    with pytest.raises(error, match=name):
        digits_ddp.train(**call)


AFTER_TRAINING = """
import os, sys
import torch.distributed as dist
from dpedu.data_parallel import digits_ddp
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
digits_ddp.train(steps=2, batch_size=8, lr=0.1)
dist.destroy_process_group()
threads = [open(f"/proc/self/task/{task}/comm").read().strip() for task in os.listdir("/proc/self/task")]
print(sorted(name for name in threads if "gloo" in name))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads thread names from /proc")
def test_destroying_the_group_after_ddp_stops_its_gloo_threads():
    # A group that outlives destroy_process_group keeps gloo threads that can abort the interpreter
    # at exit (see the note in dpedu/data_parallel/digits_ddp.py); in a fresh process, as under torchrun.
    run = subprocess.run([sys.executable, "-c", AFTER_TRAINING, str(free_port())], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", f"gloo threads still running after destroy_process_group: {run.stdout}"


def test_returned_states_hold_no_tensor_off_the_cpu():
    state = digits_ddp.train(steps=2, batch_size=32, lr=0.01, ddp=False, optimizer="adam")
    tensors = list(state["model"].values()) + [t for moments in state["optimizer"]["state"].values()
                                               for t in moments.values() if isinstance(t, torch.Tensor)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    assert digits_ddp._on_cpu({"a": [torch.ones(1), (2, "x")]})["a"][1] == (2, "x")  # structure kept
