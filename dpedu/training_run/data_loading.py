"""Data loading at scale: who loads which example, with ranks and ``DataLoader`` workers: lesson 13b.

Two different things split the work of loading. **Ranks** split the *data*: ``DistributedSampler`` gives
rank r every world-th index of the epoch's permutation, and nothing else. **Workers** (``num_workers`` > 0)
split the *loading* inside one rank: each of a rank's worker processes prepares some of that rank's
batches, so the rank's share arrives sooner, but it is the same share. With a map-style dataset and a
sampler the workers cannot duplicate anything: the main process hands each worker the indices to load.

An ``IterableDataset`` has no sampler: every worker process of every rank runs its own copy of
``__iter__``. Unless ``__iter__`` shards by rank *and* worker (``torch.utils.data.get_worker_info()``
names the worker), each of the world × workers copies yields the whole stream: every example is seen
world × workers times per epoch. ``ExampleStream(shard=True)`` is the fix: copy k of n = world × workers
(k = rank × workers + worker id) yields examples k, k + n, k + 2n, ...

Used in lesson 13b.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from dpedu._validate import whole

__all__ = ["WhoLoads", "ExampleStream", "worker_identity", "counts"]


def worker_identity() -> tuple[int, int]:
    """(worker id, the worker's seed) in a ``DataLoader`` worker process; (-1, -1) in the process of the rank.

    Each worker's seed is the loader's base seed + its id; torch seeds the worker's ``torch`` and ``random``
    with it, so whatever a worker draws (augmentation, dropout in a transform) follows from that seed.
    """
    info = get_worker_info()
    return (-1, -1) if info is None else (info.id, info.seed)


class WhoLoads(Dataset):
    """A map-style dataset of ``examples`` items; item i is ``(i, worker id, worker seed)``: which example it
    is, and which worker of the rank loaded it, with what seed (``worker_identity``)."""

    def __init__(self, examples: int) -> None:
        self.examples = whole("examples", examples)

    def __len__(self) -> int:
        return self.examples

    def __getitem__(self, index: int) -> tuple[int, int, int]:
        return (int(index), *worker_identity())


class ExampleStream(IterableDataset):
    """A stream of the example indices ``0 .. examples - 1``, as a rank's ``DataLoader`` iterates it.

    ``shard=False``: every copy of ``__iter__`` (one per worker process of every rank) yields every example:
    on ``world_size`` ranks with w workers each, every example comes world_size × w times per epoch.
    ``shard=True``: copy k of n = ``world_size`` × w (k = ``rank`` × w + worker id) yields k, k + n, ...,
    so the copies together yield every example exactly once, whatever ``world_size`` and w are.
    ``rank`` and ``world_size`` are given, as to ``DistributedSampler``; the worker is found at iteration.
    """

    def __init__(self, examples: int, *, rank: int, world_size: int, shard: bool = True) -> None:
        super().__init__()
        self.examples = whole("examples", examples)
        self.world_size = whole("world_size", world_size)
        self.rank = whole("rank", rank, 0, world_size - 1)
        if not isinstance(shard, bool):
            raise TypeError(f"shard must be True or False, got {shard!r}")
        self.shard = shard

    def __iter__(self) -> Iterator[int]:
        if not self.shard:
            yield from range(self.examples)  # the bug: each copy yields the whole stream
            return
        info = get_worker_info()
        workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
        copies = self.world_size * workers  # every worker process of every rank runs __iter__
        yield from range(self.rank * workers + worker, self.examples, copies)


def counts(indices: list[int], examples: int) -> torch.Tensor:
    """How many times each of ``examples`` indices occurs in ``indices`` (an int64 tensor of ``examples``)."""
    return torch.bincount(torch.as_tensor(indices, dtype=torch.int64), minlength=whole("examples", examples))
