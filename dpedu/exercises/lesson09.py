"""Checks for lesson 09's exercises: the bubble, 1F1B's memory, ZeRO's and HSDP's bytes, float16's range and
what activation checkpointing keeps."""

from __future__ import annotations

import math

import torch

from dpedu._validate import real, whole
from dpedu.beyond.parallelism_plan import kept_activation_bytes
from dpedu.beyond.pipeline import bubble_fraction, peak_in_flight, schedule
from dpedu.beyond.zero_memory import PRECISIONS, model_state_bytes
from dpedu.exercises import close, verdict


def _number(answer: object) -> object:
    """A number is an answer (right or wrong; NaN and inf are wrong); anything else is a TypeError."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"answer must be a number, got {answer!r}")
    return answer


def bubble(stages: int, micro_batches: int, answer: float) -> bool:
    """What share of a GPipe step do ``stages`` stages spend idle with ``micro_batches`` micro-batches,
    when every forward and backward takes the same time (within 1 %)?"""
    truth = bubble_fraction(whole("stages", stages, maximum=1000), whole("micro_batches", micro_batches))
    _number(answer)
    return verdict(close(answer, truth, 0.01), "draw the timeline: how many slots does the first stage wait "
                                               "before its first backward, and how many slots are there?")


def micro_batches_kept(kind: str, stages: int, micro_batches: int, stage: int, answer: int) -> bool:
    """At most how many micro-batches' activations does stage ``stage`` (0 = first) keep under ``kind``
    ("gpipe" or "1f1b") with ``stages`` stages and ``micro_batches`` micro-batches?"""
    whole("stages", stages, maximum=64)
    whole("micro_batches", micro_batches, maximum=256)
    truth = peak_in_flight(schedule(kind, stages, micro_batches, stage))
    _number(answer)
    return verdict(answer == truth, "list the stage's forwards and backwards in order and count the "
                                    "micro-batches forwarded but not yet backwarded")


def zero_gigabytes(params: float, world_size: int, stage: int, answer: float, precision: str = "apex") -> bool:
    """How many GB (1e9 bytes) of model states does each of ``world_size`` ranks hold under ZeRO ``stage``
    (0 = DDP) for ``params`` parameters trained with mixed-precision Adam (within 1 %), in ``precision``'s
    byte layout ("apex": 2 + 2 + 12, "autocast": 4 + 4 + 8)?"""
    real("params", params, above=0)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    truth = model_state_bytes(params, world_size, stage, **PRECISIONS[precision])["total"] / 1e9
    _number(answer)
    split = " + ".join(str(b) for b in PRECISIONS[precision].values())
    return verdict(close(answer, truth, 0.01), f"16 bytes per parameter: {split}; which of the three does "
                                               "this stage split over the ranks?")


def survives_float16(value: float, answer: bool) -> bool:
    """Does ``value`` survive being stored in float16: non-zero and finite? A value at or below 2^-25 in
    size rounds to 0; one at or above 65520 overflows to inf: neither survives."""
    real("value", value)
    if not isinstance(answer, bool):
        raise TypeError(f"answer must be True or False, got {answer!r}")
    stored = torch.tensor(value, dtype=torch.float32).half().item()
    truth = stored != 0 and math.isfinite(stored)
    return verdict(answer == truth, "float16's smallest positive (subnormal) value is 2^-24, about 6.0e-8; "
                                    "a value at or below half of it rounds to 0; its largest is 65504, and "
                                    "from 65520 on a value overflows to inf")


def hsdp_gigabytes(params: float, shard_size: int, answer: float, precision: str = "apex") -> bool:
    """How many GB (1e9 bytes) of model states does each GPU hold under HSDP that shards ``params``
    parameters (mixed-precision Adam, ``precision``'s byte layout) within groups of ``shard_size`` GPUs
    and replicates across the groups (within 1 %)?"""
    real("params", params, above=0)
    whole("shard_size", shard_size)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    truth = model_state_bytes(params, shard_size, 3, **PRECISIONS[precision])["total"] / 1e9
    _number(answer)
    return verdict(close(answer, truth, 0.01), "HSDP is FSDP within one group: over how many GPUs is each "
                                               "byte sharded, and does the number of groups matter?")


def kept_with_checkpointing(blocks: int, width: int, batch: int, answer: int) -> bool:
    """How many bytes does autograd keep from forward to backward for ``blocks`` of lesson 09 part 7's
    float32 MLP blocks (Linear(w, 4w), GELU, Linear(4w, w)) on a batch of ``batch``, each block
    checkpointed (the loss and the block being recomputed left out)?"""
    whole("blocks", blocks)
    whole("width", width)
    whole("batch", batch)
    truth = kept_activation_bytes(blocks, 0, batch * width * 4, full=True)
    _number(answer)
    return verdict(answer == truth, "a checkpointed block keeps only its input: how many float32 values is "
                                    "that, and how many blocks are there?")
