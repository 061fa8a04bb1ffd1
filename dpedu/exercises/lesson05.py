"""Checks for lesson 05's exercises: each answer is computed by simulation or root-finding."""

from __future__ import annotations

import math

import torch

from dpedu.exercises import verdict
from dpedu.staleness import stability_limit


def _workers(value: object, name: str = "workers") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024:
        raise ValueError(f"{name} must be an int from 1 to 1024, got {value!r}")
    return value


def _close(answer: float, truth: float, rel: float) -> bool:
    return isinstance(answer, (int, float)) and math.isfinite(answer) and abs(answer - truth) <= rel * abs(truth)


def largest_lr(staleness: int, curvature: float, answer: float) -> bool:
    """The largest stable learning rate of delayed GD at this staleness and largest curvature (1 %)."""
    if not (isinstance(curvature, (int, float)) and math.isfinite(curvature) and curvature > 0):
        raise ValueError(f"curvature must be a positive finite number, got {curvature!r}")
    truth = stability_limit(staleness) / curvature
    return verdict(_close(answer, truth, 0.01), "the limit is on lr × curvature; divide the edge by the curvature")


def sync_round_time(workers: int, answer: float) -> bool:
    """Mean duration of a synchronous round of ``workers`` with Exp(1) compute times (2 %)."""
    _workers(workers)
    draws = torch.empty(200_000, workers, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(0))
    truth = draws.max(1).values.mean().item()
    return verdict(_close(answer, truth, 0.02), "a round lasts as long as its slowest worker")


def mean_staleness(workers: int, answer: float) -> bool:
    """Mean number of updates an asynchronous gradient misses, with memoryless compute times (3 %)."""
    _workers(workers)
    generator = torch.Generator().manual_seed(0)
    finisher = torch.randint(workers, (100_000,), generator=generator).tolist()
    last_read = [0] * workers
    total = 0
    for t, k in enumerate(finisher):
        total += t - last_read[k]
        last_read[k] = t + 1
    truth = total / len(finisher)
    return verdict(_close(answer, truth, 0.03), "between a worker's read and its write, the others finish "
                                                "at their own rate")
