"""Least squares, the convex problem whose answers are known exactly.

With a design matrix ``A`` (features plus a column of ones for the bias), the loss is
``L(w) = mean((A w - y)^2)``. Everything a lesson wants to check against is closed-form: the
optimum, the Hessian ``2 AᵀA / N`` (so the largest stable GD step is ``2 / λ_max``) and the gradient
of every single example, whose spread is the noise of SGD.

Used in lessons 01, 06 and 07.
"""

from __future__ import annotations

import torch

from dpedu._validate import tensor


def _check_matrix(name: str, A: object) -> torch.Tensor:
    if tensor(name, A).dim() != 2 or len(A) == 0:
        raise ValueError(f"{name} must be a non-empty 2-D tensor (examples × features), got {tuple(A.shape)}")
    return A


def _check_targets(A: torch.Tensor, y: object) -> torch.Tensor:
    if tensor("y", y).shape != (len(A),):
        raise ValueError(f"y must be a 1-D tensor of {len(A)} targets, one per row of A, got {tuple(y.shape)}")
    return y


def _check_weights(A: torch.Tensor, w: object, *, several: bool) -> torch.Tensor:
    if tensor("w", w).shape[-1:] != (A.shape[1],) or w.dim() > (2 if several else 1):
        raise ValueError(f"w must have {A.shape[1]} entries per weight vector (one per column of A), got "
                         f"{tuple(w.shape)}")
    if w.dtype != A.dtype:  # torch would refuse A @ w deep inside; with_bias makes A float64
        raise TypeError(f"w must have A's dtype {A.dtype}, got {w.dtype}: use w.to(A.dtype)")
    return w


def with_bias(X: torch.Tensor) -> torch.Tensor:
    """Append a column of ones, so that ``w[-1]`` plays the role of the bias (float64 for exact checks)."""
    X = _check_matrix("X", X).double()
    return torch.cat([X, torch.ones(len(X), 1, dtype=X.dtype)], dim=1)


def loss(A: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Mean squared error; ``w`` may hold several weight vectors as rows (one loss each)."""
    _check_targets(_check_matrix("A", A), y)
    _check_weights(A, w, several=True)
    if w.dim() == 1:
        return ((A @ w - y) ** 2).mean()
    return ((A @ w.T - y.unsqueeze(-1)) ** 2).mean(0)


def per_example_gradients(A: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row i is the gradient of example i's loss ``(a_i·w - y_i)²``: ``2 (a_i·w - y_i) a_i``."""
    _check_targets(_check_matrix("A", A), y)
    _check_weights(A, w, several=False)
    return 2 * (A @ w - y).unsqueeze(1) * A


def batch_gradients(A: torch.Tensor, y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The mean gradient of each of many batches, one per run: A (runs, B, d), y (runs, B), W (runs, d)."""
    for name, value in (("A", A), ("y", y), ("W", W)):
        tensor(name, value)
    if A.dim() != 3 or y.shape != A.shape[:2] or W.shape != (A.shape[0], A.shape[2]):
        raise ValueError(f"A, y and W must be shaped (runs, B, d), (runs, B), (runs, d); got "
                         f"{tuple(A.shape)}, {tuple(y.shape)}, {tuple(W.shape)}")
    residual = (A @ W.unsqueeze(-1)).squeeze(-1) - y
    return 2 * (residual.unsqueeze(-1) * A).mean(1)


def hessian(A: torch.Tensor) -> torch.Tensor:
    """``2 AᵀA / N``, the same at every ``w``: the loss is quadratic."""
    _check_matrix("A", A)
    return 2 * A.T @ A / len(A)


def optimum(A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The least-squares solution ``w*`` (float64), where the full gradient is zero."""
    _check_targets(_check_matrix("A", A), y)
    return torch.linalg.lstsq(A.double(), y.double().unsqueeze(1)).solution.squeeze(1)
