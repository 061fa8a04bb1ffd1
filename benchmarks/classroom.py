"""A classroom on one server: K learners' kernels launching DDP at the same time, each many times.

    .venv/bin/python benchmarks/classroom.py [--learners 1 4 8] [--launches 25] [--ranks 2]

Each learner is a Python process of its own, as a Jupyter kernel is, that calls ``dpedu.launch`` on a
function that wraps a small model in DDP and takes one training step, ``--launches`` times in a row.
All K start together. Printed per K: launches that failed (with the first error), the median and the
worst launch, what was left running afterwards (in any learner and on the machine), and the peak
memory of one learner's kernel and of one of its ranks, so that a teacher can size a server.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu import launch, leftover_processes, run_together


def ddp_step() -> float:
    """What a lesson's cell does in its ranks: wrap a model in DDP, one step."""
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(dist.get_rank()))
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    return loss.item()


def learner(launches: int, ranks: int) -> None:
    """One learner's kernel: prints one JSON line with its launch times, failures and leftovers."""
    seconds, failures = [], []
    for _ in range(launches):
        start = time.perf_counter()
        try:
            launch(ddp_step, ranks, timeout=120)
            seconds.append(time.perf_counter() - start)
        except Exception as error:  # a failed launch is what this benchmark counts
            failures.append(f"{type(error).__name__}: {str(error).splitlines()[0][:200]}")
    print(json.dumps({"seconds": seconds, "failures": failures, "leftover": len(leftover_processes()),
                      "kernel_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "rank_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))


def classroom(learners: int, launches: int, ranks: int) -> dict:
    command = [sys.executable, __file__, "--learner", "--launches", str(launches), "--ranks", str(ranks)]
    start = time.perf_counter()
    finished = run_together([command] * learners, timeout=60 + 30 * launches * learners,
                            env={"OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    reports = []
    for one in finished:
        if one.returncode != 0:
            reports.append({"seconds": [], "failures": [f"learner exited {one.returncode}: {one.stderr[-300:]}"],
                            "leftover": 0, "kernel_mb": 0.0, "rank_mb": 0.0})
        else:
            reports.append(json.loads(one.stdout.strip().splitlines()[-1]))
    seconds = [s for r in reports for s in r["seconds"]]
    return {"learners": learners, "launches": learners * launches, "wall": wall,
            "failed": sum(len(r["failures"]) for r in reports),
            "first_failure": next((f for r in reports for f in r["failures"]), ""),
            "median": statistics.median(seconds) if seconds else float("nan"),
            "worst": max(seconds, default=float("nan")),
            "leftover": sum(r["leftover"] for r in reports) + len(leftover_processes()),
            "kernel_mb": max(r["kernel_mb"] for r in reports), "rank_mb": max(r["rank_mb"] for r in reports)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--learners", nargs="+", type=int, default=[1, 4, 8])
    parser.add_argument("--launches", type=int, default=25, help="launches per learner")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--learner", action="store_true", help=argparse.SUPPRESS)  # one learner's kernel
    options = parser.parse_args()
    if options.learner:
        learner(options.launches, options.ranks)
        return
    print(f"{os.cpu_count()} cores; each learner launches {options.ranks} ranks that build DDP and take one step, "
          f"{options.launches} times")
    print(f"{'learners':>8} {'launches':>8} {'failed':>6} {'median (s)':>10} {'worst (s)':>9} {'left':>4} "
          f"{'kernel MB':>9} {'rank MB':>7} {'wall (s)':>8}")
    for learners in options.learners:
        r = classroom(learners, options.launches, options.ranks)
        print(f"{r['learners']:>8} {r['launches']:>8} {r['failed']:>6} {r['median']:>10.2f} {r['worst']:>9.2f} "
              f"{r['leftover']:>4} {r['kernel_mb']:>9.0f} {r['rank_mb']:>7.0f} {r['wall']:>8.0f}")
        if r["first_failure"]:
            print(f"         first failure: {r['first_failure']}")


if __name__ == "__main__":
    main()
