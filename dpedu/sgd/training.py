"""Mini-batch SGD that records its own history: the loop lessons 01 and 07 train with.

``batch_size = len(X)`` is full-batch gradient descent, ``batch_size = 1`` is SGD, anything between
is mini-batch SGD. Each epoch visits the examples once in a fresh random order (sampling without
replacement); the last batch of an epoch may be smaller.

Used in lessons 01 and 07.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from dpedu._validate import real, training_problem, whole


@dataclass
class History:
    """The full training loss at evenly spaced points, with what it cost to get there.

    ``seconds`` counts training time only: evaluating the full loss is left out.
    """

    batch_size: int
    lr: float
    dataset_size: int
    updates: list[int] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)

    @property
    def epochs(self) -> list[float]:
        return [e / self.dataset_size for e in self.examples]


def full_loss(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor) -> float:
    """The loss of ``model`` on all of (X, y), without recording gradients."""
    training_problem(model, loss_fn, X, y)
    with torch.no_grad():
        return loss_fn(model(X), y).item()


def train(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor, *, batch_size: int, lr: float,
          epochs: float, seed: int = 0, evaluations_per_epoch: int = 4, warmup_updates: int = 0) -> History:
    """Train ``model`` in place with plain SGD for ``epochs`` passes over (X, y); return its history.

    The loss is recorded at the start, each time another ``1 / evaluations_per_epoch`` of an epoch
    has been processed (at the next update boundary), so runs with different batch sizes are
    compared at the same numbers of examples, and at the end. With ``warmup_updates`` the learning
    rate rises linearly from ``lr / warmup_updates`` to ``lr`` over that many updates (gradual warmup,
    Goyal et al. 2017).
    """
    training_problem(model, loss_fn, X, y)
    whole("batch_size", batch_size, maximum=len(X))  # at most len(X): full-batch GD
    real("lr", lr, above=0)
    real("epochs", epochs, above=0)
    whole("warmup_updates", warmup_updates, minimum=0)
    whole("evaluations_per_epoch", evaluations_per_epoch)
    whole("seed", seed, minimum=0)
    if round(epochs * len(X)) < 1:  # else nothing would be trained, silently
        raise ValueError(f"epochs must cover at least one example ({1 / len(X):.2g} epochs here), got {epochs!r}")
    if next(model.parameters(), None) is None:
        raise ValueError("model must have parameters to train")
    n = len(X)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = History(batch_size, lr, n)
    budget, every = round(epochs * n), n / evaluations_per_epoch
    updates = examples = 0
    seconds = 0.0

    def record() -> None:
        history.updates.append(updates)
        history.examples.append(examples)
        history.seconds.append(seconds)
        history.loss.append(full_loss(model, loss_fn, X, y))

    record()
    while examples < budget:
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, batch_size):
            if examples >= budget:
                break
            tic = time.perf_counter()
            batch = order[start:start + batch_size]
            if updates < warmup_updates:
                optimizer.param_groups[0]["lr"] = lr * (updates + 1) / warmup_updates
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(X[batch]), y[batch]).backward()
            optimizer.step()
            optimizer.param_groups[0]["lr"] = lr
            seconds += time.perf_counter() - tic
            updates += 1
            examples += len(batch)
            if examples >= len(history.examples) * every - 1e-9:
                record()
    if history.examples[-1] != examples:  # the budget ended between two evaluation points
        record()
    return history
