"""Activation checkpointing (recomputation): keep each block's input, recompute the rest in backward.

Without it, autograd keeps every tensor a block's backward needs from forward to backward. With
``torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)`` it keeps only the block's input
and, during backward, just before that block's backward, runs the block's forward again, but only as far
as backward needs: the non-reentrant checkpoint stops recomputing once the last tensor backward needs is
saved again ("early stop", on by default; ``early_stop=False`` recomputes whole blocks). The gradients are
the same. The non-reentrant variant (torch's recommended one) works under DDP and with inputs that need
no gradient. ``step`` measures both sides: the bytes autograd keeps (counted with
``pipeline.saved_storages``, the parameters left out), the matrix products torch actually runs in forward
and in backward (the work; a recomputation stopped early runs fewer than a whole forward), and the time
forward and backward take. Used in lesson 11b.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from dpedu._validate import tensor, whole
from dpedu.beyond.pipeline import saved_storages

__all__ = ["Blocks", "CountMatmuls", "checkpointing_costs_backward", "checkpointing_cpu_ms", "step", "train_ddp"]


class Blocks(nn.Module):
    """``depth`` MLP blocks Linear(w, 4w) + GELU + Linear(4w, w), Megatron's MLP shape, each run through
    ``checkpoint`` when ``recompute`` (with torch's early stop unless ``early_stop=False``)."""

    def __init__(self, width: int = 64, depth: int = 4, *, recompute: bool, early_stop: bool = True,
                 seed: int = 0):
        super().__init__()
        whole("width", width)
        whole("depth", depth)
        for name, value in (("recompute", recompute), ("early_stop", early_stop)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be True or False, got {value!r}")
        torch.manual_seed(seed)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(),
                                                  nn.Linear(4 * width, width)) for _ in range(depth))
        self.recompute, self.early_stop = recompute, early_stop

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with set_checkpoint_early_stop(self.early_stop):
            for block in self.blocks:
                x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        return x


class CountMatmuls(TorchDispatchMode):
    """Counts the matrix products torch runs while active (``aten.mm``, ``aten.addmm``), below autograd:
    what is computed, recomputation included, not which modules were called. Every matmul of ``Blocks``
    multiplies a (batch, w) or (w, batch) matrix by a w x 4w one, so they cost the same."""

    MATMULS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func in self.MATMULS
        return func(*args, **(kwargs or {}))


def step(model: nn.Module, blocks: Blocks, x: torch.Tensor, y: torch.Tensor) -> dict:
    """One forward and backward of ``model`` (``blocks`` itself, or DDP around it) on ``x``, ``y``.
    Returns the bytes autograd kept from forward to backward for the blocks (the loss's own saved
    tensors and the parameters left out), the matrix products run in forward and in backward, and the
    seconds of forward and of backward, by the wall clock and in this thread's CPU time, which a busy
    machine does not inflate: time spent waiting for the CPU, or for the other ranks, is not in it (the
    count's own overhead is in both, well under a millisecond here)."""
    if not isinstance(blocks, Blocks):
        raise TypeError(f"blocks must be a Blocks, got {type(blocks).__name__}")
    tensor("x", x, dim=2)
    tensor("y", y, dim=2)
    kept: dict[int, int] = {}
    params = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    wall, cpu = time.perf_counter(), time.thread_time()
    with saved_storages(lambda t: kept, left_out=params), CountMatmuls() as forward:
        out = model(x)
    forward_s, forward_cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
    loss = F.mse_loss(out, y)  # outside the count: the same whether the blocks recompute or not
    wall, cpu = time.perf_counter(), time.thread_time()
    with CountMatmuls() as backward:
        loss.backward()
    return {"kept_bytes": sum(kept.values()), "forward_matmuls": forward.count, "backward_matmuls": backward.count,
            "forward_s": forward_s, "backward_s": time.perf_counter() - wall,
            "forward_cpu_s": forward_cpu_s, "backward_cpu_s": time.thread_time() - cpu}


def train_ddp(*, steps: int = 6, width: int = 64, depth: int = 4, batch: int = 256, lr: float = 0.05) -> dict:
    """Inside ranks: DDP around ``Blocks(width, depth)`` twice, without and with recomputation (the same
    initial parameters), SGD for ``steps`` steps each, each rank on its own batch. The two models take
    their steps in turn, first one then the other first, so that a busy spell on the machine slows both
    alike and their times compare step by step. Returns, keyed by ``recompute`` (False, True), the first
    step's gradients (rank 0's replica), the trained parameters, and every step's measurements (``step``)."""
    whole("steps", steps)
    whole("batch", batch)
    blocks = {r: Blocks(width, depth, recompute=r) for r in (False, True)}
    models = {r: DDP(b) for r, b in blocks.items()}
    optimizers = {r: torch.optim.SGD(m.parameters(), lr=lr) for r, m in models.items()}
    generator = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(batch, width, generator=generator), torch.randn(batch, width, generator=generator)
    measured, first_grads = {False: [], True: []}, {}
    for i in range(steps):
        for r in (False, True) if i % 2 == 0 else (True, False):
            optimizers[r].zero_grad()
            measured[r].append(step(models[r], blocks[r], x, y))
            if r not in first_grads:
                first_grads[r] = [p.grad.clone() for p in blocks[r].parameters()]
            optimizers[r].step()
    return {r: {"grads": first_grads[r], "params": [p.detach().clone() for p in blocks[r].parameters()],
                "steps": measured[r]} for r in (False, True)}


def checkpointing_cpu_ms(plain: dict, checkpointed: dict) -> tuple[float, float]:
    """From ``train_ddp``'s two runs (its ``False`` and ``True``): what checkpointing adds to backward (the
    recomputation and checkpointing's own work), in milliseconds of CPU time, and one forward of the plain model.
    The added time is the median, over the steps after the first (a warm-up), of each step's backward with
    checkpointing minus the plain model's backward of the same step (the two ran back to back, so a slow spell of
    the machine slows both); the forward is the plain model's median over the same steps."""
    runs = {"plain": plain, "checkpointed": checkpointed}
    for name, run in runs.items():
        if not isinstance(run, dict) or not isinstance(run.get("steps"), list):
            raise TypeError(f"{name} must be one of train_ddp's runs (a dict with its 'steps'), "
                            f"got {type(run).__name__}")
        if len(run["steps"]) < 2:
            raise ValueError(f"{name} must have at least 2 steps (the first is a warm-up), got {len(run['steps'])}")
    if len(plain["steps"]) != len(checkpointed["steps"]):
        raise ValueError(f"plain and checkpointed must have as many steps, got {len(plain['steps'])} and "
                         f"{len(checkpointed['steps'])}")
    pairs = list(zip(plain["steps"], checkpointed["steps"], strict=True))[1:]

    def median(values: list[float]) -> float:
        return 1e3 * sorted(values)[len(values) // 2]

    return (median([c["backward_cpu_s"] - p["backward_cpu_s"] for p, c in pairs]),
            median([p["forward_cpu_s"] for p, _ in pairs]))


def checkpointing_costs_backward(added_ms: float, forward_ms: float) -> bool:
    """Lesson 11's claim on ``checkpointing_cpu_ms``: checkpointing added at least a quarter of a forward's CPU time
    to backward. Blocks that are not checkpointed add none; torch's checkpoint added from about a third of a
    forward to slightly more than a whole one in the runs we measured (most from 0.6 to 0.9), whatever the CPU's
    kernels. Its recomputation alone is shown by the count of matrix products, not by this time: a checkpoint told
    to save everything (recomputing nothing) still added a fifth to a third of a forward, its own work."""
    return added_ms > forward_ms / 4
