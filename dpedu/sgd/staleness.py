"""Gradient descent with stale gradients: the deterministic model of asynchronous training.

In asynchronous SGD a worker reads the parameters, computes a gradient, and by the time it applies
it other workers have moved the parameters on: the gradient is *stale* by the number of updates in
between. ``delayed_gd`` applies every gradient exactly ``staleness`` updates late, which isolates
that one effect from all the randomness of a real run.

Used in lesson 06.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dpedu._validate import real, whole


def delayed_gd(grad: Callable[[torch.Tensor], torch.Tensor], x0: torch.Tensor, lr: float, staleness: int,
               steps: int) -> torch.Tensor:
    """Gradient descent whose update at step t uses ``grad`` at the iterate of step t - staleness.

    ``x_{t+1} = x_t - lr * grad(x_{max(t - staleness, 0)})``: while t < staleness the gradient is
    taken at the start point. Returns the iterates, shape ``(steps + 1, *x0.shape)``, first row x0.
    With staleness 0 this is plain gradient descent.
    """
    if not callable(grad):
        raise TypeError(f"grad must be callable, got {type(grad).__name__}")
    if not isinstance(x0, torch.Tensor):
        raise TypeError(f"x0 must be a torch.Tensor, got {type(x0).__name__}")
    real("lr", lr, at_least=0)
    whole("staleness", staleness, minimum=0)
    whole("steps", steps, minimum=0)
    iterates = [x0.clone()]
    for t in range(steps):
        g = grad(iterates[max(t - staleness, 0)])
        if not isinstance(g, torch.Tensor) or g.shape != x0.shape:
            raise ValueError(f"grad must return a tensor shaped like x0 {tuple(x0.shape)}, got "
                             f"{tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__}")
        iterates.append(iterates[t] - lr * g)
    return torch.stack(iterates)


def stability_limit(staleness: int) -> float:
    """The largest lr·λ for which delayed GD on a quadratic with curvature λ converges, found numerically.

    Along an eigenvector, ``e_{t+1} = e_t - lr·λ·e_{t-τ}`` converges iff every root of
    ``z^(τ+1) - z^τ + lr·λ`` lies inside the unit circle; bisect on lr·λ for the edge. The result
    is stable and agrees with the closed form 2·sin(π / (4τ + 2)) to 1e-13 (tested for τ ≤ 100).
    """
    whole("staleness", staleness, minimum=0, maximum=100)  # 60 root-findings of degree τ + 1: 0.3 s at 100

    def stable(a: float) -> bool:
        coefficients = np.zeros(staleness + 2)
        coefficients[0] += 1.0
        coefficients[1] -= 1.0
        coefficients[-1] += a  # for staleness 0 this shares its place with the -1: z - 1 + a
        return bool(np.abs(np.roots(coefficients)).max() < 1)

    return stability_edge(stable, 0.0, 2.5)  # stable just above 0; unstable at 2.5 for every staleness


def stability_edge(stable: Callable[[float], bool], low: float, high: float, steps: int = 60) -> float:
    """The largest value in (low, high) at which ``stable`` holds, by bisection, from the stable side.

    Assumes one edge in between: ``stable`` holds just above ``low`` and fails from the edge to
    ``high`` (checked at ``high``). The result is stable itself (or ``low``, if nothing in between
    is) and within ``(high - low) / 2**steps`` of the edge, or one float64 spacing if that is more
    (60 halvings reach it for any interval of order 1).
    """
    if not callable(stable):
        raise TypeError(f"stable must be a function of one number, got {stable!r}")
    real("low", low)
    real("high", high, above=low)
    whole("steps", steps, maximum=200)
    if stable(high):
        raise ValueError(f"stable(high) holds at high={high!r}: the edge is not below high")
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (middle, high) if stable(middle) else (low, middle)
    return low
