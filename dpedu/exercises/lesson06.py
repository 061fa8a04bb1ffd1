"""Checks for lesson 06's exercises."""

from __future__ import annotations

import math

import torch

from dpedu.exercises import verdict
from dpedu.noisy_quadratic import NoisyQuadratic


def _positive(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _close(answer: object, truth: float, rel: float) -> bool:
    return isinstance(answer, (int, float)) and math.isfinite(answer) and abs(answer - truth) <= rel * abs(truth)


def linear_scaling(lr: float, batch: int, new_batch: int, answer: float) -> bool:
    """The learning rate the linear scaling rule gives for ``new_batch`` (1 %)."""
    truth = _positive("lr", lr) * _positive("new_batch", new_batch) / _positive("batch", batch)
    return verdict(_close(answer, truth, 0.01), "k times the batch, k times the learning rate")


def steps_at(min_steps: float, critical_batch: float, batch: float, answer: float) -> bool:
    """Steps to the target at ``batch`` from S = S_min (1 + B_crit / B) (1 %)."""
    truth = _positive("min_steps", min_steps) * (1 + _positive("critical_batch", critical_batch)
                                                 / _positive("batch", batch))
    return verdict(_close(answer, truth, 0.01), "S = S_min (1 + B_crit / B)")


def _spectral_radius(problem: NoisyQuadratic, lr: float, batch: float) -> float:
    """Growth factor of E[δ_i²] per step: the recursion of dpedu.noisy_quadratic, as a matrix."""
    lam = problem.curvatures
    step = torch.diag((1 - 2 * lr * lam) ** 2) + 4 * lr**2 / batch * (torch.outer(lam, lam) + torch.diag(lam**2))
    return torch.linalg.eigvals(step).abs().max().item()


def largest_base_lr(k: int, answer: float, base_batch: int = 4) -> bool:
    """Largest lr₀ such that lr = k·lr₀ at batch k·base_batch keeps lesson 06's noisy quadratic stable (2 %)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    problem = NoisyQuadratic.spectrum()
    low, high = 0.0, 2.0 / problem.curvatures.max().item()
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if _spectral_radius(problem, middle, k * base_batch) < 1 else (low, middle)
    return verdict(_close(answer, low / k, 0.02), "the scaled learning rate must stay below the curvature "
                                                  "limit, which the gradient noise lowers a little")
