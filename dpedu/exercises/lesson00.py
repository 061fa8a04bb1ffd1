"""Checks for lesson 00's exercises: all-reduce results, computed by a real launch."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from dpedu._validate import whole
from dpedu.exercises import verdict
from dpedu.launcher import launch


def _all_reduce_rank_plus_one(op_name: str) -> float:
    value = torch.tensor([dist.get_rank() + 1.0], dtype=torch.float64)
    dist.all_reduce(value, op=getattr(dist.ReduceOp, op_name))
    return value.item()


def sum_formula(formula: Callable[[int], float], world_sizes: tuple[int, ...] = (1, 2, 3, 4)) -> bool:
    """``formula(n)`` should give what all-reducing ``rank + 1`` with SUM returns on n ranks."""
    measured = {n: launch(_all_reduce_rank_plus_one, n, args=("SUM",))[0] for n in world_sizes}
    wrong = {n: got for n, got in measured.items() if formula(n) != got}
    return verdict(not wrong, f"on {sorted(wrong)} ranks the all-reduce gave {list(wrong.values())}")


def predict(op_name: str, world_size: int, prediction: float) -> bool:
    """Predict what all-reducing ``rank + 1`` with ``ReduceOp.<op_name>`` gives on ``world_size`` ranks."""
    if op_name not in ("SUM", "PRODUCT", "MIN", "MAX"):
        raise ValueError(f"op_name must be one of SUM, PRODUCT, MIN, MAX, got {op_name!r}")
    whole("world_size", world_size, maximum=8)
    got = launch(_all_reduce_rank_plus_one, world_size, args=(op_name,))[0]
    return verdict(got == prediction, f"every rank holds {op_name} over the values 1..{world_size}; "
                                       "run the all-reduce yourself and compare")
