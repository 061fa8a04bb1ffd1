"""Checks for lesson 11's exercises: ZeRO's and HSDP's bytes, float16's range, what activation checkpointing
keeps, and the slices of ZeRO-1 by hand."""

from __future__ import annotations

import math

import torch

from dpedu._validate import real, whole
from dpedu.beyond.parallelism_plan import kept_activation_bytes
from dpedu.beyond.zero_memory import PRECISIONS, model_state_bytes
from dpedu.exercises import close, number, verdict


def zero_gigabytes(params: float, world_size: int, stage: int, answer: float, precision: str = "apex") -> bool:
    """How many GB (1e9 bytes) of model states does each of ``world_size`` ranks hold under ZeRO ``stage``
    (0 = DDP) for ``params`` parameters trained with mixed-precision Adam (within 1 %), in ``precision``'s
    byte layout ("apex": 2 + 2 + 12, "autocast": 4 + 4 + 8)?"""
    real("params", params, above=0)
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)}, got {precision!r}")
    truth = model_state_bytes(params, world_size, stage, **PRECISIONS[precision])["total"] / 1e9
    answer = number(answer)
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
    answer = number(answer)
    return verdict(close(answer, truth, 0.01), "HSDP is FSDP within one group: over how many GPUs is each "
                                               "byte sharded, and does the number of groups matter?")


def kept_with_checkpointing(blocks: int, width: int, batch: int, answer: int) -> bool:
    """How many bytes does autograd keep from forward to backward for ``blocks`` of lesson 11b's
    float32 MLP blocks (Linear(w, 4w), GELU, Linear(4w, w)) on a batch of ``batch``, each block
    checkpointed (the loss and the block being recomputed left out)?"""
    whole("blocks", blocks)
    whole("width", width)
    whole("batch", batch)
    truth = kept_activation_bytes(blocks, 0, batch * width * 4, full=True)
    answer = number(answer)
    return verdict(answer == truth, "a checkpointed block keeps only its input: how many float32 values is "
                                    "that, and how many blocks are there?")


def zero_one_slice(params: int, ranks: int, answer: int) -> bool:
    """How many elements of the flat parameters does each of ``ranks`` ranks step under
    ``zero_one.Zero1Optimizer`` for a model of ``params`` parameters (exactly; the last slice includes the
    padding)?"""
    whole("params", params)
    whole("ranks", ranks, maximum=100_000)
    truth = -(-params // ranks)
    answer = number(answer)
    return verdict(answer == truth, "the flat vector is padded to a multiple of the ranks, then cut in equal "
                                    "slices: divide, rounding up")
