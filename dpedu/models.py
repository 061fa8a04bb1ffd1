"""The course's small models, built from a seed so that every run starts from the same weights."""

from __future__ import annotations

import torch
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
