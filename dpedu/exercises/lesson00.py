"""Checks for lesson 00's exercises: all-reduce results, computed by a real launch."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from dpedu._validate import real, whole
from dpedu.exercises import verdict
from dpedu.runtime.failures import LaunchTimeoutError
from dpedu.runtime.launcher import launch


def _all_reduce_rank_plus_one(op_name: str) -> float:
    value = torch.tensor([dist.get_rank() + 1.0], dtype=torch.float64)
    dist.all_reduce(value, op=getattr(dist.ReduceOp, op_name))
    return value.item()


def sum_formula(formula: Callable[[int], float], world_sizes: tuple[int, ...] = (1, 2, 3, 4)) -> bool:
    """``formula(n)`` should give what all-reducing ``rank + 1`` with SUM returns on n ranks."""
    if not callable(formula):
        raise TypeError(f"formula must be a function of n, got {formula!r}")
    if not isinstance(world_sizes, (tuple, list)) or not world_sizes:
        raise ValueError(f"world_sizes must be a non-empty tuple of ints, got {world_sizes!r}")
    for n in world_sizes:
        whole("world_sizes", n, maximum=8)
    measured = {n: launch(_all_reduce_rank_plus_one, n, args=("SUM",))[0] for n in world_sizes}
    wrong = {n: got for n, got in measured.items() if formula(n) != got}
    return verdict(not wrong, f"on {sorted(wrong)} ranks the all-reduce gave {list(wrong.values())}")


def predict(op_name: str, world_size: int, prediction: float) -> bool:
    """Predict what all-reducing ``rank + 1`` with ``ReduceOp.<op_name>`` gives on ``world_size`` ranks."""
    if op_name not in ("SUM", "PRODUCT", "MIN", "MAX"):
        raise ValueError(f"op_name must be one of SUM, PRODUCT, MIN, MAX, got {op_name!r}")
    whole("world_size", world_size, maximum=8)
    real("prediction", prediction)
    got = launch(_all_reduce_rank_plus_one, world_size, args=(op_name,))[0]
    return verdict(got == prediction, f"every rank holds {op_name} over the values 1..{world_size}; "
                                       "run the all-reduce yourself and compare")


def _rank0_sleeps_then_all_reduces(seconds: float) -> None:
    if dist.get_rank() == 0:
        time.sleep(seconds)
    dist.all_reduce(torch.ones(1))


def timeout_names(answer: Sequence[int], sleep: float = 5.0, timeout: float = 2.0) -> bool:
    """Which ranks does the timeout error name when rank 0 sleeps ``sleep`` s before its all-reduce?"""
    real("sleep", sleep, above=0, at_most=60)  # the check waits this long: nothing that looks like a hang
    real("timeout", timeout, above=0, at_most=60)
    if isinstance(answer, (str, bytes)) or not isinstance(answer, Sequence):
        raise TypeError(f"answer must be a list of rank numbers, got {answer!r}")
    try:
        launch(_rank0_sleeps_then_all_reduces, 2, args=(sleep,), timeout=timeout)
        named: list[int] = []
    except LaunchTimeoutError as error:
        named = list(error.unfinished)
    return verdict(sorted(answer) == named, "rank 1 reached the all-reduce in time: where was it waiting "
                                            "when the deadline came?")
