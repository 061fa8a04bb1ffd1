"""The course's small models, built from a seed so that every run starts from the same weights, and
comparisons of parameters: between two sets (lessons 02, 03, 08 check "the same model" with it), between
runs (a checksum) and between ranks (lessons 03 and 13, and their scripts).

Used in lessons 01–08, 11 and 13.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
import torch.distributed as dist
from torch import nn

from dpedu._validate import whole


def linear_regression(in_features: int, seed: int = 0) -> nn.Linear:
    """A linear model ``x -> w.x + b`` (use with a mean squared error loss: a convex problem)."""
    whole("in_features", in_features)
    whole("seed", seed, minimum=0)
    torch.manual_seed(seed)
    return nn.Linear(in_features, 1)


def mlp(in_features: int, hidden: int, out_features: int, seed: int = 0, depth: int = 1) -> nn.Sequential:
    """A multilayer perceptron with ``depth`` hidden ReLU layers of width ``hidden``."""
    for name, value in (("in_features", in_features), ("hidden", hidden), ("out_features", out_features),
                        ("depth", depth)):
        whole(name, value)
    whole("seed", seed, minimum=0)
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    width = in_features
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, out_features))


def largest_difference(a: Mapping[str, torch.Tensor] | Iterable[torch.Tensor],
                       b: Mapping[str, torch.Tensor] | Iterable[torch.Tensor]) -> float:
    """The largest absolute difference between two sets of parameters (state dicts or tensor sequences)."""
    if isinstance(a, Mapping) != isinstance(b, Mapping):
        raise TypeError("a and b must both be state dicts or both be sequences of tensors")
    if isinstance(a, Mapping):
        if set(a) != set(b):
            raise ValueError(f"a and b must have the same keys; only in one: {sorted(set(a) ^ set(b))}")
        a, b = list(a.values()), [b[key] for key in a]
    a, b = list(a), list(b)
    if not all(isinstance(t, torch.Tensor) for t in a + b):
        raise TypeError("a and b must hold tensors (state dicts, parameters() or lists of tensors)")
    if len(a) != len(b) or not a:
        raise ValueError(f"a and b must hold the same, non-zero number of tensors, got {len(a)} and {len(b)}")
    if any(p.shape != q.shape for p, q in zip(a, b, strict=True)):
        raise ValueError("a and b must hold tensors of the same shapes, in the same order")
    return max((p.detach() - q.detach()).abs().max().item() for p, q in zip(a, b, strict=True))


def parameter_checksum(tensors: Iterable[torch.Tensor]) -> float:
    """The sum of every element in float64: one number to compare runs by (equal parameters, equal sums)."""
    return sum(t.detach().double().sum().item() for t in tensors)


def identical_on_every_rank(tensors: Iterable[torch.Tensor]) -> bool:
    """True on every rank when all ranks hold bit-identical ``tensors`` (compared through an all-gather)."""
    flat = torch.cat([t.detach().flatten().double() for t in tensors])  # float64 holds any float32 exactly
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], other) for other in gathered[1:])
