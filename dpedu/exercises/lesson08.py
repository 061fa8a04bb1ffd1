"""Checks for lesson 08's exercises, 08a's and 08b's: each runs SyncBatchNorm, the sampler, dropout or DataLoader
workers on real ranks."""

from __future__ import annotations

import warnings
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, get_worker_info
from torch.utils.data.distributed import DistributedSampler

from dpedu._validate import whole
from dpedu.data_parallel.sync_batchnorm import SyncBatchNorm
from dpedu.exercises import number, verdict
from dpedu.runtime.launcher import launch
from dpedu.runtime.traffic import bytes_sent


def _count_all_reduces(norm_layers: int) -> int:
    torch.manual_seed(0)
    layers = [m for _ in range(norm_layers) for m in (nn.Linear(4, 4), SyncBatchNorm(4))]
    with bytes_sent() as sent:
        nn.Sequential(*layers)(torch.randn(3, 4)).sum().backward()
    return sum(what == "all_reduce" for what, _ in sent.calls)


def allreduces_per_step(norm_layers: int, answer: int) -> bool:
    """How many all-reduces does one training step (forward and backward) of ``norm_layers`` pairs of
    Linear + ``dpedu.SyncBatchNorm`` make, DDP's gradient all-reduce left aside?"""
    whole("norm_layers", norm_layers, maximum=8)
    answer = number(answer)
    truth = launch(_count_all_reduces, 2, args=(norm_layers,))[0]
    return verdict(answer == truth, "count per layer: the statistics in forward, and the two gradient sums in "
                                    "backward (packed, each in one tensor)")


def _shards_and_masks(what: str, shared: bool) -> list[int]:
    seed = 0 if shared else dist.get_rank()
    if what == "sampler":
        return list(DistributedSampler(range(20), shuffle=True, seed=seed))
    torch.manual_seed(seed)
    return (nn.functional.dropout(torch.ones(16), 0.5) != 0).int().tolist()


def must_share_seed(what: str, answer: bool) -> bool:
    """Must the seed of ``what`` ("sampler" or "dropout") be the same on every rank?"""
    if what not in ("sampler", "dropout"):
        raise ValueError(f"what must be 'sampler' or 'dropout', got {what!r}")
    if not isinstance(answer, bool):
        raise TypeError(f"answer must be True or False, got {answer!r}")
    if what == "sampler":  # per-rank seeds break it when the shards stop being disjoint and complete
        shards = launch(_shards_and_masks, 2, args=(what, False))
        truth = sorted(shards[0] + shards[1]) != list(range(20))
    else:  # a shared seed breaks it when every rank draws the same masks
        masks = launch(_shards_and_masks, 2, args=(what, True))
        truth = masks[0] != masks[1]
    return verdict(answer == truth, "try both on two ranks: which choice makes the ranks repeat or miss work?")


def _running_var(batch_sizes: list[int], spatial: int) -> tuple[float, float]:
    generator = torch.Generator().manual_seed(3)
    everything = torch.randn(sum(batch_sizes), 1, spatial, generator=generator)
    start = sum(batch_sizes[:dist.get_rank()])
    layer = SyncBatchNorm(1, momentum=1.0)  # the running variance becomes this batch's, unbiased
    layer(everything[start:start + batch_sizes[dist.get_rank()]])
    return layer.running_var.item(), everything.var(unbiased=False).item()


def unbiased_count(batch_sizes: list[int], spatial: int, answer: int) -> bool:
    """Ranks hold ``batch_sizes`` samples of shape (1, ``spatial``): the running variance is the batch
    variance times n/(n - 1). What is n?"""
    if not isinstance(batch_sizes, list) or not 2 <= len(batch_sizes) <= 4:
        raise ValueError(f"batch_sizes must list one batch size for each of 2 to 4 ranks, got {batch_sizes!r}")
    for size in batch_sizes:
        whole("batch_sizes[i]", size, maximum=64)
    whole("spatial", spatial, maximum=64)
    answer = number(answer)
    if not isinstance(answer, int) or answer < 2:
        return verdict(False, "n counts values per channel over every rank: a whole number of at least 2")
    truth = sum(batch_sizes) * spatial  # values of the channel over every rank
    running, biased = launch(_running_var, len(batch_sizes), args=(batch_sizes, spatial))[0]
    if abs(running - biased * truth / (truth - 1)) > 1e-5 * running:  # the layer itself shows the relation
        raise RuntimeError(f"SyncBatchNorm's running variance {running} is not the batch variance {biased} "
                           f"times n/(n - 1) for n = {truth}")
    return verdict(answer == truth, "count every value of the channel: samples on every rank times positions "
                                    "per sample")


# A worker_init_fn's seed, by rule: what scripts write, with seed 0, this rank and the loader's worker count
WORKER_SEEDS = {
    "seed + worker_id": lambda rank, workers, worker_id: worker_id,
    "seed + rank + worker_id": lambda rank, workers, worker_id: rank + worker_id,
    "seed + rank * num_workers + worker_id": lambda rank, workers, worker_id: rank * workers + worker_id,
}


def _reseed(rule: str, rank: int, workers: int, worker_id: int) -> None:
    torch.manual_seed(WORKER_SEEDS[rule](rank, workers, worker_id))


def _draw(_: int) -> tuple[int, int]:
    """In a worker: its id and a draw from torch's stream, which its worker_init_fn seeded."""
    return get_worker_info().id, torch.randint(2**62, ()).item()


def _worker_draws(rule: str, workers: int) -> dict[int, int]:
    rank = dist.get_rank()
    with warnings.catch_warnings():  # more workers than cores: torch's advice to use fewer, not this question's
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        loader = DataLoader(list(range(workers)), batch_size=None, num_workers=workers, collate_fn=_draw,
                            worker_init_fn=partial(_reseed, rule, rank, workers))
        return dict(loader)  # read to its end: the workers are stopped and reaped (persistent_workers=False)


def distinct_worker_streams(rule: str, world_size: int, num_workers: int, answer: int) -> bool:
    """Each of ``world_size`` ranks reads a ``DataLoader`` with ``num_workers`` workers, whose ``worker_init_fn``
    calls ``torch.manual_seed(rule)`` (``rule`` one of ``WORKER_SEEDS``, with seed 0). How many distinct random
    streams do the workers draw from?"""
    if rule not in WORKER_SEEDS:
        raise ValueError(f"rule must be one of {', '.join(repr(r) for r in WORKER_SEEDS)}, got {rule!r}")
    whole("world_size", world_size, 2, maximum=4)
    whole("num_workers", num_workers, maximum=4)
    answer = number(answer)
    if not isinstance(answer, int):
        raise TypeError(f"answer must be a whole number of workers, got {answer!r}")
    draws = launch(_worker_draws, world_size, args=(rule, num_workers))
    truth = len({draw for per_worker in draws for draw in per_worker.values()})
    return verdict(answer == truth, "write down each (rank, worker) pair's seed: workers whose seeds are equal draw "
                                    "the same numbers")
