"""Checks for lesson 04's exercises: a learner's collectives run on real ranks against torch's own."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from dpedu._validate import real, whole
from dpedu.data_parallel.cost_model import ring_time
from dpedu.exercises import close, verdict
from dpedu.runtime.failures import LaunchTimeoutError
from dpedu.runtime.launcher import launch
from dpedu.runtime.traffic import bytes_sent

SIZES = (1, 2, 5, 1000, 1001)  # fewer elements than ranks, and sizes that do not divide evenly
WORLD_SIZES = (2, 3, 4)


def _run_learners(fn: Callable, kind: str) -> list[str]:
    """On this rank: run ``fn`` on each size, counting what it sends; what went wrong."""
    rank, world = dist.get_rank(), dist.get_world_size()
    problems = []
    for size in SIZES:
        mine = torch.randn(size, generator=torch.Generator().manual_seed(1000 * size + rank))
        if kind == "all_reduce":
            expected = mine.clone()
            dist.all_reduce(expected)
        else:
            expected = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(expected, mine)
            expected = torch.stack(expected)
        with bytes_sent() as sent:
            try:
                got = fn(mine)
            except Exception as error:  # the learner's code: report it, the other ranks may be waiting
                problems.append(f"{size} elements: {type(error).__name__}: {error}")
                break
        if collectives := sorted({what for what, _ in sent.calls} - {"send"}):
            problems.append(f"{size} elements: the exercise asks for point-to-point messages only, but {fn.__name__} "
                            f"called torch's {', '.join(collectives)}")
        elif kind == "all_reduce" and got is not mine:
            problems.append(f"{size} elements: return the tensor you were given, summed in place")
        elif not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            problems.append(f"{size} elements: expected a tensor of shape {tuple(expected.shape)}, got "
                            f"{tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}")
        elif not torch.allclose(got, expected, rtol=1e-5, atol=1e-6):
            problems.append(f"{size} elements: wrong values")
    return problems


def _check(fn: Callable, kind: str, hint: str) -> bool:
    if not callable(fn):
        raise TypeError(f"fn must be a function of one tensor, got {fn!r}")
    for world_size in WORLD_SIZES:
        try:
            problems = launch(_run_learners, world_size, args=(fn, kind), timeout=10)
        except LaunchTimeoutError as error:
            return verdict(False, f"with {world_size} ranks, some rank waited for a message that never came (a "
                                  f"send without its receive, or one of torch's collectives, which the exercise "
                                  f"does not allow, called on some ranks only?): {error}")
        wrong = [f"rank {rank}, {p}" for rank, rank_problems in enumerate(problems) for p in rank_problems]
        if wrong:
            return verdict(False, f"with {world_size} ranks: {wrong[0]} ({hint})")
    return verdict(True, "")


def all_reduce_from_messages(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Is ``fn(tensor)`` an all-reduce (sum, in place, returning ``tensor``) made of send/recv/isend/irecv,
    for 2, 3 and 4 ranks and sizes 1 to 1001? A tree, say: pairs add up, then the sum comes back down."""
    return _check(fn, "all_reduce", "compare with dist.all_reduce on a small tensor, printing from every rank")


def all_gather_from_messages(fn: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Is ``fn(tensor)`` an all-gather made of point-to-point messages: a new tensor of shape
    (world_size, *tensor.shape) whose row r is rank r's tensor, on every rank? A ring does it in p - 1 steps."""
    return _check(fn, "all_gather", "row r must be rank r's tensor; in a ring, forward what arrived last step")


def ring_bytes_per_rank(nbytes: int, world_size: int, answer: float) -> bool:
    """How many bytes does each rank send in a ring all-reduce of an ``nbytes`` message over ``world_size``
    ranks (within 1 %)? The lesson counted them."""
    whole("nbytes", nbytes)
    whole("world_size", world_size, minimum=2, maximum=10**6)
    truth = 2 * (world_size - 1) / world_size * nbytes
    return verdict(close(answer, truth, 0.01), "2(p - 1) steps, each sending one of p chunks")


def ring_seconds(nbytes: float, alpha: float, beta: float, world_size: int, answer: float) -> bool:
    """The α-β model's time for a ring all-reduce of ``nbytes`` over ``world_size`` ranks (within 1 %)."""
    real("nbytes", nbytes, at_least=0)
    real("alpha", alpha, at_least=0)
    real("beta", beta, at_least=0)
    whole("world_size", world_size, minimum=2, maximum=10**6)
    truth = ring_time(nbytes, alpha, beta, world_size)
    return verdict(close(answer, truth, 0.01), "count the steps (each pays α) and the bytes each rank sends "
                                               "(each pays β)")
