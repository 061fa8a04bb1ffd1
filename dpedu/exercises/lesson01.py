"""Checks for lesson 01's exercises, on the diabetes least-squares problem of the lesson."""

from __future__ import annotations

import math

import torch

from dpedu import least_squares
from dpedu.datasets import diabetes
from dpedu.exercises import verdict


def _problem() -> tuple[torch.Tensor, torch.Tensor]:
    data = diabetes()
    return least_squares.with_bias(data.X_train), data.y_train.double()


def _close(answer: float, truth: float, rel: float) -> bool:
    return isinstance(answer, (int, float)) and math.isfinite(answer) and abs(answer - truth) <= rel * abs(truth)


def largest_stable_lr(answer: float) -> bool:
    """The largest learning rate for which full-batch GD converges (within 2 %)."""
    A, _ = _problem()
    truth = 2 / torch.linalg.eigvalsh(least_squares.hessian(A)).max().item()
    return verdict(_close(answer, truth, 0.02), "GD multiplies the error along each eigenvector of the Hessian "
                                                "by (1 - lr·λ); when does that factor stay below 1 in size?")


def minibatch_variance(batch_size: int, answer: float) -> bool:
    """E|g_B - G|² at w = 0 for batches drawn without replacement (within 1 %)."""
    A, y = _problem()
    n = len(A)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or not 1 <= batch_size <= n:
        raise ValueError(f"batch_size must be an int from 1 to {n}, got {batch_size!r}")
    g = least_squares.per_example_gradients(A, y, torch.zeros(A.shape[1], dtype=A.dtype))
    sigma2 = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    truth = sigma2 / batch_size * (n - batch_size) / (n - 1)
    return verdict(_close(answer, truth, 0.01), "start from σ²/B and correct for drawing without replacement")


def noise_floor(lr: float, batch_size: int, answer: float) -> bool:
    """The first-order noise floor η·tr(Σ)/(4B) of constant-lr SGD, Σ taken at the optimum (within 2 %)."""
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    A, y = _problem()
    g = least_squares.per_example_gradients(A, y, least_squares.optimum(A, y))
    trace_sigma = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    truth = lr * trace_sigma / (4 * batch_size)
    return verdict(_close(answer, truth, 0.02), "the floor grows with lr/B; use the trace of Σ at the optimum")
