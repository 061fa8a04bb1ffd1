"""dpedu.scripts.train_resumable's own logic, in launched ranks: killed at a step, started again (as torchrun's
restart does) from the last checkpoint, a run ends with exactly the parameters of a run that never failed; a
checkpoint beyond --steps and bad options are refused, the options before any process group. Lesson 10 (part 2)
runs the script under torchrun, the rank SIGKILLed and torchrun restarting it, and asserts the same end."""

import argparse
import sys
from pathlib import Path

import pytest
import torch

from dpedu import RankFailedError, launch
from dpedu.scripts import train_resumable


def options(directory: Path, **changed) -> argparse.Namespace:
    """The script's options for a 30-step run checkpointing every 10 steps into ``directory``."""
    return argparse.Namespace(**{"steps": 30, "batch_size": 32, "lr": 0.05, "momentum": 0.9,
                                 "checkpoint": str(directory / "checkpoint.pt"), "checkpoint_every": 10,
                                 "kill_rank": None, "kill_at_step": None, **changed})


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
    crash = options(killed, kill_rank=0, kill_at_step=25)
    with pytest.raises(RankFailedError, match="rank 0"):
        launch(run, 2, (crash, 0), timeout=60)
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 20
    (resumed, start), _ = launch(run, 2, (crash, 1), timeout=60)  # attempt 1: torchrun's first restart
    (uninterrupted, from_scratch), _ = launch(run, 2, (options(whole), 0), timeout=60)
    assert (start, from_scratch) == (20, 0)
    assert "attempt 1: resuming from the checkpoint of step 20" in capfd.readouterr().out
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in resumed)
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 30


def test_a_checkpoint_beyond_the_steps_is_refused(tmp_path):
    launch(run, 2, (options(tmp_path), 0), timeout=60)  # checkpoints step 30
    with pytest.raises(RankFailedError, match="the checkpoint is at step 30, beyond --steps 20"):
        launch(run, 2, (options(tmp_path, steps=20), 0), timeout=60)


@pytest.mark.parametrize(("arguments", "message"), [
    (["--kill-rank", "0"], "--kill-rank and --kill-at-step go together"),
    (["--checkpoint-every", "0"], "--steps must be >= 0 and --checkpoint-every >= 1"),
])
def test_bad_options_are_refused_before_any_process_group(arguments, message, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["train_resumable", "--checkpoint", "unused.pt", *arguments])
    monkeypatch.setattr(train_resumable.dist, "init_process_group", pytest.fail)  # reached: not refused before
    with pytest.raises(SystemExit) as exit:
        train_resumable.main()
    assert exit.value.code == 2 and message in capsys.readouterr().err
