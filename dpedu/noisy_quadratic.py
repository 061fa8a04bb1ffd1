"""A problem whose SGD answers are known exactly: linear regression with Gaussian inputs.

Data: ``x ~ N(0, diag(curvatures))``, ``y = x·w* + ε`` with ``ε ~ N(0, noise²)``; loss ``(x·w - y)²``.
Its expected loss is ``noise² + Σ λ_i δ_i²`` with ``δ = w - w*``, the Hessian is ``2·diag(λ)``, and
(Isserlis' theorem) the expected excess loss of mini-batch SGD follows a closed recursion, so
"steps to reach a loss" can be computed for any batch size and learning rate without sampling
noise: the noisy quadratic model of Zhang et al. (2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dpedu._validate import real, whole


@dataclass(frozen=True)
class NoisyQuadratic:
    curvatures: torch.Tensor  # λ_i, the variances of the input features
    noise: float
    w_star: torch.Tensor

    @classmethod
    def spectrum(cls, dimension: int = 10, largest: float = 1.0, smallest: float = 0.01, noise: float = 0.5):
        """Curvatures spaced evenly on a log scale between ``largest`` and ``smallest``; w* = 1."""
        whole("dimension", dimension)
        real("smallest", smallest, above=0)
        real("largest", largest, at_least=smallest)
        real("noise", noise, at_least=0)
        curvatures = torch.logspace(math.log10(largest), math.log10(smallest), dimension, dtype=torch.float64)
        return cls(curvatures, noise, torch.ones(dimension, dtype=torch.float64))

    def sample(self, batch: int, generator: torch.Generator, runs: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """``runs`` independent batches: X of shape (runs, batch, d), y of shape (runs, batch)."""
        whole("batch", batch)
        whole("runs", runs)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        d = len(self.curvatures)
        X = torch.randn(runs, batch, d, generator=generator, dtype=torch.float64) * self.curvatures.sqrt()
        y = X @ self.w_star + self.noise * torch.randn(runs, batch, generator=generator, dtype=torch.float64)
        return X, y

    def excess_loss(self, w: torch.Tensor) -> torch.Tensor:
        """Expected loss above its minimum noise², for each weight vector in the last dimension."""
        return ((w - self.w_star) ** 2 * self.curvatures).sum(-1)

    def simple_noise_scale(self, w: torch.Tensor) -> float:
        """B_simple = tr(Σ)/|G|² at ``w``, in closed form: [(δᵀΛδ + σ²) tr Λ + δᵀΛ²δ] / δᵀΛ²δ."""
        delta, lam = w - self.w_star, self.curvatures
        curved = (lam * delta**2).sum()
        curved_twice = (lam**2 * delta**2).sum()
        return (((curved + self.noise**2) * lam.sum() + curved_twice) / curved_twice).item()


def expected_excess(problem: NoisyQuadratic, lr: torch.Tensor | float, batch_size: torch.Tensor | int, steps: int,
                    warmup_steps: int = 0) -> torch.Tensor:
    """Exact expected excess loss of SGD from w = 0, after each of ``steps`` steps.

    ``lr`` and ``batch_size`` broadcast against each other (pass a column and a row for a grid);
    the result has shape ``(steps + 1, *broadcast shape)``. With ``warmup_steps`` the learning rate
    rises linearly over that many steps. Runs that diverge overflow to inf.
    """
    lr = torch.as_tensor(lr, dtype=torch.float64)
    batch = torch.as_tensor(batch_size, dtype=torch.float64)
    if (lr < 0).any() or not torch.isfinite(lr).all():
        raise ValueError("lr must be finite and >= 0")
    if (batch < 1).any():
        raise ValueError("batch_size must be >= 1")
    whole("steps", steps, minimum=0)
    whole("warmup_steps", warmup_steps, minimum=0)
    lam = problem.curvatures
    shape = torch.broadcast_shapes(lr.shape, batch.shape)
    c = (problem.w_star**2).expand(*shape, len(lam)).clone()  # E[δ_i²], starting from w = 0
    lr, batch = lr.expand(shape).unsqueeze(-1), batch.expand(shape).unsqueeze(-1)
    history = [(c * lam).sum(-1)]
    for t in range(steps):
        eta = lr * min(1.0, (t + 1) / warmup_steps) if warmup_steps else lr
        spread = lam * (c * lam).sum(-1, keepdim=True) + lam**2 * c + problem.noise**2 * lam
        c = (1 - 2 * eta * lam) ** 2 * c + 4 * eta**2 / batch * spread
        history.append((c * lam).sum(-1))
    return torch.stack(history)
