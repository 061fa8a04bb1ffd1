"""Checks for lesson 02's exercises: the gradient ones run the experiment on the digits data."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from dpedu._validate import whole
from dpedu.datasets import digits
from dpedu.exercises import close, verdict
from dpedu.models import mlp


def _gradient(X: torch.Tensor, y: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    model = mlp(64, 16, 10, seed=0)
    F.cross_entropy(model(X), y, reduction=reduction).backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def ring_bytes_per_worker(workers: int, gradient_bytes: int, answer: float) -> bool:
    """Bytes each worker sends in a ring all-reduce (reduce-scatter, then all-gather)."""
    whole("workers", workers)
    whole("gradient_bytes", gradient_bytes)
    truth = 2 * (workers - 1) / workers * gradient_bytes
    return verdict(close(answer, truth, rel=1e-9),
                   "K - 1 steps of reduce-scatter and K - 1 of all-gather, each sending a K-th of the gradient")


def shard_weights(sizes: Sequence[int], answer: Sequence[float]) -> bool:
    """Do these weights turn the shards' mean gradients into the full-batch gradient? (run on digits)"""
    sizes = [whole("sizes", n) for n in sizes]
    if len(answer) != len(sizes):
        raise ValueError(f"answer must have one weight per shard ({len(sizes)}), got {len(answer)}")
    data = digits()
    X, y = data.X_train[: sum(sizes)], data.y_train[: sum(sizes)]
    shards = zip(X.split(sizes), y.split(sizes), strict=True)
    combined = sum(w * _gradient(xs, ys) for w, (xs, ys) in zip(answer, shards, strict=True))
    ok = torch.allclose(combined, _gradient(X, y), atol=1e-6)
    return verdict(ok, "each shard's mean stands for its examples: weight it by its share of the batch")


def summed_loss_factor(workers: int, answer: float) -> bool:
    """By what factor must lr change when K towers average summed-loss gradients? (run on digits)"""
    whole("workers", workers)
    data = digits()
    X, y = data.X_train[: 32 * workers], data.y_train[: 32 * workers]
    averaged = sum(_gradient(xs, ys, "sum") for xs, ys in zip(X.chunk(workers), y.chunk(workers), strict=True))
    averaged = averaged / workers
    full = _gradient(X, y, "sum")
    ok = isinstance(answer, (int, float)) and torch.allclose(answer * averaged, full, rtol=1e-4, atol=1e-5)
    return verdict(ok, "compare the averaged gradient with the full-batch summed-loss gradient")
