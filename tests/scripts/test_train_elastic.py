"""dpedu.scripts.train_elastic: the global batch is split over whatever world torchrun gives it, so runs on
1 and 2 workers end within float rounding of each other, and a checkpoint whose epochs had another
length is refused. Lesson 10 (part 3) runs the elastic job itself, a node lost and one joining."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpedu.runtime.commands import run_together
from dpedu.runtime.rendezvous import on_loopback
from dpedu.scripts import train_elastic

ENV = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **on_loopback(), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def torchrun(workers: int, checkpoint: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={workers}",
            "-m", "dpedu.scripts.train_elastic", "--checkpoint", str(checkpoint), *extra]


def test_one_and_two_workers_end_within_float_rounding(tmp_path):
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    runs = run_together([torchrun(1, tmp_path / "c1.pt", "--steps", "20", "--final", str(one)),
                         torchrun(2, tmp_path / "c2.pt", "--steps", "20", "--final", str(two))], timeout=120, env=ENV)
    assert all(run.returncode == 0 for run in runs), "\n".join(run.stderr[-3000:] for run in runs)
    assert runs[1].stdout.splitlines() == ["2 worker(s), 32 examples each a step: starting at step 0",
                                           "2 worker(s): from step 0 to step 20, replicas identical: True"]
    a, b = torch.load(one, weights_only=True), torch.load(two, weights_only=True)
    assert max((a[name] - b[name]).abs().max().item() for name in a) < 1e-6


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


@pytest.mark.parametrize(("options", "message"), [
    (["--wait-at-step", "5"], "--wait-at-step and --full-world go together"),
    (["--leave-at-step", "0"], "must be >= 1"),
    (["--global-batch-size", "0"], "--global-batch-size >= 1"),
])
def test_bad_options_are_refused_before_any_process_group(tmp_path, options, message):
    done = subprocess.run([sys.executable, "-m", "dpedu.scripts.train_elastic", "--checkpoint", str(tmp_path / "c.pt"),
                           *options], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr
