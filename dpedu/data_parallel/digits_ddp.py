"""DistributedDataParallel training on the digits data: the loop lesson 03 runs on N ranks and on one.

``train`` runs inside a rank started by ``dpedu.launch`` or ``torchrun`` (with ``ddp=True``), or in
a plain process (``ddp=False``) as the single-process reference. Both read the data in the same
global order: ``DistributedSampler`` deals the examples out to the ranks in turn, so the N ranks'
k-th batches of size b together are exactly the single process's k-th batch of size N·b.

Used in lessons 03, 05, 08 and 10, and by ``dpedu.scripts.train_ddp`` and
``dpedu.scripts.train_resumable``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - imported before any process group exists; see below
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dpedu._validate import real, whole
from dpedu.datasets import digits
from dpedu.models import identical_on_every_rank, mlp
from dpedu.models import parameter_checksum as checksum_of_tensors

# Why torch._dynamo is imported above: DDP's constructor imports it on first use, and an import made there,
# while a process group exists, keeps references to the group that nothing releases (torch 2.13, Python 3.11):
# destroy_process_group cannot free it, gloo's worker threads outlive it, and one still releasing the last
# collective's tensors at interpreter shutdown aborts the process: "terminate called without an active
# exception" (pytorch/pytorch#190489). Imported first, nothing leaks; forked ranks inherit it (~1.4 s each).


def digits_loader(batch_size: int, *, seed: int = 0, num_replicas: int | None = None,
                  rank: int | None = None) -> DataLoader:
    """This rank's shard of the digits training set, shuffled by ``seed``, in batches.

    ``num_replicas`` and ``rank`` default to the process group's; pass 1 and 0 outside one.
    ``drop_last=True`` below is the DataLoader's: it drops a last batch shorter than ``batch_size``,
    so every step sees full batches. The sampler's own ``drop_last`` (left False) is another thing:
    it decides whether the shards are padded or trimmed to the same length on every rank.
    """
    data = digits()
    dataset = TensorDataset(data.X_train, data.y_train)
    sampler = DistributedSampler(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)


def train(*, steps: int, batch_size: int, lr: float, ddp: bool = True, reduction: str = "mean",
          accumulation: int = 1, no_sync: bool = True, optimizer: str = "sgd", momentum: float = 0.0,
          seed: int = 0, start_step: int = 0,
          state: dict[str, Any] | None = None, comm_hook: Callable | None = None, comm_state: object = None,
          device: str | torch.device = "cpu") -> dict[str, Any]:
    """Train the digits MLP for ``steps`` optimizer steps of ``batch_size`` examples per rank.

    Epoch after epoch, each reshuffled with ``sampler.set_epoch``, so ``steps`` may exceed an epoch.
    ``accumulation > 1`` splits each batch into that many micro-batches and, with ``no_sync``,
    all-reduces only after the last one. ``momentum`` is SGD's. ``state`` (from an earlier return value)
    and ``start_step`` resume training where it stopped. Returns the model and optimizer state dicts, on
    the CPU.
    """
    whole("steps", steps, minimum=0)
    whole("batch_size", batch_size)
    real("lr", lr, above=0)
    whole("accumulation", accumulation)
    whole("start_step", start_step, minimum=0)
    real("momentum", momentum, at_least=0)
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    if optimizer not in ("sgd", "adam"):
        raise ValueError(f"optimizer must be 'sgd' or 'adam', got {optimizer!r}")
    if batch_size % accumulation:
        raise ValueError(f"batch_size {batch_size} must divide into accumulation={accumulation} micro-batches")
    if ddp and not dist.is_initialized():
        raise RuntimeError("ddp=True needs a process group: run it inside dpedu.launch or torchrun, "
                           "or pass ddp=False for the single-process reference")
    replicas = {} if ddp else {"num_replicas": 1, "rank": 0}
    loader = digits_loader(batch_size, seed=seed, **replicas)
    if len(loader) == 0:
        raise ValueError(f"batch_size={batch_size} is larger than this rank's share of the data")
    model = mlp(64, 32, 10, seed=seed).to(device)
    if state is not None:
        model.load_state_dict(state["model"])
    if ddp:  # wrapping broadcasts rank 0's parameters and buffers to every rank
        model = DDP(model, device_ids=[device] if torch.device(device).type == "cuda" else None)
        if comm_hook is not None:
            model.register_comm_hook(comm_state, comm_hook)
    parameters = model.parameters()
    opt = (torch.optim.SGD(parameters, lr=lr, momentum=momentum) if optimizer == "sgd"
           else torch.optim.Adam(parameters, lr=lr))
    if state is not None:
        opt.load_state_dict(state["optimizer"])
    batches = batches_from(loader, start_step)  # resumes at the same place in the data
    for _ in range(steps):
        x, y = (t.to(device) for t in next(batches))
        opt.zero_grad(set_to_none=True)
        for i, (xs, ys) in enumerate(zip(x.chunk(accumulation), y.chunk(accumulation), strict=True)):
            last = i == accumulation - 1
            with model.no_sync() if ddp and no_sync and not last else nullcontext():
                loss = F.cross_entropy(model(xs), ys, reduction=reduction)
                (loss / accumulation if reduction == "mean" else loss).backward()
        opt.step()
    plain = model.module if ddp else model
    return {"model": _on_cpu(plain.state_dict()), "optimizer": _on_cpu(opt.state_dict())}


def _on_cpu(state: Any) -> Any:
    """``state`` with every tensor in it copied to the CPU: unpickling a CUDA tensor in the notebook
    would initialise CUDA there."""
    if isinstance(state, torch.Tensor):
        return state.cpu()
    if isinstance(state, dict):
        return {key: _on_cpu(value) for key, value in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_on_cpu(value) for value in state)
    return state


def batches_from(loader: DataLoader, start_step: int) -> Iterator[list[torch.Tensor]]:
    """The loader's batches, epoch after epoch, starting at batch ``start_step`` of the whole run.

    ``set_epoch`` reseeds the sampler's shuffle: without it every epoch repeats the first one's order.
    """
    epoch, skip = divmod(start_step, len(loader))
    while True:
        loader.sampler.set_epoch(epoch)
        yield from itertools.islice(loader, skip, None)
        epoch, skip = epoch + 1, 0


def counting_allreduce() -> tuple[Callable, list[int]]:
    """DDP's own all-reduce as a communication hook that also records every bucket it sends.

    Returns the hook (for ``train(comm_hook=...)`` or ``register_comm_hook``) and the list it fills.
    """
    calls: list[int] = []

    def hook(state, bucket):  # no annotations: DDP checks them, and here they would be strings
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    return hook, calls


def parameter_checksum(state: dict[str, Any]) -> float:
    """The sum of every parameter in float64: one number that train_ddp.py prints and lessons compare."""
    return checksum_of_tensors(state["model"].values())


def same_parameters_on_every_rank(state: dict[str, Any]) -> bool:
    """True when every rank holds bit-identical parameters (compared through an all-gather)."""
    return identical_on_every_rank(state["model"].values())
