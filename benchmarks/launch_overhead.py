"""How long dpedu.launch takes to get ranks ready for their first collective.

    .venv/bin/python benchmarks/launch_overhead.py [--repeats 5] [--methods fork spawn]

For each start method and world size it prints the median over repeats of: "ready", from the call
to every rank having finished a first barrier, and "total", the whole call with teardown.
Target (COURSE.md): 2 ranks ready in <= 1 s on Linux.
"""

import argparse
import statistics
import time

import torch.distributed as dist

from dpedu import launch


def first_collective() -> float:
    dist.barrier()
    return time.time()


def measure(method: str, world_size: int, repeats: int) -> tuple[float, float]:
    ready, total = [], []
    for _ in range(repeats):
        start = time.time()
        finished = launch(first_collective, world_size, start_method=method)
        total.append(time.time() - start)
        ready.append(max(finished) - start)
    return statistics.median(ready), statistics.median(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--methods", nargs="+", default=["fork", "spawn"])
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    options = parser.parse_args()
    print(f"{'start method':>12} {'ranks':>5} {'ready (s)':>10} {'total (s)':>10}   median of {options.repeats}")
    for method in options.methods:
        for world_size in options.world_sizes:
            ready, total = measure(method, world_size, options.repeats)
            print(f"{method:>12} {world_size:>5} {ready:>10.3f} {total:>10.3f}", flush=True)


if __name__ == "__main__":
    main()
