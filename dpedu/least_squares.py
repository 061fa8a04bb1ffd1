"""Least squares, the convex problem whose answers are known exactly.

With a design matrix ``A`` (features plus a column of ones for the bias), the loss is
``L(w) = mean((A w - y)^2)``. Everything a lesson wants to check against is closed-form: the
optimum, the Hessian ``2 AᵀA / N`` (so the largest stable GD step is ``2 / λ_max``) and the gradient
of every single example, whose spread is the noise of SGD.
"""

from __future__ import annotations

import torch


def with_bias(X: torch.Tensor) -> torch.Tensor:
    """Append a column of ones, so that ``w[-1]`` plays the role of the bias (float64 for exact checks)."""
    X = X.double()
    return torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], dim=1)


def loss(A: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean squared error; ``w`` may hold several weight vectors as rows (one loss each)."""
    if w.dim() == 1:
        return ((A @ w - y) ** 2).mean()
    return ((A @ w.T - y.unsqueeze(-1)) ** 2).mean(0)


def per_example_gradients(A: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row i is the gradient of example i's loss ``(a_i·w - y_i)²``: ``2 (a_i·w - y_i) a_i``."""
    return 2 * (A @ w - y).unsqueeze(1) * A


def batch_gradients(A: torch.Tensor, y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The mean gradient of each of many batches, one per run: A (runs, B, d), y (runs, B), W (runs, d)."""
    residual = (A @ W.unsqueeze(-1)).squeeze(-1) - y
    return 2 * (residual.unsqueeze(-1) * A).mean(1)


def hessian(A: torch.Tensor) -> torch.Tensor:
    return 2 * A.T @ A / len(A)


def optimum(A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.lstsq(A, y.double().unsqueeze(1)).solution.squeeze(1)
