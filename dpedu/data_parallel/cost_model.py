"""The α-β model of communication time, fitted to measurements (lesson 04).

Sending a message of n bytes costs a fixed **latency** α (setting up the transfer, crossing the
software stack and the wire) plus n·β, where β is the inverse **bandwidth** (seconds per byte). A ring
all-reduce over p ranks makes 2(p - 1) steps, each sending n/p bytes, so it takes

    T(n) = 2(p - 1)·α + 2(p - 1)/p · n·β

(the α-β model as Thakur, Rabenseifner & Gropp 2005 use it for MPICH's collectives; the ring is
Patarasuk & Yuan 2009)

(plus the time to add, which on CPUs goes into β). Small messages cost α, large ones n·β; the size
where the two are equal, n½ = p·α/β, tells which regime a gradient bucket is in.

Used in lessons 04 and 09.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from dpedu._validate import real, whole

__all__ = ["time_all_reduce", "time_side_by_side", "fit_alpha_beta", "ring_time", "LINK_BANDWIDTH"]

# Published bandwidths per direction, in bytes per second (lessons 04 and 09 cite them):
# NVLink: 900 GB/s in total per H100 SXM GPU, both directions together (NVIDIA H100 Tensor Core GPU
# datasheet); InfiniBand NDR: 400 Gb/s per port (NVIDIA ConnectX-7 and Quantum-2 product briefs);
# Ethernet: the line rates of the IEEE 802.3 standards.
LINK_BANDWIDTH = {"NVLink (H100)": 450e9, "InfiniBand NDR": 50e9, "100 GbE": 12.5e9, "10 GbE": 1.25e9}


def time_all_reduce(sizes_in_bytes: Sequence[int], repeats: int = 5,
                    reduce: Callable[[torch.Tensor], object] = dist.all_reduce, *,
                    statistic: Callable[[list[float]], float] = statistics.median) -> list[float]:
    """On every rank: ``statistic`` (the median, or ``min`` for the fastest) over ``repeats`` of ``reduce``
    on a float32 tensor of each size, in seconds, after one untimed pass over all sizes (first-use
    allocations and connections are not the model's). Messages up to 1 MB, whose times are the noisiest,
    get three times the repeats. Ranks start each call together (a barrier first)."""
    return time_side_by_side(sizes_in_bytes, {"reduce": reduce}, repeats, statistic=statistic)["reduce"]


def time_side_by_side(sizes_in_bytes: Sequence[int], reduces: dict[str, Callable[[torch.Tensor], object]],
                      repeats: int = 5, *,
                      statistic: Callable[[list[float]], float] = statistics.median) -> dict[str, list[float]]:
    """``time_all_reduce`` for several all-reduces at once, taking turns call by call, so that a busy
    moment of a shared machine slows them alike: for each name, ``statistic`` of the times per size (in
    the order of ``sizes_in_bytes``)."""
    whole("repeats", repeats)
    if not callable(statistic):
        raise TypeError(f"statistic must be a function of a list of seconds, such as min, got {statistic!r}")
    tensors = [torch.ones(max(1, whole("size in sizes_in_bytes", n) // 4)) for n in sizes_in_bytes]
    for tensor in tensors:
        for reduce in reduces.values():
            reduce(tensor)
    seconds: dict[str, list[list[float]]] = {name: [[] for _ in tensors] for name in reduces}
    # Sizes take turns too, round by round (a large size every third round), so that a busy spell of
    # the machine, shorter than the whole measurement, lands in a few repeats of every size instead
    # of in all the repeats of one size, and the medians step over it.
    for round_ in range(3 * repeats):
        for index, tensor in enumerate(tensors):
            if tensor.numel() * 4 > 2**20 and round_ % 3:
                continue
            for name, reduce in reduces.items():
                dist.barrier()
                start = time.perf_counter()
                reduce(tensor)
                seconds[name][index].append(time.perf_counter() - start)
    return {name: [statistic(times) for times in per_size] for name, per_size in seconds.items()}


def fit_alpha_beta(sizes_in_bytes: Sequence[float], seconds: Sequence[float], world_size: int) -> tuple[float, float]:
    """α (seconds) and β (seconds per byte) of a ring all-reduce over ``world_size`` ranks, by least squares
    on the *relative* error of T(n), so that microsecond and 100-millisecond times weigh the same."""
    n, t = np.asarray(sizes_in_bytes, dtype=float), np.asarray(seconds, dtype=float)
    if n.ndim != 1 or n.shape != t.shape or n.size < 2:
        raise ValueError(f"sizes_in_bytes and seconds must be two lists of the same length >= 2, got "
                         f"{n.shape} and {t.shape}")
    if not (np.isfinite(t).all() and (t > 0).all() and np.isfinite(n).all() and (n >= 0).all()):
        raise ValueError("seconds must be positive and sizes_in_bytes non-negative, all finite")
    whole("world_size", world_size, minimum=2)
    steps = 2 * (world_size - 1)
    design = np.stack([np.full_like(n, steps), steps / world_size * n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    return float(alpha), float(beta)


def ring_time(nbytes: float, alpha: float, beta: float, world_size: int) -> float:
    """The α-β model's time for a ring all-reduce of ``nbytes`` over ``world_size`` ranks, in seconds."""
    real("nbytes", nbytes, at_least=0)
    real("alpha", alpha, at_least=0)
    real("beta", beta, at_least=0)
    whole("world_size", world_size, minimum=2)
    return 2 * (world_size - 1) * alpha + 2 * (world_size - 1) / world_size * nbytes * beta
