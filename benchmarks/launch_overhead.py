"""How long dpedu.launch takes to get ranks ready for their first collective, per start method.

    .venv/bin/python benchmarks/launch_overhead.py [--repeats 5] [--methods fork forkserver spawn]

For each start method and world size it prints the median over repeats of: "ready", from the call
to every rank having finished a first barrier, and "total", the whole call with teardown. The first
launch of each method is timed apart ("first"), since a forkserver pays for importing torch once,
in that launch; the medians are over the launches after it.
Targets (COURSE.md, issue 11): 2 ranks ready in <= 1 s on Linux by fork; on the fallback path
(forkserver), every launch after the first <= 0.3 s for 2 ranks.
"""

import argparse
import statistics
import time

import torch.distributed as dist

from dpedu import launch


def first_collective() -> float:
    dist.barrier()
    return time.time()


def timed(method: str, world_size: int) -> tuple[float, float]:
    start = time.time()
    finished = launch(first_collective, world_size, start_method=method)
    return max(finished) - start, time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=["fork", "forkserver", "spawn"])
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    options = parser.parse_args()
    print(f"{'start method':>12} {'ranks':>5} {'first (s)':>10} {'ready (s)':>10} {'total (s)':>10}"
          f"   median of {options.repeats} after the first")
    for method in options.methods:
        for world_size in options.world_sizes:
            first = timed(method, world_size)[1]
            ready, total = zip(*(timed(method, world_size) for _ in range(options.repeats)), strict=True)
            print(f"{method:>12} {world_size:>5} {first:>10.3f} {statistics.median(ready):>10.3f} "
                  f"{statistics.median(total):>10.3f}", flush=True)


if __name__ == "__main__":
    main()
