"""Activation checkpointing (recomputation): keep each block's input, recompute the rest in backward.

Without it, autograd keeps every tensor a block's backward needs from forward to backward. With
``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`` it keeps only the block's input
and runs the block's forward a second time during backward, just before that block's backward: the
same gradients for one more forward. The non-reentrant variant (torch's recommended one) works under
DDP and with inputs that need no gradient. ``step`` measures both sides: the bytes autograd keeps
(counted with ``pipeline.saved_storages``, the parameters left out), the forwards each block runs and
the time forward and backward take. Used in lesson 09 (part 7).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint

from dpedu._validate import tensor, whole
from dpedu.beyond.pipeline import saved_storages

__all__ = ["Blocks", "step", "train_ddp"]


class Blocks(nn.Module):
    """``depth`` MLP blocks Linear(w, 4w) + GELU + Linear(4w, w), Megatron's MLP shape, each run through
    ``checkpoint`` when ``recompute``; ``forwards`` counts the forward calls of every block."""

    def __init__(self, width: int = 64, depth: int = 4, *, recompute: bool, seed: int = 0):
        super().__init__()
        whole("width", width)
        whole("depth", depth)
        if not isinstance(recompute, bool):
            raise TypeError(f"recompute must be True or False, got {recompute!r}")
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                  nn.Linear(4 * width, width)) for _ in range(depth))
        self.recompute, self.forwards = recompute, 0
        for block in self.blocks:
            block.register_forward_pre_hook(self._count)

    def _count(self, module, args):
        self.forwards += 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return x


def step(model: nn.Module, blocks: Blocks, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One forward and backward of ``model`` (``blocks`` itself, or DDP around it) on ``x``, ``y``.
    Returns the bytes autograd kept from forward to backward for the blocks (the loss's own saved
    tensors and the parameters left out), the forward calls of the blocks and the seconds of forward
    and of backward."""
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a Blocks, got {type(blocks).__name__}")
    tensor("x", x, dim=2)
    tensor("y", y, dim=2)
    kept: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    blocks.forwards = 0
    start = time.perf_counter()
    with saved_storages(lambda t: kept, left_out=params):
        out = model(x)
    forward_s = time.perf_counter() - start
    loss = F.mse_loss(out, y)  # outside the count: the same whether the blocks recompute or not
    start = time.perf_counter()
    loss.backward()
    return {"kept_bytes": sum(kept.values()), "forwards": blocks.forwards, "forward_s": forward_s,
            "backward_s": time.perf_counter() - start}


def train_ddp(recompute: bool, *, steps: int = 6, width: int = 64, depth: int = 4, batch: int = 256,
              lr: float = 0.05) -> dict:
    """Inside ranks: DDP around ``Blocks(width, depth, recompute=recompute)``, SGD for ``steps`` steps,
    each rank on its own batch. Returns the first step's gradients (rank 0's replica), the trained
    parameters, and every step's measurements (``step``)."""
    whole("steps", steps)
    whole("batch", batch)
    blocks = Blocks(width, depth, recompute=recompute)
    model = DDP(blocks)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(batch, width, generator=generator), torch.randn(batch, width, generator=generator)
    measured, grads = [], None
    for _ in range(steps):
        optimizer.zero_grad()
        measured.append(step(model, blocks, x, y))
        grads = grads or [p.grad.clone() for p in blocks.parameters()]
        optimizer.step()
    return {"grads": grads, "params": [p.detach().clone() for p in blocks.parameters()], "steps": measured}
