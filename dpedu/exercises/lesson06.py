"""Checks for lesson 06's exercises: each answer is computed by simulation, root-finding or formula."""

from __future__ import annotations

import torch

from dpedu._validate import real, whole
from dpedu.exercises import close, number, verdict
from dpedu.sgd.staleness import stability_limit


def largest_lr(staleness: int, curvature: float, answer: float) -> bool:
    """The largest stable learning rate of delayed GD at this staleness and largest curvature (1 %)."""
    real("curvature", curvature, above=0)
    truth = stability_limit(staleness) / curvature
    return verdict(close(answer, truth, 0.01), "the limit is on lr × curvature; divide the edge by the curvature")


def sync_round_time(workers: int, answer: float) -> bool:
    """Mean duration of a synchronous round of ``workers`` with Exp(1) compute times (1 %).

    The slowest of P Exp(1) times has mean H_P = 1 + 1/2 + ... + 1/P (the gaps between successive
    finishers are Exp(P), Exp(P - 1), ..., Exp(1)), computed exactly for any P.
    """
    whole("workers", workers, maximum=10**6)
    truth = sum(1 / k for k in range(1, workers + 1))
    return verdict(close(answer, truth, 0.01), "a round lasts as long as its slowest worker")


def mean_staleness(workers: int, answer: float) -> bool:
    """Mean number of updates an asynchronous gradient misses, with memoryless compute times (3 %)."""
    whole("workers", workers, maximum=1024)
    generator = torch.Generator().manual_seed(0)
    finisher = torch.randint(workers, (100_000,), generator=generator).tolist()
    last_read = [0] * workers
    total = 0
    for t, k in enumerate(finisher):
        total += t - last_read[k]
        last_read[k] = t + 1
    truth = total / len(finisher)
    return verdict(close(answer, truth, 0.03), "between a worker's read and its write, the others finish "
                                                "at their own rate")


def implicit_momentum(workers: int, answer: float) -> bool:
    """The momentum that asynchrony with ``workers`` memoryless workers adds (1 %).

    Mitliagkas et al. 2016: with geometric staleness the expected asynchronous update is heavy-ball
    momentum 1 - 1/M, the relation lesson 06's part 5 measures for M = 8.
    """
    whole("workers", workers)
    answer = number(answer)
    truth = 1 - 1 / workers
    ok = close(answer, truth, 0.01) if truth else answer == 0
    return verdict(ok, "an update arrives late by a geometric number of steps; the weights it was computed at "
                       "lag the current ones like a heavy ball's velocity: momentum 1 - 1/M")


def local_sgd_bytes(parameters: int, steps: int, period: int, answer: float) -> bool:
    """Bytes a rank hands to all-reduces when local SGD or DiLoCo averages float32 ``parameters`` every ``period``
    of ``steps`` steps (0.1 %): one all-reduce of every parameter per whole round, as part 8 counts them."""
    whole("parameters", parameters)
    whole("steps", steps)
    whole("period", period)
    truth = 4 * parameters * (steps // period)
    return verdict(close(answer, truth, 0.001), "each round all-reduces every parameter once, 4 bytes each, "
                                                "and a round is H steps")
