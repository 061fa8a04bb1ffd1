"""dpedu.scripts.train_ddp under torchrun: 2 ranks x 16 examples equal 1 rank x 32."""

import re
import sys

from dpedu.runtime import rendezvous
from dpedu.runtime.commands import run_together


def cpu_ranks_on_loopback() -> dict[str, str]:
    """CPU ranks on every machine, GPUs or not, talking over loopback (as in lesson 03's cell). Where the OS
    names no loopback interface, GLOO_SOCKET_IFNAME is left out: a None in the environment makes Popen raise."""
    return {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **rendezvous.on_loopback()}


def torchrun(processes: int, batch_size: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
            "-m", "dpedu.scripts.train_ddp", "--steps", "5", "--batch-size", str(batch_size)]


def test_two_ranks_under_torchrun_match_one_rank_with_the_whole_batch():
    # both at once (each --standalone picks a free port of its own): the test takes about one run's time
    runs = run_together([torchrun(2, 16), torchrun(1, 32)], timeout=180, env=cpu_ranks_on_loopback())
    assert all(run.returncode == 0 for run in runs), [run.stderr[-3000:] for run in runs]
    two, one = (run.stdout for run in runs)
    assert "2 rank(s) on gloo" in two and "replicas identical: True" in two
    checksum = re.compile(r"checksum (-?\d+\.\d+)")
    assert abs(float(checksum.search(two)[1]) - float(checksum.search(one)[1])) < 1e-4


def test_without_a_loopback_interface_the_variable_is_left_out_and_commands_still_start(monkeypatch):
    monkeypatch.setattr(rendezvous, "loopback_interface", lambda: None)
    env = cpu_ranks_on_loopback()
    assert "GLOO_SOCKET_IFNAME" not in env and all(isinstance(value, str) for value in env.values())
    (run,) = run_together([[sys.executable, "-c", "import os; print(os.environ['OMP_NUM_THREADS'])"]], timeout=30,
                          env=env)
    assert run.returncode == 0 and run.stdout.strip() == "1"
