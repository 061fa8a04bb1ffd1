"""What all ranks of lesson 13's run agree on: the global loss, the parameters, each rank's random state.

``global_mean`` is the log's loss: rank 0's own loss is the mean over its shard only, noisier than the loss
of the global batch the step actually descended; one all-reduce of the per-step losses gives the latter.
``parameter_checksum`` and ``replicas_identical`` say that a run is the same run (on every rank, and
against another run: ``same_run`` compares two runs' summaries); ``random_states`` and
``restore_random_states`` let a checkpoint hold every rank's random state (dropout draws differ per rank), so a
resumed run draws what the uninterrupted one would have.

Used in lesson 13a and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from dpedu import models

__all__ = ["global_mean", "parameter_checksum", "replicas_identical", "same_run", "random_states",
           "restore_random_states"]


def global_mean(values: torch.Tensor) -> torch.Tensor:
    """The mean over ranks of each rank's ``values`` (same shape on every rank); every rank gets it.

    With equal-sized shards (``batches.micro_batch_size`` makes them so) the mean of the ranks' mean losses is
    the mean loss over the whole global batch.
    """
    summed = values.detach().clone()
    dist.all_reduce(summed)
    return summed / dist.get_world_size()


def parameter_checksum(model: nn.Module) -> float:
    """The sum of every parameter in float64: one number to compare runs by (equal parameters, equal sums)."""
    return models.parameter_checksum(model.parameters())


def replicas_identical(model: nn.Module) -> bool:
    """True on every rank when all ranks hold bit-identical parameters (compared through an all-gather)."""
    return models.identical_on_every_rank(model.parameters())


def same_run(summary: dict, other: dict) -> bool:
    """Are two runs the same run bit for bit, by the script's summaries: equal parameter checksums and every
    logged global loss equal (lesson 13's check of a resumed run against an uninterrupted one)?"""
    return summary["checksum"] == other["checksum"] and summary["losses"] == other["losses"]


def random_states() -> list[dict[str, torch.Tensor]]:
    """Every rank's torch random state (CPU, and this rank's GPU when it uses one), in rank order, on every rank."""
    mine = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_initialized():  # never is_available(): it would initialise CUDA where nothing else did
        mine["cuda"] = torch.cuda.get_rng_state()
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def restore_random_states(states: list[dict[str, torch.Tensor]]) -> None:
    """Set this rank's random state from ``random_states()``'s list (written by as many ranks as there are now)."""
    if len(states) != dist.get_world_size():
        raise ValueError(f"the checkpoint holds the random states of {len(states)} ranks, but {dist.get_world_size()} "
                         f"ranks are running: resume with --nproc-per-node={len(states)}")
    mine = states[dist.get_rank()]
    torch.set_rng_state(mine["cpu"])
    if "cuda" in mine:
        torch.cuda.set_rng_state(mine["cuda"])
