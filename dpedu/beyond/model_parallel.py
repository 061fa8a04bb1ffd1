"""Model parallelism: the layers split across ranks, activations sent forward, gradients sent back.

Rank r holds only its stage, a consecutive slice of the model's blocks. In forward, rank r receives
the activation from rank r - 1, runs its stage and sends the result to rank r + 1; the last rank
computes the loss. In backward the gradient of each activation travels the other way. Nothing is
approximated: the same numbers are computed as in one process, only in other processes, so outputs,
gradients and trained parameters equal the single-process model's up to float rounding. What it costs:
while one stage works, the others wait (lesson 12 measures the timeline); ``pipeline`` fixes that.

Tensor parallelism splits inside a layer instead: ``Copy`` and ``Sum`` are Megatron-LM's *f* and *g*,
and ``megatron_mlp`` the column- then row-parallel MLP block built from them, over any process group
(lesson 12a part 3 on all ranks, lesson 12b part 2 on the tensor-parallel pairs of a 2-D layout).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, tensor, whole

__all__ = ["blocks", "stage_of", "regression_data", "forward_backward", "train", "Copy", "Sum", "megatron_mlp"]


def blocks(width: int = 16, depth: int = 4, seed: int = 0) -> nn.Sequential:
    """``depth`` blocks of Linear(width, width) + Tanh: equal widths, so any split sends (batch, width)."""
    whole("width", width)
    whole("depth", depth)
    torch.manual_seed(seed)
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)))


def stage_of(model: nn.Sequential, stages: int, rank: int) -> nn.Sequential:
    """Rank ``rank``'s consecutive share of ``model``'s blocks when split into ``stages`` stages."""
    if not isinstance(model, nn.Sequential):
        raise TypeError(f"model must be an nn.Sequential of blocks, got {type(model).__name__}")
    whole("stages", stages, maximum=len(model))
    whole("rank", rank, minimum=0, maximum=stages - 1)
    return model[rank * len(model) // stages:(rank + 1) * len(model) // stages]


def regression_data(batch: int, width: int = 16, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch: inputs of shape (batch, width) and targets in (-1, 1) of the same shape."""
    whole("batch", batch)
    whole("width", width)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=generator)
    return x, torch.tanh(x @ torch.randn(width, width, generator=generator) / width ** 0.5)


def forward_backward(stage: nn.Module, x: torch.Tensor, y: torch.Tensor,
                     timeline: list | None = None) -> torch.Tensor | None:
    """One forward and backward through the stages of all ranks; gradients land in each rank's stage.

    ``x`` and ``y`` are used by the first and the last rank; the others only use their shape. Returns
    the output on the last rank (None elsewhere). With ``timeline``, appends (what, start, end) for
    each stretch of computing (``time.monotonic``, one clock for every process of this machine).
    """
    if not isinstance(stage, nn.Module):
        raise TypeError(f"stage must be a torch.nn.Module, got {type(stage).__name__}")
    tensor("x", x)
    tensor("y", y)
    if timeline is not None and not isinstance(timeline, list):
        raise TypeError(f"timeline must be a list or None, got {type(timeline).__name__}")
    rank, world = dist.get_rank(), dist.get_world_size()
    clock = time.monotonic
    if rank > 0:  # the activation of the stage before
        x = torch.empty_like(x)
        dist.recv(x, rank - 1)
        x.requires_grad_()
    start = clock()
    out = stage(x)
    _note(timeline, "forward", start, clock())
    if rank < world - 1:
        dist.send(out.detach(), rank + 1)
        grad = torch.empty_like(out)
        dist.recv(grad, rank + 1)  # d loss / d out, from the stage after
        start = clock()
        out.backward(grad)
    else:
        start = clock()
        F.mse_loss(out, y).backward()
    _note(timeline, "backward", start, clock())
    if rank > 0:
        dist.send(x.grad, rank - 1)  # d loss / d x, for the stage before
    return out.detach() if rank == world - 1 else None


def _note(timeline: list | None, what: str, start: float, end: float) -> None:
    if timeline is not None:
        timeline.append((what, start, end))


def train(*, steps: int, lr: float, batch: int = 32, width: int = 16, depth: int = 4) -> dict[str, torch.Tensor]:
    """Plain SGD on ``regression_data``. Inside a process group: model-parallel, each rank training its
    stage; outside one: the whole model in this process. Returns the parameters this process holds,
    named as in the whole model (so the ranks' dictionaries together make the single process's)."""
    whole("steps", steps)
    real("lr", lr, above=0)
    model = blocks(width, depth)
    x, y = regression_data(batch, width)
    parallel = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if parallel else 0
    stages = dist.get_world_size() if parallel else 1
    if stages > depth:
        raise ValueError(f"depth must be at least the number of ranks ({stages}), got {depth}")
    stage = stage_of(model, stages, rank)
    optimizer = torch.optim.SGD(stage.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        if parallel:
            forward_backward(stage, x, y)
        else:
            F.mse_loss(stage(x), y).backward()
        optimizer.step()
    return {name: p.detach().clone() for name, p in stage.named_parameters()}  # a slice keeps the block numbers


class Copy(torch.autograd.Function):  # f: identity forward, all-reduce of the input's gradient backward
    """Megatron's *f*: the identity in forward; in backward, the all-reduce over ``group`` (None: every
    rank) of the gradient of its input, each rank's part of which is partial. Appends "backward" to
    ``log`` (a list, or None) for each all-reduce."""

    @staticmethod
    def forward(ctx, x, group=None, log=None):
        ctx.group, ctx.log = group, log
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad.clone(), "backward", ctx.group, ctx.log), None, None


class Sum(torch.autograd.Function):  # g: all-reduce of the partial outputs forward, identity backward
    """Megatron's *g*: the all-reduce over ``group`` of the ranks' partial outputs in forward; the
    identity in backward. Appends "forward" to ``log`` for each all-reduce."""

    @staticmethod
    def forward(ctx, partial, group=None, log=None):
        return _all_reduce(partial.clone(), "forward", group, log)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


def _all_reduce(tensor: torch.Tensor, when: str, group, log: list | None) -> torch.Tensor:
    if log is not None:
        log.append(when)
    dist.all_reduce(tensor, group=group)
    return tensor


def megatron_mlp(x: torch.Tensor, A_r: torch.Tensor, B_r: torch.Tensor, group=None,
                 log: list | None = None) -> torch.Tensor:
    """GeLU(x A) B from this rank's column slice ``A_r`` of A and row slice ``B_r`` of B: every rank of
    ``group`` gets the whole output, with one all-reduce in forward and one in backward (if ``x``
    needs a gradient). Equal to the unsplit block up to float rounding."""
    return Sum.apply(F.gelu(Copy.apply(x, group, log) @ A_r) @ B_r, group, log)
