"""Gradient descent with stale gradients: the deterministic model of asynchronous training.

In asynchronous SGD a worker reads the parameters, computes a gradient, and by the time it applies
it other workers have moved the parameters on: the gradient is *stale* by the number of updates in
between. ``delayed_gd`` applies every gradient exactly ``staleness`` updates late, which isolates
that one effect from all the randomness of a real run.
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
    ``z^(τ+1) - z^τ + lr·λ`` lies inside the unit circle; bisect on lr·λ for the edge.
    """
    whole("staleness", staleness, minimum=0)

    def stable(a: float) -> bool:
        coefficients = np.zeros(staleness + 2)
        coefficients[0] += 1.0
        coefficients[1] -= 1.0
        coefficients[-1] += a  # for staleness 0 this shares its place with the -1: z - 1 + a
        return bool(np.abs(np.roots(coefficients)).max() < 1)

    return stability_edge(stable, 0.0, 2.5)  # stable just above 0; unstable at 2.5 for every staleness


def stability_edge(stable: Callable[[float], bool], low: float, high: float, steps: int = 60) -> float:
    """The edge between ``stable(low)`` and not ``stable(high)``, by bisection, from the stable side.

    Assumes one edge in between. The result is stable itself and within ``(high - low) / 2**steps``
    of the edge (60 halvings: float64 precision for any interval of order 1).
    """
    real("low", low)
    real("high", high, above=low)
    whole("steps", steps)
    for _ in range(steps):
        middle = (low + high) / 2
        low, high = (middle, high) if stable(middle) else (low, middle)
    return low
