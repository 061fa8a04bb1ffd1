"""Which examples each rank trains on at each step, the same global batches for any number of ranks: lesson 13.

``DistributedSampler`` (with ``set_epoch``, so each epoch has a new order) shuffles the indices with a
generator seeded by ``seed + epoch``, the same permutation on every rank, and gives rank r every world-th
index from r on. Cutting each rank's share into micro-batches of ``micro_batch = global_batch / (world ×
accumulate)``, the k-th micro-batches of all ranks together are exactly positions ``k·world·micro_batch``
to ``(k+1)·world·micro_batch - 1`` of the permutation, and optimizer step s of the epoch uses positions
``s·global_batch`` to ``(s+1)·global_batch - 1``, whatever ``world`` and ``accumulate`` are. So runs on 1, 2
or 4 ranks see the same examples at every step, and a resumed run can start mid-epoch from the step alone.
An epoch is ``examples // global_batch`` steps: the sampler's padding (repeated indices, added so that every
rank's share has the same length) is never reached.

Used in lesson 13 and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dpedu._validate import whole

__all__ = ["micro_batch_size", "steps_per_epoch", "epoch_batches"]


def micro_batch_size(global_batch: int, world_size: int, accumulate: int) -> int:
    """Examples per rank per forward-backward: ``global_batch / (world_size * accumulate)``, which must be whole."""
    whole("global_batch", global_batch)
    whole("world_size", world_size)
    whole("accumulate", accumulate)
    if global_batch % (world_size * accumulate):
        raise ValueError(f"--global-batch {global_batch} must be a multiple of ranks x --accumulate = "
                         f"{world_size} x {accumulate} = {world_size * accumulate}")
    return global_batch // (world_size * accumulate)


def steps_per_epoch(examples: int, global_batch: int) -> int:
    """Optimizer steps in one pass over ``examples``: every step a full global batch, the rest left out."""
    if global_batch > examples:
        raise ValueError(f"--global-batch {global_batch} is larger than the {examples} training examples")
    return examples // global_batch


def epoch_batches(tokens: torch.Tensor, sampler: DistributedSampler, epoch: int, *, micro_batch: int,
                  accumulate: int, first_step: int = 0, num_workers: int = 0) -> Iterator[list[torch.Tensor]]:
    """This rank's micro-batches of epoch ``epoch``, from optimizer step ``first_step`` of the epoch on.

    Yields one list of ``accumulate`` tensors (rows of ``tokens``, ``micro_batch`` each) per optimizer step,
    ``steps_per_epoch(len(tokens), global batch) - first_step`` times. Starting at ``first_step`` yields
    exactly what the whole epoch would have yielded from there: a run resumed mid-epoch sees the same data.
    ``num_workers`` > 0 loads in that many worker processes of this rank (it parallelises loading within a
    rank; which rank gets which examples is the sampler's business, not the workers'). The global random
    state is left untouched.
    """
    sampler.set_epoch(epoch)  # without it every epoch repeats the first epoch's order
    steps = steps_per_epoch(len(tokens), micro_batch * accumulate * sampler.num_replicas)
    whole("first_step", first_step, 0, steps)
    mine = list(sampler)  # this rank's share of the epoch's permutation
    per_step = micro_batch * accumulate
    batches = [mine[i:i + micro_batch] for i in range(first_step * per_step, steps * per_step, micro_batch)]
    # A DataLoader draws its workers' base seed from the global random state unless given a generator of its
    # own; that draw would make a run resumed mid-epoch (a new loader) diverge from one that never stopped,
    # wherever randomness follows (dropout). Seeded by (seed, epoch, rank): each rank's workers differ.
    generator = torch.Generator().manual_seed(hash((sampler.seed, epoch, sampler.rank)) % 2**63)
    loader = DataLoader(TensorDataset(tokens), batch_sampler=batches, num_workers=num_workers, generator=generator)
    step: list[torch.Tensor] = []
    for (batch,) in loader:
        step.append(batch)
        if len(step) == accumulate:
            yield step
            step = []
