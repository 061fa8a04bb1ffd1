"""Sharded checkpoints: an FSDP2 model saved by every rank with ``torch.distributed.checkpoint`` (DCP).

Under DDP every rank holds the whole model, so rank 0's ``torch.save`` is a whole checkpoint (lessons
03 and 09). Under FSDP each rank holds a shard: rank 0's ``state_dict()`` is a dict of DTensors whose
local parts are a 1/N share, and saving them on rank 0 alone would lose the rest (``save`` measures the
share). DCP writes one file per rank and a ``.metadata`` file that records which slice of which tensor
lies where, so that a different number of ranks, with another sharding, can load it (``load``).
Used in lesson 11b.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor

from dpedu._validate import whole
from dpedu.beyond.zero_memory import shard_layers, tanh_mlp

__all__ = ["sharded_model", "save", "load", "files"]


def sharded_model(seed: int = 0) -> torch.nn.Module:
    """Inside ranks: ``tanh_mlp(seed)`` sharded with FSDP2 over all ranks, on the CPU."""
    return shard_layers(tanh_mlp(seed), init_device_mesh("cpu", (dist.get_world_size(),)))


def save(directory: str, *, steps: int = 5, lr: float = 1e-2) -> dict:
    """Inside ranks: train ``sharded_model()`` with Adam for ``steps`` steps (each rank on its own
    batches), then every rank writes its shards to ``directory`` with ``dcp.save``. Returns the whole
    trained parameters (gathered with ``full_tensor``) and the bytes of this rank's local shards
    against the bytes of the whole state dict."""
    if not isinstance(directory, str):
        raise TypeError(f"directory must be a str, got {type(directory).__name__}")
    whole("steps", steps)
    model = sharded_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        generator = torch.Generator().manual_seed(1000 * step + dist.get_rank())
        x, y = torch.randn(8, 16, generator=generator), torch.randn(8, 4, generator=generator)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    state = model.state_dict()  # name -> DTensor: this rank's shard, and where the others are
    dcp.save(state, checkpoint_id=directory)  # every rank writes its own shards; a collective
    local = sum(t.to_local().nbytes for t in state.values())
    total = sum(t.numel() * t.element_size() for t in state.values())
    return {"params": {name: t.full_tensor() for name, t in state.items()}, "local_bytes": local, "total_bytes": total}


def load(directory: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Inside ranks (any number that shards ``tanh_mlp``): a model initialised differently
    (``seed``), sharded over these ranks, loads the checkpoint in ``directory`` in place, each rank
    reading the slices its shards need. Returns the whole parameters, gathered with ``full_tensor``."""
    if not isinstance(directory, str):
        raise TypeError(f"directory must be a str, got {type(directory).__name__}")
    model = sharded_model(seed)
    state = model.state_dict()
    dcp.load(state, checkpoint_id=directory)  # into the DTensors' local shards
    model.load_state_dict(state)
    return {name: t.full_tensor() if isinstance(t, DTensor) else t for name, t in model.state_dict().items()}


def files(directory: str) -> dict[str, int]:
    """The files in ``directory`` and their sizes in bytes, sorted by name."""
    if not os.path.isdir(directory):
        raise ValueError(f"directory must be an existing directory, got {directory!r}")
    return {name: os.path.getsize(os.path.join(directory, name)) for name in sorted(os.listdir(directory))}
