"""dpedu.scripts.train_resumable's own logic, in launched ranks: killed at a step, started again (as torchrun's
restart does) from the last checkpoint, a run ends with exactly the parameters of a run that never failed, within
float rounding of one process taking both ranks' batches; a checkpoint beyond --steps is refused (bad options:
test_arguments.py). Lesson 10 (part 2) runs the script under torchrun, the rank SIGKILLed and
torchrun restarting it, and asserts the same end."""

import argparse
from pathlib import Path

import pytest
import torch

from dpedu import RankFailedError, launch
from dpedu.data_parallel import digits_ddp
from dpedu.scripts import train_resumable


def options(directory: Path, *extra: str) -> argparse.Namespace:
    """The script's options for a 30-step run checkpointing every 10 steps into ``directory``, and ``extra``."""
    return train_resumable.arguments(["--steps", "30", "--checkpoint-every", "10",
                                      "--checkpoint", str(directory / "checkpoint.pt"), *extra])


def run(args: argparse.Namespace, attempt: int) -> tuple[dict, int]:
    """On each launched rank, as the script's main runs it: one thread, the model's final parameters."""
    torch.set_num_threads(1)
    state, start = train_resumable.train(args, attempt)
    return state["model"], start


def test_a_killed_run_started_again_resumes_from_its_checkpoint_and_ends_like_an_uninterrupted_one(tmp_path, capfd):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed.mkdir()
    whole.mkdir()
    # Step 25 is killed, so the next attempt resumes from the checkpoint of step 20 (crossing into the
    # sampler's second epoch at step 22) and replays steps 20 to 24.
    crash = options(killed, "--kill-rank", "0", "--kill-at-step", "25")
    with pytest.raises(RankFailedError, match="rank 0"):
        launch(run, 2, (crash, 0), timeout=60)
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 20
    (resumed, start), _ = launch(run, 2, (crash, 1), timeout=60)  # attempt 1: torchrun's first restart
    (uninterrupted, from_scratch), _ = launch(run, 2, (options(whole), 0), timeout=60)
    assert (start, from_scratch) == (20, 0)
    assert "attempt 1: resuming from the checkpoint of step 20" in capfd.readouterr().out
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in resumed)
    args = options(whole)
    one = digits_ddp.train(steps=30, batch_size=2 * args.batch_size, lr=args.lr, momentum=args.momentum,
                           ddp=False)["model"]  # one process, both ranks' batches, no stops
    assert max((one[name] - uninterrupted[name]).abs().max().item() for name in one) < 1e-6
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 30


def test_a_checkpoint_beyond_the_steps_is_refused(tmp_path):
    launch(run, 2, (options(tmp_path), 0), timeout=60)  # checkpoints step 30
    with pytest.raises(RankFailedError, match="the checkpoint is at step 30, beyond --steps 20"):
        launch(run, 2, (options(tmp_path, "--steps", "20"), 0), timeout=60)
