"""Data parallelism combined with model parallelism: process subgroups, and DDP over a split module.

With t-way tensor parallelism on N ranks, rank r belongs to two groups: its tensor-parallel group (the
t ranks of the same r // t, which split every layer and all-reduce activations inside it) and its
data-parallel group (the N/t ranks of the same r % t, which hold the same slices, see different data
and average their gradients). ``subgroups`` builds both with ``dist.new_group``; ``train_dp_tp`` trains
Megatron's MLP block that way, DDP averaging over the data-parallel group only, and equals one process
training the whole block on the global batch. ``train_mesh`` builds the same layout with torch's own
API, as torchtitan does: a 2-D ``DeviceMesh`` ("dp" × "tp"), ``parallelize_module`` to split the layers
over ``mesh["tp"]`` (DTensors), and FSDP2's ``fully_shard`` over ``mesh["dp"]``.

A module split across *devices* (pipeline-style, half on one GPU, half on another) is wrapped in DDP
with ``device_ids=None``: each rank owns its own devices, disjoint from every other rank's
(``split_devices``); it trains in full float32 (``runtime.float32_precision``), as the lesson compares it with
one CPU process, even where the ranks were started with gloo. Used in lesson 12b (part 2).
"""

from __future__ import annotations

import logging
import warnings

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu._validate import real, whole
from dpedu.beyond.model_parallel import megatron_mlp
from dpedu.runtime.float32_precision import pin_full_float32_precision
from dpedu.runtime.traffic import bytes_sent

__all__ = ["subgroups", "TensorParallelMLP", "mlp_problem", "train_dp_tp", "train_mesh", "train_whole_mlp",
           "split_devices", "TwoDeviceMLP", "train_split", "split_batch"]


def subgroups(tensor_parallel: int) -> tuple[dist.ProcessGroup, dist.ProcessGroup]:
    """This rank's tensor-parallel group (ranks with the same r // t) and data-parallel group (the same
    r % t). ``new_group`` is collective: every rank creates every group, in the same order."""
    world, rank = dist.get_world_size(), dist.get_rank()
    t = _tensor_parallel_size(tensor_parallel)
    tp = dp = None
    for first in range(0, world, t):  # [0, 1], [2, 3]: each splits the layers of one replica
        group = dist.new_group(list(range(first, first + t)))
        tp = group if rank // t == first // t else tp
    for offset in range(t):  # [0, 2], [1, 3]: the ranks holding the same slices
        group = dist.new_group(list(range(offset, world, t)))
        dp = group if rank % t == offset else dp
    return tp, dp


def _tensor_parallel_size(tensor_parallel: int) -> int:
    """``tensor_parallel``, checked: a whole number that divides this group's world size."""
    world = dist.get_world_size()
    t = whole("tensor_parallel", tensor_parallel, maximum=world)
    if world % t:
        raise ValueError(f"tensor_parallel must divide the world size {world}, got {t}")
    return t


def _replica_rows(batch: int, replica: int, replicas: int) -> slice:
    """The rows of a global batch of ``batch`` that data-parallel replica ``replica`` of ``replicas`` trains on."""
    return slice(replica * batch // replicas, (replica + 1) * batch // replicas)


class TensorParallelMLP(nn.Module):
    """This rank's column slice of A and row slice of B of the block GeLU(x A) B, split over ``group``."""

    def __init__(self, A: torch.Tensor, B: torch.Tensor, group: dist.ProcessGroup):
        super().__init__()
        t, r = dist.get_world_size(group), dist.get_rank(group)
        self.A = nn.Parameter(A.chunk(t, dim=1)[r].clone())
        self.B = nn.Parameter(B.chunk(t, dim=0)[r].clone())
        self.group, self.log = group, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return megatron_mlp(x, self.A, self.B, self.group, self.log)


def mlp_problem(width: int = 16, batch: int = 16, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A global batch ``x``, targets ``y`` (batch, width), and initial weights A (width, 4 width), B."""
    whole("width", width)
    whole("batch", batch)
    generator = torch.Generator().manual_seed(seed)
    x, y = torch.randn(batch, width, generator=generator), torch.randn(batch, width, generator=generator)
    A = torch.randn(width, 4 * width, generator=generator) / width ** 0.5
    B = torch.randn(4 * width, width, generator=generator) / (4 * width) ** 0.5
    return x, y, A, B


def train_dp_tp(*, steps: int, lr: float, tensor_parallel: int = 2) -> dict:
    """Inside ranks: SGD on ``mlp_problem()``, each layer split ``tensor_parallel`` ways, each
    data-parallel replica on its share of the global batch, DDP averaging gradients over the
    data-parallel group only. Returns this rank's trained slices, both groups' ranks, the
    tensor-parallel all-reduces of the last step and the rows of the global batch it trained on."""
    whole("steps", steps)
    real("lr", lr, above=0)
    tp, dp = subgroups(tensor_parallel)
    x, y, A, B = mlp_problem()
    model = DDP(TensorParallelMLP(A, B, tp), process_group=dp)  # averages over the replicas, not the slices
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    share = _replica_rows(len(x), dist.get_rank(dp), dist.get_world_size(dp))
    for _ in range(steps):
        model.module.log.clear()
        optimizer.zero_grad()
        F.mse_loss(model(x[share]), y[share]).backward()
        optimizer.step()
    return {"A": model.module.A.detach().clone(), "B": model.module.B.detach().clone(),
            "tp_ranks": dist.get_process_group_ranks(tp), "dp_ranks": dist.get_process_group_ranks(dp),
            "tp_all_reduces": list(model.module.log), "rows": (share.start, share.stop)}


def train_mesh(*, steps: int, lr: float, tensor_parallel: int = 2) -> dict:
    """Inside ranks: ``train_dp_tp``'s training with torch's API. The block GeLU(x A) B as two Linear
    layers, split by ``parallelize_module`` over ``mesh["tp"]`` (the first by columns, the second by rows:
    Megatron's split) and sharded by FSDP2 over ``mesh["dp"]``. Returns the trained A and B (whole), each
    weight's placements, both mesh groups' ranks, and this rank's collectives of the last step."""
    whole("steps", steps)
    real("lr", lr, above=0)
    t = _tensor_parallel_size(tensor_parallel)
    mesh = init_device_mesh("cpu", (dist.get_world_size() // t, t), mesh_dim_names=("dp", "tp"))
    x, y, A, B = mlp_problem()
    model = nn.Sequential(nn.Linear(len(A), A.shape[1], bias=False), nn.GELU(),
                          nn.Linear(len(B), B.shape[1], bias=False))
    with torch.no_grad():  # a Linear holds its weight transposed: x A is x @ weight.T
        model[0].weight.copy_(A.T)
        model[2].weight.copy_(B.T)
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    share = _replica_rows(len(x), mesh["dp"].get_local_rank(), mesh["dp"].size())
    with warnings.catch_warnings():
        # FSDP2 warns that the Sequential's output is a view, in case the caller changes it in place; nothing does
        warnings.filterwarnings("ignore", message=".*returned a view tensor")
        for _ in range(steps):
            optimizer.zero_grad()
            with bytes_sent() as sent:
                F.mse_loss(model(x[share]), y[share]).backward()
            optimizer.step()
    # full_tensor() gathers over both mesh dimensions, one after the other, and logs that one merged
    # gather would be faster: true, and beside the point for two small weights read once
    redistribute_log = logging.getLogger("torch.distributed.tensor._redistribute")
    level = redistribute_log.level
    redistribute_log.setLevel(logging.ERROR)
    try:
        A_trained, B_trained = (model[i].weight.full_tensor().T.detach() for i in (0, 2))
    finally:
        redistribute_log.setLevel(level)
    return {"A": A_trained, "B": B_trained,
            "placements": {name: tuple(map(_placement, p.placements)) for name, p in model.named_parameters()},
            "tp_ranks": mesh["tp"].mesh.tolist(), "dp_ranks": mesh["dp"].mesh.tolist(), "calls": sent.calls}


def _placement(placement: object) -> str:
    """A DTensor placement spelt out, the same in every torch (their own str and repr change between releases)."""
    name = type(placement).__name__.lstrip("_")
    if hasattr(placement, "split_factor"):  # _StridedShard: a shard of a shard
        return f"{name}(dim={placement.dim}, split_factor={placement.split_factor})"
    return f"{name}(dim={placement.dim})" if hasattr(placement, "dim") else f"{name}()"


def train_whole_mlp(*, steps: int, lr: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One process: the same SGD on the whole block and the global batch; returns the trained A, B."""
    whole("steps", steps)
    real("lr", lr, above=0)
    x, y, A, B = mlp_problem()
    A, B = A.clone().requires_grad_(), B.clone().requires_grad_()
    optimizer = torch.optim.SGD([A, B], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(F.gelu(x @ A) @ B, y).backward()
        optimizer.step()
    return A.detach(), B.detach()


def split_devices(rank: int, world_size: int, gpus: int) -> tuple[torch.device, torch.device]:
    """The two devices rank ``rank`` puts its two halves on: GPUs 2r and 2r + 1 where there are enough
    GPUs, so that no two ranks share one; otherwise the CPU twice (a stand-in)."""
    whole("world_size", world_size)
    whole("rank", rank, minimum=0, maximum=world_size - 1)
    whole("gpus", gpus, minimum=0)
    if gpus >= 2 * world_size:
        return torch.device(f"cuda:{2 * rank}"), torch.device(f"cuda:{2 * rank + 1}")
    return torch.device("cpu"), torch.device("cpu")


class TwoDeviceMLP(nn.Module):
    """16 -> 32 -> 4, the first layer on ``devices[0]`` and the second on ``devices[1]``; forward moves
    the activation between them, so the output lands on ``devices[1]``."""

    def __init__(self, devices: tuple[torch.device, torch.device], seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.devices = devices
        self.first = nn.Linear(16, 32).to(devices[0])
        self.second = nn.Linear(32, 4).to(devices[1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.tanh(self.first(x.to(self.devices[0]))).to(self.devices[1]))


def train_split(*, steps: int, lr: float, gpus: int = 0) -> list[torch.Tensor]:
    """Inside ranks: DDP around this rank's ``TwoDeviceMLP`` on ``split_devices`` (GPUs 2r and 2r + 1
    when ``gpus`` suffice, else the CPU), SGD on this rank's batch of 8. Returns the trained parameters,
    on the CPU. DDP needs ``device_ids=None`` for a module on several devices: the module moves its own
    inputs and activations, and every rank's devices are its own."""
    whole("steps", steps)
    real("lr", lr, above=0)
    devices = split_devices(dist.get_rank(), dist.get_world_size(), gpus)
    model = DDP(TwoDeviceMLP(devices), device_ids=None)  # not device_ids=[...]: that is for one-device modules
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = split_batch(dist.get_rank())
    pin_full_float32_precision()  # in this rank: the lesson compares the result with one CPU process, no TF32
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y.to(devices[1])).backward()
        optimizer.step()
    return [p.detach().cpu().clone() for p in model.parameters()]


def split_batch(rank: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch for ``train_split``: inputs (size, 16) and targets (size, 4)."""
    generator = torch.Generator().manual_seed(rank)
    return torch.randn(size, 16, generator=generator), torch.randn(size, 4, generator=generator)
