"""notebooks/train_ddp.py under torchrun: 2 ranks x 16 examples equal 1 rank x 32."""

import re
import sys
from pathlib import Path

from dpedu.runtime.commands import run_together
from dpedu.runtime.rendezvous import loopback_interface

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# CPU ranks on every machine, GPUs or not, talking over loopback (as in lesson 03's cell)
CPU_RANKS_ON_LOOPBACK = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "GLOO_SOCKET_IFNAME": loopback_interface()}


def torchrun(processes: int, batch_size: int) -> str:
    (run,) = run_together([[sys.executable, "-m", "torch.distributed.run", "--standalone",
                            f"--nproc_per_node={processes}", "train_ddp.py", "--steps", "5",
                            "--batch-size", str(batch_size)]], timeout=180, cwd=str(NOTEBOOKS),
                          env=CPU_RANKS_ON_LOOPBACK)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_two_ranks_under_torchrun_match_one_rank_with_the_whole_batch():
    two, one = torchrun(2, 16), torchrun(1, 32)
    assert "2 rank(s) on gloo" in two and "replicas identical: True" in two
    checksum = re.compile(r"checksum (-?\d+\.\d+)")
    assert abs(float(checksum.search(two)[1]) - float(checksum.search(one)[1])) < 1e-4
