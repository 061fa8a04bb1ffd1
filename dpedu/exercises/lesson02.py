"""Checks for lesson 02's exercises: the gradient ones run the experiment on the digits data."""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, whole
from dpedu.datasets import digits
from dpedu.exercises import close, verdict
from dpedu.models import mlp

DIGITS_TRAIN = 1438  # examples in digits()' training split, which every check here draws from


def _gradient(X: torch.Tensor, y: torch.Tensor, reduction: str = "mean", model: nn.Module | None = None
              ) -> torch.Tensor:
    model = copy.deepcopy(model) if model is not None else mlp(64, 16, 10, seed=0)
    F.cross_entropy(model(X), y, reduction=reduction).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def ring_bytes_per_worker(workers: int, gradient_bytes: int, answer: float) -> bool:
    """Bytes each worker sends in a ring all-reduce (reduce-scatter, then all-gather)."""
    whole("workers", workers)
    whole("gradient_bytes", gradient_bytes)
    truth = 2 * (workers - 1) / workers * gradient_bytes
    return verdict(close(answer, truth, rel=1e-9),
                   "K - 1 steps of reduce-scatter and K - 1 of all-gather, each sending a K-th of the gradient")


def shard_weights(sizes: Sequence[int], answer: Sequence[float], rtol: float = 0.01) -> bool:
    """Do these weights turn the shards' mean gradients into the full-batch gradient? (run on digits)

    Accepted when the combined gradient is within ``rtol`` (relative, in norm) of the full-batch one:
    rounded weights such as 0.78 and 0.22 for 200 and 56 examples pass at the default 1 %.
    """
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise TypeError(f"sizes must be a list of shard sizes, got {sizes!r}")
    sizes = [whole("sizes", n) for n in sizes]
    if not 0 < sum(sizes) <= DIGITS_TRAIN:
        raise ValueError(f"sizes must list shards of 1 to {DIGITS_TRAIN} digits examples in all, got {sizes}")
    real("rtol", rtol, above=0)
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence) or len(answer) != len(sizes):
        raise ValueError(f"answer must be a sequence of one weight per shard ({len(sizes)}), got {answer!r}")
    weights = [real("answer", w) for w in answer]
    data = digits()
    X, y = data.X_train[: sum(sizes)], data.y_train[: sum(sizes)]
    shards = zip(X.split(sizes), y.split(sizes), strict=True)
    combined = sum(w * _gradient(xs, ys) for w, (xs, ys) in zip(weights, shards, strict=True))
    full = _gradient(X, y)
    ok = ((combined - full).norm() <= rtol * full.norm()).item()
    return verdict(ok, "each shard's mean stands for its examples: weight it by its share of the batch "
                       f"(accepted within {rtol:.2g} of the full-batch gradient, relative, in norm)")


def summed_loss_factor(workers: int, answer: float) -> bool:
    """By what factor must lr change when K towers average summed-loss gradients? (run on digits)"""
    whole("workers", workers, maximum=DIGITS_TRAIN // 32)  # 32 examples per tower, all of them real
    data = digits()
    X, y = data.X_train[: 32 * workers], data.y_train[: 32 * workers]
    averaged = sum(_gradient(xs, ys, "sum") for xs, ys in zip(X.chunk(workers), y.chunk(workers), strict=True))
    averaged = averaged / workers
    full = _gradient(X, y, "sum")
    is_number = isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer)
    ok = is_number and torch.allclose(answer * averaged, full, rtol=1e-4, atol=1e-5)
    return verdict(ok, "compare the averaged gradient with the full-batch summed-loss gradient")


class _GhostBatchNorm(nn.BatchNorm1d):
    def __init__(self, features: int, sizes: Sequence[int]):
        super().__init__(features)
        self.sizes = list(sizes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([nn.BatchNorm1d.forward(self, part) for part in x.split(self.sizes)])


def towers_equal_uneven_ghost_batch_norm(answer: bool, examples: int = 250, chunks: int = 4) -> bool:
    """With uneven chunks (``tensor_split`` of ``examples`` into ``chunks``), does the plain average of
    the towers' gradients still equal full-batch ghost BatchNorm over the same chunks? (run on digits)"""
    if not isinstance(answer, bool):
        raise TypeError(f"answer must be True or False, got {answer!r}")
    whole("chunks", chunks, minimum=2)
    whole("examples", examples, minimum=2 * chunks, maximum=DIGITS_TRAIN)
    data = digits()
    X, y = data.X_train[:examples], data.y_train[:examples]
    sizes = [len(part) for part in X.tensor_split(chunks)]
    models = []
    for norm in (_GhostBatchNorm(16, sizes), nn.BatchNorm1d(16)):  # the same weights, two kinds of BatchNorm
        torch.manual_seed(0)
        models.append(nn.Sequential(nn.Linear(64, 16), norm, nn.ReLU(), nn.Linear(16, 10)))
    ghost = _gradient(X, y, model=models[0])
    towers = sum(_gradient(xs, ys, model=models[1]) for xs, ys in zip(X.split(sizes), y.split(sizes), strict=True))
    equal = torch.allclose(towers / chunks, ghost, rtol=1e-4, atol=1e-6)
    return verdict(answer == equal, "a plain mean gives each chunk weight 1/K, but the full batch's mean loss "
                                    f"weights chunk k by its size n_k / {examples}; compare {sizes}")
