"""ZeRO and FSDP: what each rank holds, by the formula and measured, and what the ranks send.

Plain data parallelism keeps a whole copy of the *model states* on every rank: parameters, gradients
and the optimizer's state. Rajbhandari et al. (2020, ZeRO, arXiv:1910.02054) shard them over the N
ranks instead: stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
With mixed-precision Adam (2 bytes of fp16 weights, 2 of fp16 gradients and K = 12 of fp32 master
weights, momentum and variance per parameter) a rank holds, for Ψ parameters,
DDP 16Ψ, stage 1 4Ψ + 12Ψ/N, stage 2 2Ψ + 14Ψ/N, stage 3 16Ψ/N bytes. That 2 + 2 + 12 split is the
Apex (O2) / DeepSpeed layout. torch's own mixed precision (``torch.autocast``, FSDP2's
``MixedPrecisionPolicy``) keeps float32 parameters and gradients and casts on the fly: 4 + 4 + 8, the same
16Ψ in all, but stage 1 becomes 8Ψ + 8Ψ/N and stage 2 4Ψ + 12Ψ/N (``PRECISIONS``).

In torch: ``ZeroRedundancyOptimizer`` is stage 1 (with DDP for the gradients), and FSDP2's
``fully_shard`` is stage 3. Stage 2's nearest counterparts are FSDP1's ``SHARD_GRAD_OP`` and FSDP2's
``reshard_after_forward=False``: gradients and optimizer state sharded, the full parameters kept from
forward to backward (ZeRO-2 keeps them all the time); here stage 2 is its formula only. On CPU the
training here is plain float32 Adam: 4 + 4 + 8 bytes per parameter, the same formulas with other byte
counts. ``held_bytes`` measures what a rank actually holds; ``train`` trains the same model under DDP,
ZeRO-1 and FSDP2 and counts what their collectives send (``dpedu.runtime.traffic.bytes_sent``). DDP holds
its gradients in flat buckets for the all-reduce; only with ``gradient_as_bucket_view=True`` (not the
default) are the parameters' ``.grad`` views of those buckets, else every gradient is held twice:
``train`` measures both.

Used in lessons 11a and 11b (and its byte layouts in lesson 12b).
"""

from __future__ import annotations

import torch
import torch._dynamo  # noqa: F401 - before any process group exists: see the note in dpedu/data_parallel/digits_ddp.py
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu._validate import real, whole
from dpedu.runtime.traffic import bytes_sent

__all__ = ["model_state_bytes", "held_bytes", "tanh_mlp", "batch", "train", "shard_layers", "KINDS", "PRECISIONS"]

KINDS = ("ddp", "zero1", "fsdp")
# bytes per parameter of weights, gradients and optimizer state (Adam: fp32 master copy if any, 2 moments)
PRECISIONS = {"apex": {"weight_bytes": 2, "grad_bytes": 2, "optimizer_bytes": 12},
              "autocast": {"weight_bytes": 4, "grad_bytes": 4, "optimizer_bytes": 8}}


def model_state_bytes(params: float, world_size: int, stage: int, *, weight_bytes: float = 2,
                      grad_bytes: float = 2, optimizer_bytes: float = 12) -> dict[str, float]:
    """Bytes of parameters, gradients and optimizer state one rank holds under ZeRO ``stage`` (0: DDP),
    after Rajbhandari et al. (2020); the defaults are their mixed-precision Adam (16 bytes/parameter)."""
    real("params", params, at_least=0)
    whole("world_size", world_size)
    whole("stage", stage, minimum=0, maximum=3)
    for name, value in (("weight_bytes", weight_bytes), ("grad_bytes", grad_bytes),
                        ("optimizer_bytes", optimizer_bytes)):
        real(name, value, at_least=0)
    shard = {"parameters": stage >= 3, "gradients": stage >= 2, "optimizer": stage >= 1}
    per_param = {"parameters": weight_bytes, "gradients": grad_bytes, "optimizer": optimizer_bytes}
    held = {what: params * per_param[what] / (world_size if shard[what] else 1) for what in per_param}
    return {**held, "total": sum(held.values())}


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the parameters, gradients and optimizer state this rank holds: the local tensors
    (an FSDP parameter is a DTensor; its local shard is what this rank stores). Optimizer state counts
    the per-parameter tensors (Adam's two moments); the scalar step counters are left out."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    state = optimizer.optim.state if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer.state

    def nbytes(tensors):
        return sum(_local(t).numel() * _local(t).element_size() for t in tensors)

    return {"parameters": nbytes(model.parameters()),
            "gradients": nbytes(p.grad for p in model.parameters() if p.grad is not None),
            "optimizer": nbytes(t for s in state.values() for t in s.values()
                                if isinstance(t, torch.Tensor) and t.dim() > 0)}


def tanh_mlp(seed: int = 0) -> nn.Sequential:
    """16 -> 32 -> 32 -> 4 with Tanh: 1,732 parameters, every weight's rows divisible by 1, 2 and 4."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def batch(rank: int, step: int, size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s inputs and targets at ``step``: the same on any number of ranks (``train`` and lesson 11's
    other trainings use them, so that their parameters compare)."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, 16, generator=generator), torch.randn(size, 4, generator=generator)


def train(kind: str, *, steps: int, lr: float = 1e-2, device: str | torch.device = "cpu",
          bucket_view: bool = True) -> dict:
    """Inside ranks: train ``tanh_mlp()`` with Adam for ``steps`` steps under ``kind`` ("ddp", "zero1" or
    "fsdp"; or "hsdp": FSDP2 on a 2-D mesh, rows of 2 ranks, lesson 11b, part 1), each rank on its own
    batches, on ``device`` (the CPU, or this rank's GPU under nccl).
    Returns the whole trained parameters (on the CPU), the bytes this rank holds after the last step
    (``held_bytes``), what its collectives sent in the last step, by kind (``traffic``, from
    ``bytes_sent``), for ZeRO-1 the shapes of the parameters whose optimizer state this rank owns, and, for
    DDP and ZeRO-1, ``bucket_copy``: the bytes of DDP's gradient buckets that are not also the parameters'
    ``.grad`` (0 with ``bucket_view``, DDP's ``gradient_as_bucket_view``; all the gradients' bytes without)."""
    if kind not in KINDS + ("hsdp",):
        raise ValueError(f"kind must be one of {KINDS + ('hsdp',)}, got {kind!r}")
    if not isinstance(bucket_view, bool):
        raise TypeError(f"bucket_view must be True or False, got {bucket_view!r}")
    whole("steps", steps)
    real("lr", lr, above=0)
    device = torch.device(device)
    model, owned, buckets = tanh_mlp().to(device), None, {}
    if kind in ("fsdp", "hsdp"):
        # The mesh names the device the ranks use. Left out, FSDP2 builds one on the accelerator torch was
        # *built* for: "cuda" on PyPI's default Linux build even without a GPU, so CPU ranks would fail.
        # HSDP: a 2-D mesh, replicated across its rows (dim 0), sharded within each row of 2 (dim 1).
        world = dist.get_world_size()
        if kind == "hsdp" and world % 2:
            raise ValueError(f"hsdp needs an even number of ranks, got {world}")
        mesh = (init_device_mesh(device.type, (world,)) if kind == "fsdp" else
                init_device_mesh(device.type, (world // 2, 2), mesh_dim_names=("replicate", "shard")))
        shard_layers(model, mesh)
        wrapped, optimizer = model, torch.optim.Adam(model.parameters(), lr=lr)
    else:  # with bucket_view, gradients are views of DDP's buckets: else DDP keeps a second copy of each
        wrapped = DDP(model, gradient_as_bucket_view=bucket_view)
        wrapped.register_comm_hook(buckets, _seen_bucket)
        if kind == "ddp":
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)
        else:
            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
            owned = [tuple(p.shape) for group in optimizer.optim.param_groups for p in group["params"]]
    for step in range(steps):
        x, y = (t.to(device) for t in batch(dist.get_rank(), step))
        optimizer.zero_grad()
        buckets.clear()  # DDP rebuilds its buckets after the first step: count the last step's
        with bytes_sent() as sent:
            nn.functional.mse_loss(wrapped(x), y).backward()
            optimizer.step()
    held = held_bytes(model, optimizer)
    params = [(p.full_tensor() if isinstance(p, DTensor) else p.detach()).cpu().clone() for p in model.parameters()]
    copy = None
    if kind in ("ddp", "zero1"):  # (an FSDP gradient is a DTensor, and FSDP has no DDP buckets)
        grads = {p.grad.untyped_storage().data_ptr() for p in model.parameters() if p.grad is not None}
        copy = sum(n for ptr, n in buckets.items() if ptr not in grads)
    return {"params": params, "held": held, "traffic": sent.by_kind(), "owned": owned, "bucket_copy": copy}


def shard_layers(model: nn.Sequential, mesh, **options) -> nn.Sequential:
    """FSDP2 on ``mesh``: each Linear its own unit (all-gathered just for its forward and backward),
    then the whole model (the rest). ``options`` go to every ``fully_shard`` (``reshard_after_forward``,
    ``mp_policy``: ``beyond.fsdp_step``)."""
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, **options)
    return fully_shard(model, mesh=mesh, **options)


def _seen_bucket(seen, bucket):  # no annotations: DDP checks them, and this module's are strings
    """DDP's own all-reduce (torch's ``allreduce_hook``), noting the bucket's storage and its bytes."""
    storage = bucket.buffer().untyped_storage()
    seen[storage.data_ptr()] = storage.nbytes()
    return allreduce_hook(None, bucket)
