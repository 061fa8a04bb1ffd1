"""The gradient noise scale: the batch size at which gradient noise and signal are comparable.

McCandlish et al. (2018): B_simple = tr(Σ) / |G|², with G the true gradient and Σ the covariance of
per-example gradients. Much below B_simple a bigger batch buys an almost proportionally better
step; much above it, almost nothing.

Used in lesson 07.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from dpedu._validate import tensor, whole


def simple_noise_scale(per_example_grads: torch.Tensor, whole_dataset: bool = False) -> float:
    """B_simple = tr(Σ)/|G|² from a matrix of per-example gradients, one row per example.

    For rows sampled from a larger population (the default) both parts are estimated without bias:
    tr(Σ) with the n - 1 divisor, and |G|² as |mean|² - tr(Σ)/n (the squared mean of n noisy rows
    overstates |G|² by tr(Σ)/n); if noise swamps signal so that this is not positive, returns ``inf``.
    With ``whole_dataset=True`` the rows are every example of the training set: their mean *is* G
    and their spread *is* Σ, so the exact values are used.
    """
    g = tensor("per_example_grads", per_example_grads)
    if g.dim() != 2:
        raise ValueError("per_example_grads must be a 2-D tensor: one row per example, one column per parameter")
    if not isinstance(whole_dataset, bool):
        raise TypeError(f"whole_dataset must be True or False, got {whole_dataset!r}")
    if g.shape[0] < 2:
        raise ValueError(f"per_example_grads needs at least two examples (rows) to estimate a spread, got {g.shape[0]}")
    if not torch.isfinite(g).all():
        raise ValueError("per_example_grads contains non-finite values (inf or nan)")
    g = g.double()
    n = g.shape[0]
    mean = g.mean(0)
    if whole_dataset:
        trace_sigma = ((g - mean) ** 2).sum().item() / n
        signal = (mean @ mean).item()
    else:
        trace_sigma = ((g - mean) ** 2).sum().item() / (n - 1)
        signal = (mean @ mean).item() - trace_sigma / n
    return trace_sigma / signal if signal > 0 else math.inf


def two_batch_noise_scale(small_batch_sq_norms: Sequence[float], big_batch_sq_norms: Sequence[float],
                          small_batch: int, big_batch: int) -> float:
    """B_simple from squared gradient norms measured at two batch sizes (McCandlish et al., App. A).

    E|G_B|² = |G|² + tr(Σ)/B, so two batch sizes give two equations for the two unknowns. Each list
    holds |G_B|² of independent batches (drawn with replacement); they are averaged first.
    """
    whole("small_batch", small_batch)
    whole("big_batch", big_batch)
    if small_batch >= big_batch:
        raise ValueError(f"small_batch ({small_batch}) must be smaller than big_batch ({big_batch})")
    means = []
    for name, values in (("small_batch_sq_norms", small_batch_sq_norms), ("big_batch_sq_norms", big_batch_sq_norms)):
        try:
            values = torch.as_tensor(values, dtype=torch.float64).flatten()
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must be a sequence of numbers, got {values!r}") from None
        if len(values) == 0 or not torch.isfinite(values).all() or (values < 0).any():
            raise ValueError(f"{name} must be a non-empty sequence of finite numbers >= 0 (squared norms)")
        means.append(values.mean().item())
    small, big = means
    signal = (big_batch * big - small_batch * small) / (big_batch - small_batch)
    trace_sigma = (small - big) / (1 / small_batch - 1 / big_batch)
    return trace_sigma / signal if signal > 0 else math.inf
