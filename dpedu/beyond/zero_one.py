"""ZeRO stage 1 written out: each rank keeps the optimizer state of one even slice of the parameters.

DDP all-reduces the whole gradient and every rank then runs the same optimizer step on every parameter,
each holding all of the optimizer's state. ZeRO-1 (Rajbhandari et al. 2020) splits that work. Lay the
P parameters end to end in one vector, pad it to a multiple of the N ranks, and give rank r the slice
[r·S, (r+1)·S), S = ⌈P/N⌉. A step is then (1) a reduce-scatter of the flat gradients, which leaves each rank the
average gradient of its slice only, (2) the optimizer's step on that slice, with its state (Adam's two
moments) for that slice only, and (3) an all-gather of the updated slices, which gives every rank every
parameter again. An all-reduce *is* a reduce-scatter followed by an all-gather (lesson 04's ring does
exactly that), so ZeRO-1 puts on the wire what DDP does; what changes is that the optimizer step happens
in between, on 1/N of the parameters, and its state is 1/N of the whole. ``bytes_sent`` counts what a rank
hands in: the whole gradient to the reduce-scatter, its slice to the all-gather.

torch's ``ZeroRedundancyOptimizer`` does the same with other cuts: DDP's all-reduce averages the gradients,
each rank steps the whole parameters it owns (a greedy split by parameter, so shards are uneven) and
broadcasts them. ``Zero1Optimizer`` splits by element, so every rank holds exactly 1/N of the state.
``train_zero_one`` trains ``zero_memory.tanh_mlp`` with it, on the batches ``zero_memory.train`` uses.

"The same parameters as DDP" is checked with plain SGD too (``train_sgd``, ``same_parameters``): Adam divides
each step by a running size of the gradient itself, so it barely tells a gradient averaged over the ranks from
one summed (N times larger); SGD's step is the gradient times the learning rate, so any other scale shows.

Used in lessons 11a and 11b.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu._validate import real, whole
from dpedu.beyond.zero_memory import batch, shard_layers, tanh_mlp  # batch: the batches zero_memory.train uses
from dpedu.runtime.traffic import bytes_sent

__all__ = ["Zero1Optimizer", "train_zero_one", "train_sgd", "same_parameters", "SGD_KINDS"]

SGD_KINDS = ("ddp", "zero1", "zero1 by hand", "fsdp", "hsdp")

# torch 2.13 renamed these two (the old names still work there, with a FutureWarning); torch 2.12 has only the old
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class Zero1Optimizer:
    """ZeRO-1 around ``optimizer_class(shard, **defaults)``: call ``step()`` after ``backward()``, with no DDP.

    ``params`` must hold the same values on every rank of ``process_group`` (the default group if None),
    all of one floating dtype and device, each needing a gradient. After ``step()`` every rank holds the
    parameters ``optimizer_class`` makes of the gradients averaged over the ranks (DDP's, to rounding), for an
    element-wise optimizer (SGD, Adam, AdamW) with one parameter group: the inner optimizer sees one flat slice
    that cuts across parameters, so one that looks at whole tensors (Adafactor, LAMB, Muon) computes something
    else, and per-parameter options cannot be set.
    ``shard`` (this rank's slice of the flat parameters, padded to a multiple of N; ``shard_range`` is its
    (start, end) in elements) is the only tensor the inner optimizer ``optim`` knows, so its state is exactly
    1/N of the whole. The shard is the master copy: a parameter changed outside ``step()`` is overwritten by
    the next. Stage 1, not 2: every parameter keeps its whole ``.grad`` until ``zero_grad``, and ``step`` lays
    them end to end in one more flat copy (DDP's bucket copy again); stage 2 would free each gradient as
    soon as it is reduce-scattered, during backward.
    A parameter without a gradient (``p.grad is None``) makes ``step()`` raise before it sends anything:
    counted as zero, Adam's momentum would still move it, and a plain optimizer skips it; give it a zero
    gradient yourself, or leave it out of ``params``."""

    def __init__(self, params: Iterable[torch.Tensor], optimizer_class: type[torch.optim.Optimizer],
                 process_group: dist.ProcessGroup | None = None, **defaults) -> None:
        params = _check_params(params)
        if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
            raise TypeError(f"optimizer_class must be a torch.optim.Optimizer subclass, got {optimizer_class!r}")
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"process_group must be a ProcessGroup or None, got {type(process_group).__name__}")
        self.params, self.group = params, process_group
        self.numels = [p.numel() for p in params]
        world, rank = dist.get_world_size(process_group), dist.get_rank(process_group)
        size = -(-sum(self.numels) // world)  # elements per rank, rounded up: the padding sits at the very end
        self.padded, self.shard_range = size * world, (rank * size, (rank + 1) * size)
        # a tensor of its own, the master copy of this rank's slice; its .grad receives the reduce-scatter (an
        # optimizer reads only .grad, so the shard needs no autograd of its own)
        self.shard = self._flat(params)[slice(*self.shard_range)].clone()
        self.shard.grad = torch.zeros_like(self.shard)
        self.optim = optimizer_class([self.shard], **defaults)

    def _flat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        """The tensors end to end, then zeros up to ``padded`` elements (a multiple of N)."""
        padding = tensors[0].new_zeros(self.padded - sum(self.numels))
        return torch.cat([t.detach().reshape(-1) for t in tensors] + [padding])

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set the parameters' gradients to None (to zeros if not ``set_to_none``), as torch's optimizers do."""
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        """Average the gradients onto the shards, step this rank's shard, gather every shard back."""
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if missing:  # every rank checks before sending, so ranks that all lack it all raise
            raise RuntimeError(f"params {missing} have no gradient (p.grad is None): run backward() first, "
                               f"or build the optimizer without them")
        flat = self._flat([p.grad for p in self.params])
        # (1) each rank hands in the whole flat gradient and gets back the sum of its own slice, divided by N
        # for the average, as DDP does (dist.reduce_scatter_tensor; reduce_scatter_single from torch 2.13 on)
        _reduce_scatter(self.shard.grad, flat, group=self.group)
        self.shard.grad.div_(dist.get_world_size(self.group))
        self.optim.step()  # (2) on 1/N of the parameters, with 1/N of the state
        # (3) each rank hands in its updated slice and gets back all of them, end to end, in the same buffer
        # (dist.all_gather_into_tensor; all_gather_single from torch 2.13 on): the gradients in it are spent
        _all_gather(flat, self.shard, group=self.group)
        for p, values in zip(self.params, flat[:sum(self.numels)].split(self.numels), strict=True):
            p.copy_(values.view_as(p))


def _check_params(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """``params`` as a list, refused unless it holds tensors needing gradients, of one floating dtype and device."""
    if isinstance(params, torch.Tensor) or not isinstance(params, Iterable):
        raise TypeError(f"params must be an iterable of tensors (model.parameters()), got {type(params).__name__}")
    params = list(params)
    if not params or not all(isinstance(p, torch.Tensor) for p in params):
        raise ValueError(f"params must hold at least one tensor, and only tensors, got {params!r:.80}")
    kinds = {(p.dtype, p.device) for p in params}
    if len(kinds) > 1 or not params[0].is_floating_point() or not all(p.requires_grad for p in params):
        raise ValueError(f"params must all need gradients and share one floating dtype and device, "
                         f"got {sorted(map(str, kinds))}")
    return params


def train_zero_one(*, steps: int, lr: float = 1e-2) -> dict:
    """Inside ranks: train ``tanh_mlp()`` with Adam under ``Zero1Optimizer`` for ``steps`` steps, each rank
    on its own batches, those of ``zero_memory.train`` (so the parameters are DDP's, to rounding).
    Returns the whole trained parameters, the bytes of this rank's optimizer state (``optimizer_bytes``,
    the moments; Adam's step counter left out), its ``shard`` (start, end) and what its collectives sent in
    the last step, by kind (``traffic``, from ``bytes_sent``)."""
    whole("steps", steps)
    real("lr", lr, above=0)
    model = tanh_mlp()
    optimizer = Zero1Optimizer(model.parameters(), torch.optim.Adam, lr=lr)
    for step in range(steps):
        x, y = batch(dist.get_rank(), step)
        optimizer.zero_grad()
        with bytes_sent() as sent:
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    state = [t for s in optimizer.optim.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
    return {"params": [p.detach().cpu().clone() for p in model.parameters()],
            "optimizer_bytes": sum(t.numel() * t.element_size() for t in state),
            "shard": optimizer.shard_range, "traffic": sent.by_kind()}


def train_sgd(kind: str, *, steps: int, lr: float = 0.1) -> list[torch.Tensor]:
    """Inside ranks: ``steps`` plain SGD steps of ``tanh_mlp()`` under ``kind``, each rank on the batches of
    ``zero_memory.train``; returns the whole trained parameters. ``kind``: ``"ddp"``, ``"zero1"`` (torch's
    ``ZeroRedundancyOptimizer`` over DDP), ``"zero1 by hand"`` (``Zero1Optimizer``, no DDP), ``"fsdp"`` or
    ``"hsdp"`` (``zero_memory.shard_layers`` on all ranks, or on a 2-D mesh of rows of 2, as ``zero_memory.train``).
    Every kind must make DDP's parameters: a gradient summed over the ranks instead of averaged would not."""
    if kind not in SGD_KINDS:
        raise ValueError(f"kind must be one of {SGD_KINDS}, got {kind!r}")
    whole("steps", steps)
    real("lr", lr, above=0)
    world = dist.get_world_size()
    if kind == "hsdp" and world % 2:
        raise ValueError(f"hsdp needs an even number of ranks, got {world}")
    model = tanh_mlp()
    if kind in ("fsdp", "hsdp"):
        mesh = (init_device_mesh("cpu", (world,)) if kind == "fsdp" else
                init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("replicate", "shard")))
        wrapped, optimizer = shard_layers(model, mesh), torch.optim.SGD(model.parameters(), lr=lr)
    elif kind == "zero1 by hand":
        wrapped, optimizer = model, Zero1Optimizer(model.parameters(), torch.optim.SGD, lr=lr)
    else:
        wrapped = DDP(model)
        optimizer = (torch.optim.SGD(model.parameters(), lr=lr) if kind == "ddp" else
                     ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=lr))
    for step in range(steps):
        x, y = batch(dist.get_rank(), step)
        optimizer.zero_grad()
        nn.functional.mse_loss(wrapped(x), y).backward()
        optimizer.step()
    return [(p.full_tensor() if isinstance(p, DTensor) else p).detach().clone() for p in model.parameters()]


def same_parameters(ranks: Sequence[Sequence[torch.Tensor]], reference: Sequence[torch.Tensor],
                    within: float = 1e-6) -> bool:
    """Lesson 11's test of "the same parameters as DDP": each rank's parameters (one list per rank) match
    ``reference``'s in number and shape, and every element is within ``within`` of it."""
    return all(len(params) == len(reference) and
               all(a.shape == b.shape and (a - b).abs().max().item() < within
                   for a, b in zip(params, reference, strict=True))
               for params in ranks)
