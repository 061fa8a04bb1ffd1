"""Lesson 08's experiments: a small conv net with BatchNorm on the digits, on N ranks or in one process.

``train`` runs inside a rank started by ``dpedu.launch`` (``ddp=True``) or in a plain process
(``ddp=False``, the reference with the whole batch). Its options are the conditions under which N
ranks of batch b equal one process of batch N·b, each of which can be broken on purpose: the norm
layer, the loss reduction, the sampler's seed, the shards' padding, and the random streams of
dropout and augmentation.

Used in lesson 08.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - before any process group exists: see the note in dpedu/data_parallel/digits_ddp.py
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dpedu._validate import real, tensor, whole
from dpedu.data_parallel.digits_ddp import batches_from
from dpedu.data_parallel.sync_batchnorm import SyncBatchNorm
from dpedu.datasets import digits
from dpedu.runtime import start_methods
from dpedu.runtime.launcher import launch

NORMS = {"batch": nn.BatchNorm2d, "sync": SyncBatchNorm, "none": lambda channels: nn.Identity()}


def convnet(norm: str = "batch", dropout: float = 0.0, seed: int = 0) -> nn.Sequential:
    """Two 3x3 convolutions, each followed by ``norm`` and ReLU, then dropout and a linear classifier.

    Takes the digits' 64 features and views them as one 8x8 image. The same ``seed`` gives the same
    initial weights whatever ``norm`` is.
    """
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {sorted(NORMS)}, got {norm!r}")
    real("dropout", dropout, at_least=0, at_most=0.99)
    whole("seed", seed, minimum=0)
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Unflatten(1, (1, 8, 8)),
        nn.Conv2d(1, 8, 3, padding=1), NORMS[norm](8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), NORMS[norm](16), nn.ReLU(),
        nn.Flatten(), nn.Dropout(dropout), nn.Linear(16 * 4 * 4, 10),
    )


def shift(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Data augmentation: move each 8x8 digit by -1, 0 or +1 pixel in each direction, at random.

    Draws from torch's global random stream; returns the shifted images (flattened again) and each
    image's (down, right) shift.
    """
    if tensor("x", x, dim=2).shape[1] != 64:
        raise ValueError(f"x must hold 8x8 digits as rows of 64 features, got shape {tuple(x.shape)}")
    padded = F.pad(x.view(-1, 1, 8, 8), (1, 1, 1, 1))
    offsets = torch.randint(0, 3, (len(x), 2))
    moved = [image[:, 2 - i:10 - i, 2 - j:10 - j] for image, (i, j) in zip(padded, offsets.tolist(), strict=True)]
    return torch.stack(moved).flatten(1), offsets - 1


def train(*, steps: int, batch_size: int, lr: float, ddp: bool = True, norm: str = "sync", dropout: float = 0.0,
          augment: bool = False, reduction: str = "mean", same_random_stream: bool = False,
          sampler_seed_per_rank: bool = False, drop_last: bool = True, broadcast_buffers: bool = True,
          seed: int = 0) -> dict[str, Any]:
    """Train ``convnet(norm, dropout)`` with SGD for ``steps`` steps of ``batch_size`` examples per rank.

    Every rank builds the model from the same seed, so the replicas start equal even before DDP's
    broadcast. Dropout and augmentation draw from a stream seeded with ``seed + rank``, one per rank,
    unless ``same_random_stream`` (the bug: every rank draws the same masks and shifts). The sampler's
    seed must be the same on every rank; ``sampler_seed_per_rank`` breaks that on purpose.
    ``drop_last=False`` keeps each epoch's short last batch. Returns each step's loss on this rank,
    the model's state dict and its running statistics after every step.
    """
    whole("steps", steps, minimum=0)
    whole("batch_size", batch_size)
    real("lr", lr, above=0)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if ddp and not dist.is_initialized():
        raise RuntimeError("ddp=True needs a process group: run it inside dpedu.launch, or pass ddp=False")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
    data = digits()
    dataset = TensorDataset(data.X_train, data.y_train)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=seed + rank if sampler_seed_per_rank else seed)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=drop_last)
    model = convnet(norm, dropout, seed)  # the same seed everywhere: the same initial weights
    if ddp:  # broadcast_buffers: at every forward, copy rank 0's buffers (running statistics) to every rank
        model = DDP(model, **_buffer_option(broadcast_buffers))
    seed_random_streams(seed, same_random_stream)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, running = [], []
    for x, y in itertools.islice(batches_from(loader, 0), steps):  # set_epoch: a new shuffle, the same on every rank
        if augment:
            x, _ = shift(x)
        loss = F.cross_entropy(model(x), y, reduction=reduction)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        running.append(running_statistics(model))
    plain = model.module if ddp else model
    return {"losses": losses, "model": {k: v.detach().clone() for k, v in plain.state_dict().items()},
            "running": running}


def seed_random_streams(seed: int, same_random_stream: bool = False) -> None:
    """Seed torch's global random stream, which dropout and ``shift`` draw from: ``seed + rank``, one stream
    per rank, so that each rank draws its own masks and shifts; or, the bug, ``seed`` on every rank."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.manual_seed(seed if same_random_stream else seed + rank)


def _buffer_option(broadcast_buffers: bool) -> dict[str, bool]:
    """DDP's option to copy rank 0's buffers to every rank at each forward, as this torch names it:
    ``forward_sync_buffers`` since torch 2.13, ``broadcast_buffers`` before (now deprecated). Not quite a
    rename: ``broadcast_buffers=False`` also skips the broadcast when DDP wraps the model, while
    ``forward_sync_buffers=False`` still makes that one. Here every rank builds the same buffers anyway."""
    parameters = inspect.signature(DDP.__init__).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers": broadcast_buffers}


def running_statistics(model: nn.Module) -> torch.Tensor:
    """Every norm layer's running mean and running variance, in one flat tensor (a copy)."""
    buffers = [b for name, b in model.named_buffers() if name.endswith(("running_mean", "running_var"))]
    return torch.cat([b.flatten() for b in buffers]).clone() if buffers else torch.zeros(0)


def evaluate(state: dict[str, torch.Tensor]) -> tuple[float, int]:
    """In eval mode (BatchNorm uses its running statistics): the training set's mean loss, and how many
    of the 360 test digits come out right. A ``SyncBatchNorm`` state dict loads too: the same names.
    (No test loss: four test digits have a pixel blank in all training digits, standardised to 1e6.)"""
    model = convnet("batch")
    model.load_state_dict(state)
    model.eval()
    data = digits()
    with torch.no_grad():
        loss = F.cross_entropy(model(data.X_train), data.y_train).item()
        correct = int((model(data.X_test).argmax(1) == data.y_test).sum())
    return loss, correct


def gradient_gap(per_rank_batch_sizes: list[int], norm: str = "batch", batches: int = 4) -> list[float]:
    """Run inside ranks: for each per-rank batch size b, how far is the data-parallel gradient from one
    process's on the same N·b examples with plain BatchNorm (relative norm of the difference, mean
    over ``batches`` global batches, at the initial weights)? The data-parallel gradient is DDP's, the
    mean of the ranks' gradients: one all-reduce at the end makes it for all batches at once."""
    _check_batch_sizes("per_rank_batch_sizes", per_rank_batch_sizes, minimum_length=1)
    whole("batches", batches)
    rank, world_size = dist.get_rank(), dist.get_world_size()
    data = digits()
    if world_size * max(per_rank_batch_sizes) * batches > len(data.X_train):
        raise ValueError(f"{batches} batches of {world_size} x {max(per_rank_batch_sizes)} examples need more than "
                         f"the {len(data.X_train)} training digits: ask for fewer or smaller batches")
    model, reference = convnet(norm), convnet("batch")  # the same initial weights; no step is taken
    ours, theirs = [], []
    for b in per_rank_batch_sizes:
        for k in range(batches):
            xs, ys = (t[k * world_size * b:(k + 1) * world_size * b] for t in (data.X_train, data.y_train))
            for net, x, y, grads in ((model, xs[rank * b:(rank + 1) * b], ys[rank * b:(rank + 1) * b], ours),
                                     (reference, xs, ys, theirs)):  # this rank's b examples; all N·b here
                net.zero_grad()
                F.cross_entropy(net(x), y).backward()
                grads.append(torch.cat([p.grad.flatten() for p in net.parameters()]))
    ours, theirs = torch.stack(ours), torch.stack(theirs)
    dist.all_reduce(ours)
    ours /= world_size  # the mean over ranks, as DDP's all-reduce leaves it
    gaps = ((ours - theirs).norm(dim=1) / theirs.norm(dim=1)).view(len(per_rank_batch_sizes), batches)
    return gaps.mean(1).tolist()


def batchnorm_step(batch_sizes: list[int], kind: str = "dpedu", device: str = "cpu") -> dict[str, torch.Tensor]:
    """One DDP step of a conv + BatchNorm layer on this rank's share of a fixed global batch.

    ``kind="dpedu"``: ``dpedu.SyncBatchNorm``; ``"torch"``: ``nn.SyncBatchNorm.convert_sync_batchnorm``
    (not on CPU); ``"plain"``: ``nn.BatchNorm2d`` (per replica); outside a process group, the whole batch
    in one process. The loss is the sum of output times a fixed weight, so that the per-rank losses
    add up to the whole batch's. Returns this rank's outputs and input gradient, the parameter
    gradients (DDP's average over ranks, times the world size: their sum) and the running statistics.
    """
    if kind not in ("dpedu", "torch", "plain"):
        raise ValueError(f"kind must be 'dpedu', 'torch' or 'plain', got {kind!r}")
    _check_batch_sizes("batch_sizes", batch_sizes, minimum_length=1)
    distributed = dist.is_initialized()
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(sum(batch_sizes), 1, 6, 6, generator=generator)
    weight = torch.randn(sum(batch_sizes), 4, 6, 6, generator=generator)
    if distributed:
        start = sum(batch_sizes[:rank])
        x, weight = x[start:start + batch_sizes[rank]], weight[start:start + batch_sizes[rank]]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), SyncBatchNorm(4) if kind == "dpedu" else nn.BatchNorm2d(4))
    if kind == "torch":
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # before DDP wraps it, as torch says
    model = model.to(device)
    if distributed:
        model = DDP(model, device_ids=[device] if device != "cpu" else None)
    x = x.to(device).requires_grad_()
    out = model(x)
    (out * weight.to(device)).sum().backward()
    plain = model.module if distributed else model
    plain.eval()  # then BatchNorm uses the running statistics
    with torch.no_grad():
        held_out = plain(torch.randn(3, 1, 6, 6, generator=generator).to(device))
    return {"output": out.detach().cpu(), "input grad": x.grad.cpu(),
            "parameter grads": torch.cat([p.grad.flatten() * world_size for p in plain.parameters()]).cpu(),
            "running statistics": running_statistics(plain).cpu(), "eval output": held_out.cpu()}


def sync_batchnorm_on_this_machine(batch_sizes: list[int]) -> tuple[str, list[dict[str, torch.Tensor]]]:
    """``batchnorm_step`` on one rank per entry of ``batch_sizes``, with ``nn.SyncBatchNorm`` over nccl
    when there is a GPU per rank, else with ``dpedu.SyncBatchNorm`` over gloo. Returns the kind used
    and the ranks' results."""
    _check_batch_sizes("batch_sizes", batch_sizes, minimum_length=2)
    if start_methods.gpu_count() >= len(batch_sizes):
        return "torch", launch(_on_gpu, len(batch_sizes), args=(batch_sizes,), backend="nccl")
    return "dpedu", launch(batchnorm_step, len(batch_sizes), args=(batch_sizes,))


def _check_batch_sizes(name: str, sizes: object, minimum_length: int) -> None:
    if not isinstance(sizes, list) or len(sizes) < minimum_length:
        raise ValueError(f"{name} must be a list of at least {minimum_length} batch sizes, got {sizes!r}")
    for size in sizes:
        whole(f"each of {name}", size)


def _on_gpu(batch_sizes: list[int]) -> dict[str, torch.Tensor]:
    # Compared with float32 on the CPU: launch's nccl ranks compute without TF32 (runtime.float32_precision).
    return batchnorm_step(batch_sizes, "torch", f"cuda:{dist.get_rank()}")


def torch_refusals() -> list[str]:
    """Run inside CPU ranks: what ``nn.SyncBatchNorm`` says when trained on CPU, and when DDP wraps it."""
    messages = []
    layer = nn.SyncBatchNorm(4)
    for attempt in (lambda: layer(torch.randn(2, 4, 3, 3)), lambda: DDP(nn.Sequential(nn.Conv2d(1, 4, 3), layer))):
        try:
            attempt()
            messages.append("(no error)")
        except ValueError as exc:
            messages.append(str(exc))
    return messages
