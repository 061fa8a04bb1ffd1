"""Checks for lesson 03's exercises: each runs the real DistributedSampler or DDP to get the answer."""

from __future__ import annotations

import torch
from torch.utils.data.distributed import DistributedSampler

from dpedu._validate import real, whole
from dpedu.data_parallel import digits_ddp
from dpedu.exercises import number, verdict
from dpedu.runtime.launcher import launch


def samples_per_rank(dataset_size: int, world_size: int, drop_last: bool, answer: int) -> bool:
    """How many indices does each rank's DistributedSampler yield?"""
    whole("dataset_size", dataset_size, maximum=100_000)  # the real sampler lists every index
    whole("world_size", world_size, maximum=1024)
    if not isinstance(drop_last, bool):
        raise TypeError(f"drop_last must be True or False, got {drop_last!r}")
    answer = number(answer)
    truth = len(list(DistributedSampler(range(dataset_size), num_replicas=world_size, rank=0, drop_last=drop_last)))
    return verdict(answer == truth, "every rank gets the same count: padded up to a multiple of the world size, "
                                    "or, with drop_last, cut down to one")


def _count_allreduces(steps: int, accumulation: int, no_sync: bool) -> int:
    hook, calls = digits_ddp.counting_allreduce()
    digits_ddp.train(steps=steps, batch_size=8 * accumulation, lr=0.1, accumulation=accumulation, no_sync=no_sync,
              comm_hook=hook)
    return len(calls)


def allreduce_calls(steps: int, accumulation: int, no_sync: bool, answer: int) -> bool:
    """How many bucket all-reduces does lesson 03's model make (it fits in one bucket)?"""
    whole("steps", steps, maximum=50)  # each step is real training on two ranks
    whole("accumulation", accumulation, maximum=8)
    if not isinstance(no_sync, bool):
        raise TypeError(f"no_sync must be True or False, got {no_sync!r}")
    answer = number(answer)
    truth = launch(_count_allreduces, 2, args=(steps, accumulation, no_sync))[0]
    return verdict(answer == truth, "count the backward passes that all-reduce: every micro-batch, or only the "
                                    "last of each step under no_sync")


def _summed_ddp(steps: int, lr: float) -> dict:
    return digits_ddp.train(steps=steps, batch_size=16, lr=lr, reduction="sum")["model"]


def summed_loss_lr(world_size: int, lr: float, answer: float) -> bool:
    """At which learning rate does one process (batch world_size*16, summed loss) match DDP at ``lr``?"""
    whole("world_size", world_size, maximum=8)  # one process per rank on this machine
    real("lr", lr, above=0)
    try:
        real("answer", answer, above=0)
    except ValueError:  # not a learning rate at all: wrong, and no need to run DDP to say so
        return verdict(False, "the answer is a learning rate: a positive number")
    distributed = launch(_summed_ddp, world_size, args=(5, lr))[0]
    single = digits_ddp.train(steps=5, batch_size=16 * world_size, lr=answer, ddp=False, reduction="sum")["model"]
    same = all(torch.allclose(distributed[k], single[k], rtol=1e-4, atol=1e-6) for k in single)
    return verdict(same, "DDP divides the summed gradients of the ranks by the world size")
