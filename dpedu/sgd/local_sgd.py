"""Communicating less often: local SGD and DiLoCo against synchronous SGD, loss against bytes sent (lesson 06).

Synchronous SGD, what DDP computes (lessons 03 to 05), all-reduces the gradient at every step. Local SGD
(parameter averaging; studied by Lin et al. 2018, arXiv:1808.07217, who also propose post-local SGD) lets
every rank take ``period`` (H) optimizer steps on its own data and then averages the *parameters*: one
all-reduce of the same size every H steps, so H times fewer bytes.
DiLoCo (Douillard et al. 2023, arXiv:2311.08105) keeps the rounds but treats what a round moved the
parameters, start - average, as a gradient (the *pseudo-gradient*) for an outer optimizer: SGD with
Nesterov momentum (the paper: lr 0.7, momentum 0.9). The paper's inner optimizer is AdamW; here it is
``inner``: plain SGD by default, so that the outer step is DiLoCo's only difference from local SGD.

``train`` runs inside ranks started by ``dpedu.launch`` (gloo) and trains lesson 01's digits MLP on this
rank's shard of the data. What is guaranteed (``tests/sgd/test_local_sgd.py``):

- the same data in every method: this rank's batches depend only on ``seed``, the rank and the step;
- with H = 1 and plain SGD, local SGD is synchronous SGD up to float rounding (an SGD step is linear in
  the gradient, so averaging the stepped parameters averages the gradients); DiLoCo with outer lr 1 and no
  momentum is local SGD at any H (its outer step then lands on the average);
- ``"torch"``, torch's own ``PeriodicModelAverager``, averages after the same steps as ``"local"``;
- every all-reduce carries every parameter once, in float32: a rank hands 4 bytes per parameter per round
  to collectives (counted by ``dpedu.runtime.traffic.bytes_sent``), and after each round every rank holds
  the same parameters, whose loss on the whole training set is recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

from dpedu._validate import real, whole
from dpedu.datasets import digits
from dpedu.models import mlp
from dpedu.runtime.traffic import bytes_sent

__all__ = ["METHODS", "train", "average_", "outer_step", "torch_averaging_steps"]

METHODS = ("sync", "local", "diloco", "torch")


@torch.no_grad()
def average_(tensors: list[torch.Tensor]) -> None:
    """Replace each tensor, in place, by its mean over the ranks: one all-reduce of one flat buffer."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    for t, mean in zip(tensors, flat.split([t.numel() for t in tensors]), strict=True):
        t.copy_(mean.view_as(t))


def outer_step(parameters: list[torch.Tensor], start: list[torch.Tensor], outer: torch.optim.Optimizer) -> None:
    """DiLoCo's outer step, at the end of a round: average the pseudo-gradient start - parameters over the
    ranks, go back to ``start`` and let the outer optimizer (over ``parameters``) step along it."""
    with torch.no_grad():
        pseudo_gradients = [s - p for s, p in zip(start, parameters, strict=True)]
        average_(pseudo_gradients)  # = start - the ranks' average: the same bytes as local SGD's average
        for p, s, g in zip(parameters, start, pseudo_gradients, strict=True):
            p.copy_(s)
            p.grad = g
        outer.step()  # SGD with Nesterov momentum: the same step on every rank, so they stay identical
        for s, p in zip(start, parameters, strict=True):
            s.copy_(p)  # the next round starts here


def train(method: str, *, period: int = 1, steps: int, batch_size: int, lr: float, inner: str = "sgd",
          outer_lr: float = 0.7, outer_momentum: float = 0.9, eval_every: int | None = None,
          seed: int = 0) -> dict[str, Any]:
    """Train the digits MLP on this rank for ``steps`` steps of ``batch_size`` examples, one way of ``METHODS``.

    ``"sync"`` all-reduces the gradient every step (``period`` must be 1); ``"local"`` averages the parameters
    every ``period`` steps; ``"diloco"`` makes an outer step every ``period`` steps; ``"torch"`` is ``"local"``
    done by torch's ``PeriodicModelAverager`` (``period`` of at least 2). Every ``eval_every`` steps (default:
    ``period``; a multiple of it that divides ``steps``) it records the examples this rank has trained on,
    the bytes it has handed to collectives and the loss of the (identical) parameters on the training set.
    Returns ``{"examples": [...], "bytes": [...], "loss": [...], "parameters": one flat tensor}``.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if inner not in ("sgd", "adamw"):
        raise ValueError(f"inner must be 'sgd' or 'adamw', got {inner!r}")
    whole("period", period, minimum=2 if method == "torch" else 1, maximum=1 if method == "sync" else None)
    whole("steps", steps)
    whole("batch_size", batch_size)
    real("lr", lr, above=0)
    real("outer_lr", outer_lr, above=0)
    real("outer_momentum", outer_momentum, at_least=0, at_most=0.999)
    whole("seed", seed, minimum=0)
    eval_every = whole("eval_every", period if eval_every is None else eval_every)
    if eval_every % period or steps % eval_every:
        raise ValueError(f"eval_every={eval_every} must be a multiple of period={period} that divides "
                         f"steps={steps}: the loss is measured at the end of a round")
    if not dist.is_initialized():
        raise RuntimeError("train runs inside ranks: call it in the function you give dpedu.launch")
    data = digits()
    model = mlp(64, 32, 10, seed=seed)  # the same start on every rank
    parameters = list(model.parameters())
    optimizer = torch.optim.SGD(parameters, lr=lr) if inner == "sgd" else torch.optim.AdamW(parameters, lr=lr)
    if method == "diloco":
        start = [p.detach().clone() for p in parameters]  # where the round began
        outer = torch.optim.SGD(parameters, lr=outer_lr, momentum=outer_momentum, nesterov=outer_momentum > 0)
    if method == "torch":  # counts its calls from 0 and averages at call warmup_steps, then every period calls
        averager = PeriodicModelAverager(period, warmup_steps=period - 1)  # so: after steps H, 2H, ...
    batches = _batches(data.X_train, data.y_train, batch_size, seed)
    record: dict[str, Any] = {"examples": [], "bytes": [], "loss": []}
    with bytes_sent() as sent:
        for step in range(1, steps + 1):
            x, y = next(batches)
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            if method == "sync":
                average_([p.grad for p in parameters])  # DDP: the gradient, every step
            optimizer.step()
            if method == "local" and step % period == 0:
                average_(parameters)  # local SGD: the parameters, every period steps
            elif method == "diloco" and step % period == 0:
                outer_step(parameters, start, outer)
            elif method == "torch":
                averager.average_parameters(parameters)  # it decides itself when to average
            if step % eval_every == 0:
                record["examples"].append(step * batch_size)
                record["bytes"].append(sent.bytes)
                record["loss"].append(_loss(model, data.X_train, data.y_train))
    record["parameters"] = torch.cat([p.detach().reshape(-1) for p in parameters])
    return record


@torch.no_grad()
def _loss(model: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    """Cross-entropy on all of (X, y): the same data on every rank. (Not the digits test set: one of its
    pixels is constant in the training split, so standardising blows it up, and the test loss with it.)"""
    return F.cross_entropy(model(X), y).item()


def _batches(X: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int) -> Iterator[tuple[torch.Tensor, ...]]:
    """This rank's shard (every world_size-th example from its rank on), reshuffled each epoch, in full
    batches: the same sequence in every method, set by ``seed`` and the rank alone."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    X, y = X[rank::world_size], y[rank::world_size]
    if batch_size > len(X):
        raise ValueError(f"batch_size={batch_size} is larger than this rank's {len(X)} examples")
    generator = torch.Generator().manual_seed(seed * world_size + rank)
    while True:
        order = torch.randperm(len(X), generator=generator)
        for first in range(0, len(X) - batch_size + 1, batch_size):
            rows = order[first:first + batch_size]
            yield X[rows], y[rows]


def torch_averaging_steps(period: int, *, warmup_steps: int = 0, steps: int = 16) -> list[int]:
    """The steps (counted from 1) after which torch's ``PeriodicModelAverager`` averages when it is called
    once after every optimizer step, as its documentation shows; found by counting what it sends (run it
    inside ranks)."""
    whole("period", period, minimum=2)  # torch warns at period 1: use DDP then
    whole("warmup_steps", warmup_steps, minimum=0)
    whole("steps", steps)
    if not dist.is_initialized():
        raise RuntimeError("torch_averaging_steps runs inside ranks: call it in the function you give dpedu.launch")
    averager = PeriodicModelAverager(period, warmup_steps=warmup_steps)
    weight = torch.nn.Parameter(torch.zeros(1))
    weight.grad = torch.zeros(1)  # the averager leaves out parameters without a gradient
    averaged = []
    for step in range(1, steps + 1):
        with bytes_sent() as sent:
            averager.average_parameters([weight])
        if sent.bytes:
            averaged.append(step)
    return averaged
