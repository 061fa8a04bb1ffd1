"""One optimizer step of lesson 13's run: accumulate micro-batches under ``no_sync``, clip, scale, step.

Gradient accumulation: the step's ``accumulate`` micro-batches run forward and backward one after another,
their gradients adding up in ``.grad``; each loss is divided by ``accumulate``, so the sum is the mean over
the step's examples. DDP would all-reduce after every backward; inside ``ddp.no_sync()`` it does not, and
the last backward, outside it, all-reduces the accumulated gradients once: one all-reduce per step, not
``accumulate`` (PyTorch's DDP notes; lesson 03).

Mixed precision: ``torch.autocast`` runs the forward in 16 bits, the loss in float32. With float16 a
``GradScaler`` multiplies the loss before backward so that small gradients do not vanish, unscales the
gradients before clipping, and skips a step whose gradients overflowed (lesson 11). With float32 or
bfloat16 the scaler is built disabled and each of its calls does nothing.

Used in lesson 13a and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dpedu.training_run.addition import answer_length

__all__ = ["PRECISIONS", "resolve_precision", "autocast", "answer_loss", "train_step"]

PRECISIONS = ("auto", "float32", "bfloat16", "float16")


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: float16 (with a GradScaler) on CUDA; float32 on CPU, where bfloat16 autocast made this
    small model slower, not faster (measured for lesson 13). float16 needs CUDA. float16 is the teaching case
    (lesson 11's loss scaling, and every CUDA GPU has it); on Ampere and newer GPUs bfloat16, which needs no
    scaler, is the usual choice (``torch.cuda.is_bf16_supported()``; here ``--precision bfloat16``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "auto":
        return "float16" if device.type == "cuda" else "float32"
    if precision == "float16" and device.type != "cuda":
        raise ValueError("--precision float16 needs CUDA (it needs a GradScaler and CPU autocast does not "
                         "do float16 well); on CPU use float32 or bfloat16")
    return precision


def autocast(precision: str, device: torch.device) -> Any:
    """The context the forward pass and the loss run in: autocast to ``precision``'s 16 bits, or nothing."""
    if precision == "float32":
        return nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, precision))


def answer_loss(logits: torch.Tensor, tokens: torch.Tensor, digits: int) -> torch.Tensor:
    """Mean cross-entropy of the answer digits only (the prompt's digits are random: nothing to learn there).

    ``logits`` are the model's on ``tokens[:, :-1]``; position t predicts token t + 1. Computed in float32.
    """
    length = answer_length(digits)
    predicted = logits[:, -length:].float()
    return F.cross_entropy(predicted.reshape(-1, predicted.shape[-1]), tokens[:, -length:].reshape(-1))


def train_step(ddp: nn.Module, micro_batches: list[torch.Tensor], optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler, *, digits: int, clip: float, precision: str) -> torch.Tensor:
    """One optimizer step over ``micro_batches`` (this rank's share of the global batch); returns this
    rank's mean loss over them, detached (``replicas.global_mean`` turns it into the global batch's loss).

    ``ddp`` is the ``DistributedDataParallel``-wrapped model. Guarantees: one gradient all-reduce per call;
    the same clipped gradient and update on every rank, so the replicas stay identical.
    """
    device = next(ddp.parameters()).device
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    for i, tokens in enumerate(micro_batches):
        tokens = tokens.to(device, non_blocking=True)
        last = i == len(micro_batches) - 1
        with nullcontext() if last else ddp.no_sync():  # all-reduce only in the last backward
            with autocast(precision, device):
                loss = answer_loss(ddp(tokens[:, :-1]), tokens, digits) / len(micro_batches)
            scaler.scale(loss).backward()
        total += loss.detach()
    scaler.unscale_(optimizer)  # clip the true gradients, not the float16-scaled ones
    # After the last backward every rank holds the same averaged gradient (DDP's all-reduce), so every rank
    # computes the same norm, the same clipping factor and the same update, without another message.
    # Clipping before that average (each rank its own gradient) would scale the ranks' parts differently.
    torch.nn.utils.clip_grad_norm_(ddp.parameters(), clip)
    scaler.step(optimizer)  # skipped when a float16 gradient overflowed; then the scale is lowered
    scaler.update()
    return total
