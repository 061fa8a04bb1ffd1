"""dpedu.scripts.train_resumable under torchrun: a run whose rank 1 is SIGKILLed, restarted by
torchrun from the last checkpoint, ends with exactly the parameters of a run that never failed."""

import sys
from pathlib import Path

import torch

from dpedu.runtime.commands import run_together
from dpedu.runtime.rendezvous import on_loopback

# CPU ranks talking over loopback, as in lesson 03; the last variable lets a restart form its process
# group (the script's docstring says why).
ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **on_loopback(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def torchrun(directory: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "--max-restarts=1",
            "-m", "dpedu.scripts.train_resumable", "--steps", "30", "--checkpoint-every", "10",
            "--checkpoint", str(directory / "checkpoint.pt"), "--final", str(directory / "final.pt"), *extra]


def test_a_killed_run_resumes_from_its_checkpoint_and_ends_like_an_uninterrupted_one(tmp_path):
    killed, whole = tmp_path / "killed", tmp_path / "whole"
    killed.mkdir()
    whole.mkdir()
    # Both at once (each --standalone picks a free port of its own): the test takes one run's time.
    a, b = run_together([torchrun(killed, "--kill-rank", "0", "--kill-at-step", "25"), torchrun(whole)],
                        timeout=120, cwd=str(tmp_path), env=ENV)
    assert a.returncode == 0, a.stderr[-3000:]
    assert b.returncode == 0, b.stderr[-3000:]
    # torchrun saw the SIGKILL, then restarted. Rank 0 is the one killed: torchrun names the failure it saw
    # first, to the second, and the lower rank on a tie, so a killed rank 1 could be named as rank 0's reaction.
    assert "failed (exitcode: -9) local_rank: 0" in a.stderr
    # Step 25 is killed, so the restart resumes from the checkpoint of step 20 (crossing into the
    # sampler's second epoch at step 22) and replays steps 20 to 24.
    assert a.stdout.splitlines() == [
        "attempt 1: resuming from the checkpoint of step 20",
        "attempt 1: resumed from step 20, ran 10 steps, finished at step 30, replicas identical: True"]
    assert b.stdout.splitlines() == [
        "attempt 0: resumed from step 0, ran 30 steps, finished at step 30, replicas identical: True"]
    resumed = torch.load(killed / "final.pt", weights_only=True)
    uninterrupted = torch.load(whole / "final.pt", weights_only=True)
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in resumed)
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["step"] == 30
