"""Argument checks shared across dpedu: a ValueError that names the argument, before any work starts.

Used by every module of dpedu; no lesson shows these checks (``show_source`` folds them).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn


def whole(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum] (bools are refused: True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None
                                                                                      and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be an int {bound}, got {value!r}")
    return value


def real(name: str, value: object, *, above: float | None = None, at_least: float | None = None,
         at_most: float | None = None) -> float:
    """``value`` as a finite float, ``> above``, ``>= at_least`` and ``<= at_most`` when given."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (above is not None and value <= above) or (at_least is not None and value < at_least)
            or (at_most is not None and value > at_most)):
        bounds = [f"{sign} {bound:g}" for sign, bound in ((">", above), (">=", at_least), ("<=", at_most))
                  if bound is not None]
        raise ValueError(f"{name} must be a finite number{' ' + ' and '.join(bounds) if bounds else ''}, "
                         f"got {value!r}")
    return float(value)


def tensor(name: str, value: object, dim: int | None = None) -> torch.Tensor:
    """``value`` if it is a tensor (TypeError if not) with ``dim`` dimensions when given (ValueError if not)."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if dim is not None and value.dim() != dim:
        raise ValueError(f"{name} must be a {dim}-D tensor, got shape {tuple(value.shape)}")
    return value


def training_problem(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor) -> None:
    """What ``loss_fn(model(X), y)`` needs: a module, a loss, and as many targets as rows in X, of the
    parameters' dtype (else torch fails deep inside the forward)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, got {loss_fn!r}")
    if not isinstance(X, torch.Tensor) or not isinstance(y, torch.Tensor):
        raise TypeError(f"X and y must be tensors, got {type(X).__name__} and {type(y).__name__}")
    if X.dim() == 0 or y.dim() == 0 or len(X) == 0 or len(X) != len(y):
        raise ValueError(f"X and y must hold the same, non-zero number of examples (rows), got shapes "
                         f"{tuple(X.shape)} and {tuple(y.shape)}")
    weight = next(model.parameters(), None)
    if weight is not None and X.is_floating_point() and X.dtype != weight.dtype:  # else torch fails deep inside
        raise TypeError(f"X is {X.dtype} but model's parameters are {weight.dtype}: convert one of them")
