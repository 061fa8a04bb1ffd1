"""Checks for lesson 01's exercises, on the diabetes least-squares problem of the lesson."""

from __future__ import annotations

import torch

from dpedu._validate import real, whole
from dpedu.datasets import diabetes
from dpedu.exercises import close, verdict
from dpedu.sgd import least_squares


def _problem() -> tuple[torch.Tensor, torch.Tensor]:
    data = diabetes()
    return least_squares.with_bias(data.X_train), data.y_train.double()



def largest_stable_lr(answer: float) -> bool:
    """The largest learning rate for which full-batch GD converges (within 2 %)."""
    A, _ = _problem()
    truth = 2 / torch.linalg.eigvalsh(least_squares.hessian(A)).max().item()
    return verdict(close(answer, truth, 0.02), "GD multiplies the error along each eigenvector of the Hessian "
                                                "by (1 - lr·λ); when does that factor stay below 1 in size?")


def minibatch_variance(batch_size: int, answer: float) -> bool:
    """E|g_B - G|² at w = 0 for batches drawn without replacement (within 1 %)."""
    A, y = _problem()
    n = len(A)
    whole("batch_size", batch_size, maximum=n)
    g = least_squares.per_example_gradients(A, y, torch.zeros(A.shape[1], dtype=A.dtype))
    sigma2 = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    truth = sigma2 / batch_size * (n - batch_size) / (n - 1)
    return verdict(close(answer, truth, 0.01), "start from σ²/B and correct for drawing without replacement")


def noise_floor(lr: float, batch_size: int, answer: float) -> bool:
    """The first-order noise floor η·tr(Σ)/(4B) of constant-lr SGD, Σ taken at the optimum (within 2 %)."""
    real("lr", lr, above=0)
    whole("batch_size", batch_size)
    A, y = _problem()
    g = least_squares.per_example_gradients(A, y, least_squares.optimum(A, y))
    trace_sigma = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    truth = lr * trace_sigma / (4 * batch_size)
    return verdict(close(answer, truth, 0.02), "the floor grows with lr/B; use the trace of Σ at the optimum")
