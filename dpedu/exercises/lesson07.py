"""Checks for lesson 07's exercises."""

from __future__ import annotations

import torch

from dpedu._validate import real, whole
from dpedu.exercises import close, verdict
from dpedu.sgd.noisy_quadratic import NoisyQuadratic
from dpedu.sgd.staleness import stability_edge


def linear_scaling(lr: float, batch: int, new_batch: int, answer: float) -> bool:
    """The learning rate the linear scaling rule gives for ``new_batch`` (1 %)."""
    truth = real("lr", lr, above=0) * real("new_batch", new_batch, above=0) / real("batch", batch, above=0)
    return verdict(close(answer, truth, 0.01), "k times the batch, k times the learning rate")


def steps_at(min_steps: float, critical_batch: float, batch: float, answer: float) -> bool:
    """Steps to the target at ``batch`` from S = S_min (1 + B_crit / B) (1 %)."""
    truth = real("min_steps", min_steps, above=0) * (1 + real("critical_batch", critical_batch, above=0)
                                                 / real("batch", batch, above=0))
    return verdict(close(answer, truth, 0.01), "S = S_min (1 + B_crit / B)")


def _spectral_radius(problem: NoisyQuadratic, lr: float, batch: float) -> float:
    """Growth factor of E[δ_i²] per step: the recursion of dpedu.sgd.noisy_quadratic, as a matrix."""
    lam = problem.curvatures
    step = torch.diag((1 - 2 * lr * lam) ** 2) + 4 * lr**2 / batch * (torch.outer(lam, lam) + torch.diag(lam**2))
    return torch.linalg.eigvals(step).abs().max().item()


def largest_base_lr(k: int, answer: float, base_batch: int = 4) -> bool:
    """Largest lr₀ such that lr = k·lr₀ at batch k·base_batch keeps lesson 07's noisy quadratic stable.

    One-sided: the answer must be stable (not above the edge) and within 1 % below it, so the
    noise-free guess 1/(k·λ_max) (the loss's Hessian is 2Λ), which ignores the gradient noise, is
    rejected. Round down: a value rounded up past the edge diverges.
    """
    whole("k", k)
    whole("base_batch", base_batch)
    problem = NoisyQuadratic.spectrum()
    edge = stability_edge(lambda lr: _spectral_radius(problem, lr, k * base_batch) < 1,
                          0.0, 2.0 / problem.curvatures.max().item()) / k
    ok = isinstance(answer, (int, float)) and not isinstance(answer, bool) and 0.99 * edge <= answer <= edge
    return verdict(ok, "the scaled learning rate must stay below the curvature limit, which the gradient noise "
                       "lowers a little: above it the expected loss grows (round down, not up)")
