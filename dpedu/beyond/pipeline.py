"""Pipeline parallelism by hand: micro-batches, the GPipe and 1F1B schedules, and the bubble.

Model parallelism leaves p - 1 of p stages idle at any moment. Cut the batch into m micro-batches and
stage r can work on micro-batch i while stage r + 1 works on i - 1. Each stage still waits at the start
(for the first micro-batch to arrive) and at the end (for the last gradient): with forward and backward
taking the same time on every stage, the idle share of the whole run, the *bubble*, is
(p - 1)/(m + p - 1) (Huang et al. 2019, GPipe, arXiv:1811.06965). Narayanan et al. (2021) measure the same
idle time against the ideal compute time instead: (p - 1)/m = the idle share / (1 - the idle share).

The schedule sets the order in which a stage runs its forwards ("F", i) and backwards ("B", i):

- GPipe: all m forwards, then all m backwards. Run as here, without recomputation, every stage keeps the
  activations of all m micro-batches; GPipe itself re-materialises them (keeps only each stage's inputs
  and recomputes the rest during backward).
- 1F1B, from PipeDream (Narayanan et al. 2019, SOSP), here with a flush at the end of every step as in
  PipeDream-Flush (Narayanan et al. 2021, arXiv:2006.09503) and Megatron-LM (Narayanan et al. 2021,
  arXiv:2104.04473): stage r runs p - 1 - r forwards to fill the pipe, then alternates one forward and
  one backward: it never keeps more than p - r micro-batches, without recomputation, with GPipe's bubble.
  The interleaved 1F1B of arXiv:2104.04473 (v model chunks per stage) divides the bubble by v.

``run_schedule`` executes a schedule on real ranks with real tensors, point-to-point messages only,
and measures the timeline and the activations each stage keeps for backward; ``work_s`` adds a fixed duration
to each forward and backward, so that the schedule, not this machine's cores, sets the timing.

Used in lesson 12a (and ``saved_storages`` in lesson 11b).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.fx.experimental.symbolic_shapes  # noqa: F401 - see below
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, tensor, whole

# backward(grad) imports that module (and sympy, about 1 s) on first use. Imported here, in the process
# that forks the ranks, every rank inherits it instead of importing it again at every launch.

__all__ = ["schedule", "peak_in_flight", "bubble_fraction", "run_schedule", "saved_storages", "idle_fraction",
           "one_more_slot", "follows_bubble", "stages_overlap", "relative_gap"]

SCHEDULES = ("gpipe", "1f1b")


def schedule(kind: str, stages: int, micro_batches: int, stage: int) -> list[tuple[str, int]]:
    """The order of stage ``stage``'s forwards ("F", i) and backwards ("B", i) under ``kind``."""
    if kind not in SCHEDULES:
        raise ValueError(f"kind must be one of {SCHEDULES}, got {kind!r}")
    whole("stages", stages)
    whole("micro_batches", micro_batches)
    whole("stage", stage, minimum=0, maximum=stages - 1)
    m = micro_batches
    if kind == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(stages - 1 - stage, m)
    steady = [op for i in range(m - warmup) for op in (("F", warmup + i), ("B", i))]
    return [("F", i) for i in range(warmup)] + steady + [("B", i) for i in range(m - warmup, m)]


def peak_in_flight(ops: list[tuple[str, int]]) -> int:
    """The most micro-batches forwarded and not yet backwarded at once: whose activations are kept."""
    if not isinstance(ops, list) or not all(isinstance(op, tuple) and len(op) == 2 and op[0] in ("F", "B")
                                            and isinstance(op[1], int) for op in ops):
        raise ValueError(f"ops must be a list of ('F', i) and ('B', i), got {ops!r}")
    open_, peak = set(), 0
    for what, i in ops:
        if what == "F":
            open_.add(i)
            peak = max(peak, len(open_))
        elif i not in open_:
            raise ValueError(f"ops runs the backward of micro-batch {i} before its forward")
        else:
            open_.remove(i)
    return peak


def bubble_fraction(stages: int, micro_batches: int) -> float:
    """(p - 1)/(m + p - 1): the idle share of a pipeline whose stages all take the same time."""
    whole("stages", stages)
    whole("micro_batches", micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def one_more_slot(stages: int, micro_batches: int) -> float:
    """p/(m + p): the idle share of a schedule that idled one slot more per stage than the formula's."""
    return bubble_fraction(stages + 1, micro_batches)  # (p + 1 - 1)/(m + p + 1 - 1)


def follows_bubble(stages: int, micro_batches: list[int], idle: list[float], below: float = 0.05,
                   above: float = 0.75) -> bool:
    """Lesson 12's tight claim on measured idle shares (one per entry of ``micro_batches``, fewest first):
    each at most ``below`` under (p - 1)/(m + p - 1) and over it by less than ``above`` of the way to one
    more idle slot per stage, and the most micro-batches idling less than the fewest by over 0.2."""
    if len(idle) != len(micro_batches) or len(idle) < 2:
        raise ValueError(f"idle must hold one share per entry of micro_batches (2 or more), got {idle!r}")
    gaps = [(share - bubble_fraction(stages, m), one_more_slot(stages, m) - bubble_fraction(stages, m))
            for m, share in zip(micro_batches, idle, strict=True)]
    return all(-below < gap < above * slot for gap, slot in gaps) and idle[0] > idle[-1] + 0.2


def stages_overlap(stages: int, idle: float, margin: float = 0.1) -> bool:
    """Whether a measured idle share shows stages working at the same time: below (p - 1)/p by ``margin``.

    Stages that take turns (one micro-batch at a time through the whole pipeline) idle at least
    (p - 1)/p of the step, whatever m: one stage at most works at any moment, and a busy machine only
    adds waiting. So this fails for them on any machine; it holds for a pipeline unless wake-ups run
    late by a large share of each stage's time."""
    whole("stages", stages, minimum=2)
    return idle < (stages - 1) / stages - margin


def relative_gap(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """The largest |got - want| over the pairs (got, want), each relative to the largest |want| of its pair:
    lesson 12's measure of how far ranks' results are from one process's."""
    return max(((got - want).abs().max() / want.abs().max()).item() for got, want in pairs)


def run_schedule(stage: nn.Module, kind: str, x: torch.Tensor, y: torch.Tensor, micro_batches: int,
                 work_s: float = 0.0) -> dict:
    """Run one training step of ``stage`` (this rank's part of the model) under schedule ``kind``.

    The batch ``x``, ``y`` is cut into ``micro_batches`` equal parts; the last rank's loss is the mean
    squared error of each micro-batch divided by m, so that the gradients add up to the whole batch's.
    Activations go forward and their gradients backward with isend/irecv; every stage must keep the
    width of ``x``. A forward or backward of the whole batch also sleeps ``work_s`` seconds, so each
    micro-batch's sleeps ``work_s``/m before sending its result (a stage of controlled duration: m
    micro-batches, the same work). Returns the timeline [(what, i, start, end)], the peak bytes of
    activations the stage kept for backward (the tensors autograd saved, counted once per storage; the
    stage's parameters and the batch ``x``, ``y`` left out: they are there whatever the schedule) and the
    loss on the last rank.
    """
    if not isinstance(stage, nn.Module):
        raise TypeError(f"stage must be a torch.nn.Module, got {type(stage).__name__}")
    tensor("x", x)
    tensor("y", y)
    whole("micro_batches", micro_batches)
    if len(x) % micro_batches or len(y) != len(x):
        raise ValueError(f"micro_batches must divide the batch (x and y of {len(x)} and {len(y)} rows), "
                         f"got {micro_batches}")
    real("work_s", work_s, at_least=0)
    rank, p = dist.get_rank(), dist.get_world_size()
    ops = schedule(kind, p, micro_batches, rank)
    xs, ys = x.chunk(micro_batches), y.chunk(micro_batches)
    kept: dict[int, dict[int, int]] = {}  # micro-batch -> storage -> bytes saved for its backward
    there_anyway = {t.untyped_storage().data_ptr() for t in (*stage.parameters(), x, y)}
    inputs, outputs, sends, timeline = {}, {}, [], []
    peak, loss = 0, torch.zeros(())
    for what, i in ops:
        if what == "F":
            if rank == 0:
                inp = xs[i]
            else:
                inp = torch.empty_like(xs[i])
                dist.irecv(inp, rank - 1, tag=2 * i).wait()
                inp.requires_grad_()
            start = time.monotonic()
            kept[i] = {}
            with saved_storages(_always(kept[i]), left_out=there_anyway):
                out = stage(inp)
                if out.shape != inp.shape:  # else the next stage receives into a buffer of the wrong shape
                    raise ValueError(f"stage (rank {rank}) must return its input's shape {tuple(inp.shape)}, "
                                     f"got {tuple(out.shape)}")
                if rank == p - 1:
                    out = F.mse_loss(out, ys[i]) / micro_batches
                    loss = loss + out.detach()
            peak = max(peak, sum(sum(k.values()) for k in kept.values()))
            inputs[i], outputs[i] = inp, out
            sending, to = (out.detach(), rank + 1) if rank < p - 1 else (None, None)
        else:
            grad = None
            if rank < p - 1:
                grad = torch.empty_like(outputs[i])
                dist.irecv(grad, rank + 1, tag=2 * i + 1).wait()
            start = time.monotonic()
            outputs[i].backward(grad)
            del kept[i], outputs[i]
            inp = inputs.pop(i)
            sending, to = (inp.grad, rank - 1) if rank > 0 else (None, None)
        time.sleep(work_s / micro_batches)  # the rest of this stage's work, before its result leaves
        timeline.append((what, i, start, time.monotonic()))
        if sending is not None:
            sends.append(dist.isend(sending, to, tag=2 * i + (what == "B")))
    for request in sends:
        request.wait()
    return {"timeline": timeline, "peak_kept_bytes": peak, "loss": loss.item() if rank == p - 1 else None}


def saved_storages(where: Callable[[torch.Tensor], dict[int, int]], left_out: set[int]):
    """Inside the block, record the bytes of every storage autograd saves for backward, once per storage,
    in the dict ``where(tensor)`` names (storage address -> bytes); storages in ``left_out`` are skipped."""
    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in left_out:
            where(tensor)[storage.data_ptr()] = storage.nbytes()
        return tensor
    return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)


def _always(kept: dict[int, int]) -> Callable[[torch.Tensor], dict[int, int]]:
    return lambda tensor: kept


def idle_fraction(timelines: list[list[tuple]]) -> float:
    """1 - (time spent working, summed over stages) / (stages x the time from first start to last end)."""
    if not isinstance(timelines, list) or not timelines or not all(timelines):
        raise ValueError("timelines must be a non-empty list of each stage's non-empty timeline")
    start = min(event[-2] for timeline in timelines for event in timeline)
    end = max(event[-1] for timeline in timelines for event in timeline)
    busy = sum(event[-1] - event[-2] for timeline in timelines for event in timeline)
    return 1 - busy / (len(timelines) * (end - start))
