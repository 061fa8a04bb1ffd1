"""Lessons 04 and 05's from-scratch communication against torch's own, both measured in the same run.

    .venv/bin/python benchmarks/collectives.py [--repeats 11] [--world-sizes 2 4] [--steps 30] [--skip-ddp]

1. All-reduce: the ring written from isend/irecv (dpedu.ring_all_reduce) against dist.all_reduce
   (gloo), for 1 KB to 64 MB, taking turns call by call: the median time over repeats of each (three
   times the repeats up to 1 MB), its algorithmic bandwidth (message bytes / time) and the ratio
   ring / torch. Target: ring >= 0.95x gloo's bandwidth at 16 MB, 2 ranks.
2. DDP step time on a 4.5 M-parameter MLP, 2 ranks: per-parameter all-reduce, MiniDDP's buckets without
   and with overlap, and torch's DistributedDataParallel with the same bucket size, taking their steps
   in turn; each the median of ``--steps`` steps, as a ratio to torch DDP. Target: buckets + overlap
   <= 1.05x torch DDP.
"""

import argparse

import torch
import torch.distributed as dist

from dpedu import launch
from dpedu.data_parallel.collectives import ring_all_reduce
from dpedu.data_parallel.cost_model import time_side_by_side
from dpedu.data_parallel.ddp_timing import VERSIONS, step_times

SIZES = (2**10, 2**16, 2**20, 2**22, 2**24, 2**26)  # bytes: 1 KB to 64 MB


def both_all_reduces(repeats: int) -> list[tuple[float, float]]:
    """Ring and torch take turns call by call, so that a busy moment of the machine hits both."""
    medians = time_side_by_side(SIZES, {"ring": ring_all_reduce, "torch": dist.all_reduce}, repeats)
    return list(zip(medians["ring"], medians["torch"], strict=True))


def all_versions(steps: int, bucket_cap_mb: float) -> dict[str, float]:
    """The four versions take their steps in turn, so that a busy moment of the machine hits them all."""
    return {version: result["median"] for version, result in step_times(VERSIONS, steps=steps,
                                                                         bucket_cap_mb=bucket_cap_mb).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--skip-ddp", action="store_true")
    options = parser.parse_args()
    print(f"torch {torch.__version__}, gloo; all-reduce: median of {options.repeats}")
    print(f"{'ranks':>5} {'size':>7} {'ring (ms)':>10} {'torch (ms)':>10} {'ring GB/s':>9} {'torch GB/s':>10} "
          f"{'ring/torch':>10}")
    for world_size in options.world_sizes:
        medians = launch(both_all_reduces, world_size, args=(options.repeats,), timeout=600)[0]
        for nbytes, (ring, gloo) in zip(SIZES, medians, strict=True):
            size = f"{nbytes // 2**20} MB" if nbytes >= 2**20 else f"{nbytes // 2**10} KB"
            print(f"{world_size:>5} {size:>7} {ring * 1e3:>10.3f} {gloo * 1e3:>10.3f} {nbytes / ring / 1e9:>9.2f} "
                  f"{nbytes / gloo / 1e9:>10.2f} {gloo / ring:>10.2f}", flush=True)
    if options.skip_ddp:
        return
    print(f"\nDDP step time, 2 ranks, 4.5 M parameters, median of {options.steps} steps (ratio to torch DDP)")
    for bucket_cap_mb in (25.0, 5.0):
        medians = launch(all_versions, 2, args=(options.steps, bucket_cap_mb), timeout=600)[0]
        print(f"  bucket_cap_mb={bucket_cap_mb:g}: " + ", ".join(
            f"{version} {seconds * 1e3:.1f} ms ({seconds / medians['torch DDP']:.2f}x)"
            for version, seconds in medians.items()), flush=True)


if __name__ == "__main__":
    main()
