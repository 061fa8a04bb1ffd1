"""Checks for lesson 12's exercises, 12a's and 12b's: the pipeline's bubble, 1F1B's memory, a layout from the
memory calculator, and the process subgroups of data × tensor parallelism."""

from __future__ import annotations

from numbers import Integral

import torch.distributed as dist

from dpedu._validate import whole
from dpedu.beyond.parallelism_plan import options
from dpedu.beyond.pipeline import bubble_fraction, peak_in_flight, schedule
from dpedu.beyond.two_d_parallel import subgroups
from dpedu.exercises import close, number, verdict
from dpedu.runtime.launcher import launch


def bubble(stages: int, micro_batches: int, answer: float) -> bool:
    """What share of a GPipe step do ``stages`` stages spend idle with ``micro_batches`` micro-batches,
    when every forward and backward takes the same time (within 1 %)?"""
    truth = bubble_fraction(whole("stages", stages, maximum=1000), whole("micro_batches", micro_batches))
    answer = number(answer)
    return verdict(close(answer, truth, 0.01), "draw the timeline: how many slots does the first stage wait "
                                               "before its first backward, and how many slots are there?")


def micro_batches_kept(kind: str, stages: int, micro_batches: int, stage: int, answer: int) -> bool:
    """At most how many micro-batches' activations does stage ``stage`` (0 = first) keep under ``kind``
    ("gpipe" or "1f1b") with ``stages`` stages and ``micro_batches`` micro-batches?"""
    whole("stages", stages, maximum=64)
    whole("micro_batches", micro_batches, maximum=256)
    truth = peak_in_flight(schedule(kind, stages, micro_batches, stage))
    answer = number(answer)
    return verdict(answer == truth, "list the stage's forwards and backwards in order and count the "
                                    "micro-batches forwarded but not yet backwarded")


def layout_without_zero3(params: float, gpus: int, gpu_memory_gb: float, tensor_parallel: int,
                         pipeline_parallel: int, zero_stage: int) -> bool:
    """Model states only (mixed-precision Adam, 16 bytes a parameter): the first layout, in the preferred order
    of lesson 12b's part 1, whose states fit on ``gpus`` GPUs of ``gpu_memory_gb`` GB when ZeRO-3 is ruled out
    (its traffic). The answer is that layout's ``tensor_parallel``, ``pipeline_parallel`` and ``zero_stage``."""
    for name, value in (("tensor_parallel", tensor_parallel), ("pipeline_parallel", pipeline_parallel)):
        whole(name, value)
    whole("zero_stage", zero_stage, minimum=0, maximum=3)
    first = next((o for o in options(params, gpus=gpus, gpu_memory_gb=gpu_memory_gb)
                  if o.fits and o.zero_stage != 3), None)
    if first is None:
        raise ValueError(f"no layout without ZeRO-3 fits {params:.3g} parameters on {gpus} GPUs of {gpu_memory_gb} "
                         "GB: ask for more GPUs or more memory")
    answer = (tensor_parallel, pipeline_parallel, zero_stage)
    return verdict(answer == (first.tensor_parallel, first.pipeline_parallel, first.zero_stage),
                   "data parallelism alone first (DDP, ZeRO-1, ZeRO-2), then tensor parallelism 2, 4, 8, each with "
                   "DDP, ZeRO-1, ZeRO-2: each GPU holds 1/t of the parameters, and ZeRO divides by the rest")


def _this_ranks_groups(tensor_parallel_size: int) -> dict[str, list[int]]:
    tensor, data = subgroups(tensor_parallel_size)
    # new_group sets up each group's connections as its members reach it: without a collective after it, a rank
    # could leave while another still connects to a group they share (gloo: "Connection closed by peer")
    dist.barrier()
    return {"tensor": dist.get_process_group_ranks(tensor), "data": dist.get_process_group_ranks(data)}


def group_ranks(world_size: int, tensor_parallel_size: int, rank: int, group: str, answer: list[int]) -> bool:
    """``world_size`` ranks split into ``tensor_parallel_size``-way tensor parallelism by lesson 12b's
    ``two_d_parallel.subgroups``: which ranks (in any order) are in rank ``rank``'s ``group``, "tensor" or
    "data"? Built on real ranks with ``dist.new_group``."""
    whole("world_size", world_size, 2, maximum=8)
    whole("tensor_parallel_size", tensor_parallel_size, maximum=world_size)
    if world_size % tensor_parallel_size:
        raise ValueError(f"tensor_parallel_size must divide world_size {world_size}, got {tensor_parallel_size}")
    whole("rank", rank, 0, maximum=world_size - 1)
    if group not in ("tensor", "data"):
        raise ValueError(f"group must be 'tensor' or 'data', got {group!r}")
    if not isinstance(answer, (list, tuple, set)) or not all(isinstance(r, Integral) and not isinstance(r, bool)
                                                             for r in answer):
        raise TypeError(f"answer must be a list of ranks, got {answer!r}")
    if len(set(answer)) != len(answer):
        return verdict(False, "name each rank of the group once")
    truth = launch(_this_ranks_groups, world_size, args=(tensor_parallel_size,))[rank][group]
    return verdict(sorted(int(r) for r in answer) == sorted(truth),
                   "a tensor-parallel group is t consecutive ranks (one replica's slices); a data-parallel group "
                   "takes every t-th rank (the same slice in every replica)")
