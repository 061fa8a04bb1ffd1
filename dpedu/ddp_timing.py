"""Four ways to average gradients, timed on the same model (lesson 04 and ``benchmarks/collectives.py``).

``step_times`` runs inside every rank of a ``dpedu.launch``: it trains one model the chosen way and
returns the median seconds per step, with the measured timeline of the last step (when backward ran,
when each all-reduce started and ended) for the lesson's figure.
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dpedu._validate import real, whole
from dpedu.mini_ddp import MiniDDP, average_gradients

VERSIONS = ("per parameter", "buckets, no overlap", "buckets + overlap", "torch DDP")


def timing_model(seed: int = 0) -> nn.Sequential:
    """An MLP of 4.5 M parameters (18 MB of float32 gradients) in six linear layers."""
    torch.manual_seed(seed)
    widths = (256, 1024, 1024, 1024, 1024, 1024)
    layers: list[nn.Module] = []
    for width_in, width_out in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], 10))


def step_times(version: str, *, steps: int = 10, batch_size: int = 64, bucket_cap_mb: float = 5.0,
               warmup: int = 2) -> dict:
    """Median seconds per SGD step of ``version`` (one of ``VERSIONS``) on this rank, and the timeline
    of the last step, in seconds from its start: ``backward`` (start, time the last gradient was ready),
    ``returned`` (when ``loss.backward()`` returned: MiniDDP waits for its buckets first), and
    ``communication`` [(start, end), ...] (buckets in order; for "per parameter", the loop of
    all-reduces after backward; for torch DDP, empty: its buckets travel inside torch's C++ reducer)."""
    if version not in VERSIONS:
        raise ValueError(f"version must be one of {VERSIONS}, got {version!r}")
    whole("steps", steps)
    whole("batch_size", batch_size)
    real("bucket_cap_mb", bucket_cap_mb, above=0)
    model = timing_model()
    if version == "torch DDP":
        wrapped = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    elif version == "per parameter":
        wrapped = model
    else:
        wrapped = MiniDDP(model, bucket_cap_mb=bucket_cap_mb, overlap=version == "buckets + overlap")
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(dist.get_rank())
    X, y = torch.randn(batch_size, 256, generator=generator), torch.randint(0, 10, (batch_size,), generator=generator)
    seconds = []
    for _ in range(warmup + steps):
        dist.barrier()  # every step starts together: a step's time is not its wait for the slower rank
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(wrapped(X), y)
        backward_start = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        if version == "per parameter":
            average_gradients(model)
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    computed = backward_end
    if version == "per parameter":
        communication = [(backward_end - start, seconds[-1])]
    elif version == "torch DDP":
        communication = []
    else:
        communication = [(t["launched"] - start, t["done"] - start) for t in wrapped.bucket_times]
        computed = max(t["ready"] for t in wrapped.bucket_times)
    return {"median": statistics.median(seconds[warmup:]), "backward": (backward_start - start, computed - start),
            "returned": backward_end - start, "communication": communication}
