"""How long dpedu.launch takes to get ranks ready for their first collective, per start method.

    .venv/bin/python benchmarks/launch_overhead.py [--repeats 5] [--methods fork forkserver spawn] [--work ddp]

For each start method and world size it prints the median over repeats of: "ready", from the call
to every rank having finished a first barrier, and "total", the whole call with teardown, the ranks
doing ``--work`` after the barrier: nothing (default), one all-reduce, or wrapping a small model in DDP
and taking one step (``ddp``, what a lesson's cell does; classroom.py's step). The first
launch of each method is timed apart ("first"), since a forkserver pays for importing torch once,
in that launch; the medians are over the launches after it.
Targets (COURSE.md): 2 ranks ready in <= 1 s on Linux by fork; on the fallback paths (forkserver, and spawn,
whose ranks are kept warm between launches: dpedu/runtime/warm_ranks.py), every launch after the first
<= 0.3 s for 2 ranks; with ``--work ddp``, every launch after the first <= 0.15 s. ``DPEDU_WARM_RANKS=0``
measures spawn without warm ranks, each rank importing torch afresh.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from classroom import ddp_step

from dpedu import launch


def all_reduce_once() -> None:
    dist.all_reduce(torch.ones(1))


WORK = {"none": lambda: None, "all-reduce": all_reduce_once, "ddp": ddp_step}


def first_collective(work: str) -> float:
    """The time every rank was ready (after a first barrier); then the work a cell would do."""
    dist.barrier()
    ready = time.time()
    WORK[work]()
    return ready


def timed(method: str, world_size: int, work: str) -> tuple[float, float]:
    start = time.time()
    ready = launch(first_collective, world_size, args=(work,), start_method=method)
    return max(ready) - start, time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=["fork", "forkserver", "spawn"])
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--work", choices=WORK, default="none", help="what the ranks do after the barrier")
    options = parser.parse_args()
    print(f"{'start method':>12} {'ranks':>5} {'first (s)':>10} {'ready (s)':>10} {'total (s)':>10}"
          f"   median of {options.repeats} after the first; work: {options.work}")
    for method in options.methods:
        for world_size in options.world_sizes:
            first = timed(method, world_size, options.work)[1]
            ready, total = zip(*(timed(method, world_size, options.work) for _ in range(options.repeats)),
                               strict=True)
            print(f"{method:>12} {world_size:>5} {first:>10.3f} {statistics.median(ready):>10.3f} "
                  f"{statistics.median(total):>10.3f}", flush=True)


if __name__ == "__main__":
    main()
