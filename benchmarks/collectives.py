"""The ring all-reduce written from isend/irecv against torch's own dist.all_reduce, same run.

    .venv/bin/python benchmarks/collectives.py [--repeats 7] [--world-sizes 2 4]

For each world size and message size it prints the median over repeats of each one's time and
its algorithmic bandwidth (message bytes / time), and the ratio ring / torch.
Target (lesson 04's issue): ring >= 0.95x gloo's bandwidth at 16 MB with 2 ranks.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

from dpedu import launch
from dpedu.collectives import ring_all_reduce

SIZES_MB = (0.001, 0.064, 1, 4, 16, 64)


def timings(repeats: int) -> dict[float, tuple[float, float]]:
    medians = {}
    for megabytes in SIZES_MB:
        tensor = torch.ones(max(1, int(megabytes * 2**20 / 4)))
        ring, gloo = [], []
        for _ in range(repeats):
            for reduce, times in ((ring_all_reduce, ring), (dist.all_reduce, gloo)):
                dist.barrier()
                start = time.perf_counter()
                reduce(tensor)
                times.append(time.perf_counter() - start)
        medians[megabytes] = (statistics.median(ring), statistics.median(gloo))
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    options = parser.parse_args()
    print(f"{'ranks':>5} {'size (MB)':>9} {'ring (ms)':>10} {'torch (ms)':>10} {'ring GB/s':>9} {'torch GB/s':>10} "
          f"{'ratio':>6}   median of {options.repeats}")
    for world_size in options.world_sizes:
        medians = launch(timings, world_size, args=(options.repeats,), timeout=600)[0]
        for megabytes, (ring, gloo) in medians.items():
            size = max(4, int(megabytes * 2**20 / 4) * 4) / 1e9
            print(f"{world_size:>5} {megabytes:>9g} {ring * 1e3:>10.3f} {gloo * 1e3:>10.3f} {size / ring:>9.2f} "
                  f"{size / gloo:>10.2f} {gloo / ring:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
