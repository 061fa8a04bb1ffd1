"""dpedu.scripts.train_elastic's own logic, in launched ranks: the global batch is split over whatever world it is
given, so a run on 2 workers, and one resized from 2 workers to 1 at a checkpoint, end within float rounding of one
process taking the whole batch; a checkpoint whose epochs had another length is refused (bad options:
test_arguments.py). Lesson 10 (part 3) runs the elastic job itself under torchrun, a node lost and one
joining, and asserts the same end."""

import argparse
from pathlib import Path

import pytest
import torch

from dpedu import launch
from dpedu.data_parallel import digits_ddp
from dpedu.scripts import train_elastic


def options(checkpoint: Path, steps: int) -> argparse.Namespace:
    """The script's options for ``steps`` steps (its defaults otherwise: a global batch of 64, a checkpoint every 10
    steps), checkpointing into ``checkpoint``."""
    return train_elastic.arguments(["--steps", str(steps), "--checkpoint", str(checkpoint)])


def run(args: argparse.Namespace) -> tuple[dict, int]:
    """On each launched rank, as the script's main runs it: one thread, the final parameters and the step it
    resumed from."""
    torch.set_num_threads(1)
    state, start = train_elastic.train(args)
    return state["model"], start


def test_two_workers_and_a_world_resized_at_a_checkpoint_end_within_float_rounding_of_one_process(tmp_path, capfd):
    args = options(tmp_path / "unused.pt", 20)
    one = digits_ddp.train(steps=20, batch_size=args.global_batch_size, lr=args.lr, momentum=args.momentum,
                           ddp=False)["model"]  # one process, the whole global batch, no checkpoints
    (two, _), _ = launch(run, 2, (options(tmp_path / "two.pt", 20),), timeout=60)
    launch(run, 2, (options(tmp_path / "resized.pt", 10),), timeout=60)  # 2 workers to step 10's checkpoint
    (resized, start), = launch(run, 1, (options(tmp_path / "resized.pt", 20),), timeout=60)  # then 1 to step 20
    assert start == 10
    assert capfd.readouterr().out.splitlines()[-1] == ("[rank 0] 1 worker(s), 64 examples each a step: resuming "
                                                       "from the checkpoint of step 10, written by 2 worker(s)")
    for other in (two, resized):
        assert max((one[name] - other[name]).abs().max().item() for name in one) < 1e-6


@pytest.fixture
def four_workers(monkeypatch):
    """This process as rank 0 of 4 (batch_for_this_world asks torch.distributed, and only that)."""
    monkeypatch.setattr(train_elastic.dist, "get_world_size", lambda: 4)
    monkeypatch.setattr(train_elastic.dist, "get_rank", lambda: 0)


def test_a_resize_that_changes_the_epochs_is_refused(four_workers):
    assert train_elastic.batch_for_this_world(64, {"steps_per_epoch": 22}) == (16, 22)
    # 80 examples: 17 steps an epoch on 1 or 2 workers, 18 on 4 (DistributedSampler pads 1438 to 1440)
    with pytest.raises(SystemExit, match="the checkpoint's epochs had 17 steps of 80 examples, on 4 workers they "
                                         "have 18"):
        train_elastic.batch_for_this_world(80, {"steps_per_epoch": 17})
    with pytest.raises(SystemExit, match="--global-batch-size 66 does not divide among 4 workers"):
        train_elastic.batch_for_this_world(66, None)
