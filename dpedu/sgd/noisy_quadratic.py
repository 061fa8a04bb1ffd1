"""A problem whose SGD answers are known exactly: linear regression with Gaussian inputs.

Data: ``x ~ N(0, diag(curvatures))``, ``y = x·w* + ε`` with ``ε ~ N(0, noise²)``; loss ``(x·w - y)²``.
Its expected loss is ``noise² + Σ λ_i δ_i²`` with ``δ = w - w*``, the Hessian is ``2·diag(λ)``, and
(Isserlis' theorem) the expected excess loss of mini-batch SGD follows a closed recursion, so
"steps to reach a loss" can be computed for any batch size and learning rate without sampling
noise: the noisy quadratic model of Zhang et al. (2019).

Used in lesson 07.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from dpedu._validate import real, tensor, whole


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

    def _point(self, w: object) -> torch.Tensor:
        if tensor("w", w).shape[-1:] != self.w_star.shape:  # else broadcasting would silently pad it
            raise ValueError(f"w must have {len(self.w_star)} entries in its last dimension, got {tuple(w.shape)}")
        return w

    def excess_loss(self, w: torch.Tensor) -> torch.Tensor:
        """Expected loss above its minimum noise², for each weight vector in the last dimension."""
        return ((self._point(w) - self.w_star) ** 2 * self.curvatures).sum(-1)

    def simple_noise_scale(self, w: torch.Tensor) -> float:
        """B_simple = tr(Σ)/|G|² at ``w``, in closed form: [(δᵀΛδ + σ²) tr Λ + δᵀΛ²δ] / δᵀΛ²δ; inf at w*."""
        delta, lam = self._point(tensor("w", w, dim=1)) - self.w_star, self.curvatures
        curved = (lam * delta**2).sum()
        curved_twice = (lam**2 * delta**2).sum()
        if curved_twice == 0:  # at w* the true gradient G is zero: noise without signal
            return math.inf
        return (((curved + self.noise**2) * lam.sum() + curved_twice) / curved_twice).item()


def expected_excess(problem: NoisyQuadratic, lr: torch.Tensor | float, batch_size: torch.Tensor | int, steps: int,
                    warmup_steps: int = 0, isserlis_factor: float = 1.0) -> torch.Tensor:
    """Exact expected excess loss of SGD from w = 0, after each of ``steps`` steps.

    ``lr`` and ``batch_size`` broadcast against each other (pass a column and a row for a grid);
    the result has shape ``(steps + 1, *broadcast shape)``. With ``warmup_steps`` the learning rate
    rises linearly over that many steps. Runs that diverge overflow to inf.

    ``isserlis_factor`` weights the λ_i² c_i term of the gradient's variance. The recursion is exact
    only at its default, 1; other values (0 drops the term, 2 doubles it) give the wrong recursions
    that lesson 07 shows its check against sampled SGD rejecting.
    """
    if not isinstance(problem, NoisyQuadratic):
        raise TypeError(f"problem must be a NoisyQuadratic, got {type(problem).__name__}")
    try:
        lr, batch = torch.as_tensor(lr, dtype=torch.float64), torch.as_tensor(batch_size, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"lr and batch_size must be numbers or tensors, got {lr!r} and {batch_size!r}") from None
    try:
        shape = torch.broadcast_shapes(lr.shape, batch.shape)
    except RuntimeError:
        raise ValueError(f"lr {tuple(lr.shape)} and batch_size {tuple(batch.shape)} must broadcast together "
                         "(a column and a row for a grid)") from None
    if not (torch.isfinite(lr) & (lr >= 0)).all():
        raise ValueError("lr must be finite and >= 0")
    if not (batch >= 1).all():  # also refuses nan; inf is allowed: the noise-free limit
        raise ValueError("batch_size must be >= 1")
    whole("steps", steps, minimum=0)
    whole("warmup_steps", warmup_steps, minimum=0)
    real("isserlis_factor", isserlis_factor, at_least=0)
    lam = problem.curvatures
    c = (problem.w_star**2).expand(*shape, len(lam)).clone()  # E[δ_i²], starting from w = 0
    lr, batch = lr.expand(shape).unsqueeze(-1), batch.expand(shape).unsqueeze(-1)
    history = [(c * lam).sum(-1)]
    for t in range(steps):
        eta = lr * min(1.0, (t + 1) / warmup_steps) if warmup_steps else lr
        spread = lam * (c * lam).sum(-1, keepdim=True) + isserlis_factor * lam**2 * c + problem.noise**2 * lam
        c = (1 - 2 * eta * lam) ** 2 * c + 4 * eta**2 / batch * spread
        history.append((c * lam).sum(-1))
    return torch.stack(history)
