"""Checks for lesson 13's exercises: the script's micro-batch, the sampler's padding and the learning rate
schedule."""

from __future__ import annotations

import math

from dpedu._validate import whole
from dpedu.exercises import close, number, verdict
from dpedu.training_run.batches import micro_batch_size
from dpedu.training_run.schedule import learning_rate


def micro_batch(global_batch: int, ranks: int, accumulate: int, answer: int) -> bool:
    """How many examples does each rank run per forward-backward with ``--global-batch global_batch`` on
    ``ranks`` ranks and ``--accumulate accumulate`` (exactly; the script refuses batches that do not divide)?"""
    truth = micro_batch_size(global_batch, ranks, accumulate)  # a ValueError names a global batch that does not divide
    number(answer)
    return verdict(answer == truth, "one optimizer step sees the global batch: ranks x accumulate micro-batches")


def padding(examples: int, ranks: int, answer: int) -> bool:
    """How many examples does ``DistributedSampler`` (``drop_last=False``) repeat to split ``examples`` evenly
    over ``ranks`` ranks?"""
    whole("examples", examples)
    whole("ranks", ranks, maximum=100_000)
    number(answer)
    truth = math.ceil(examples / ranks) * ranks - examples
    return verdict(answer == truth, "every rank gets ceil(examples / ranks); the total minus examples is padding")


def learning_rate_at(step: int, answer: float, *, peak: float = 3e-3, warmup: int = 100, total: int = 1000,
                     final: float = 0.1) -> bool:
    """The learning rate of optimizer step ``step`` (0-based) of the script's schedule (within 1 %)."""
    truth = learning_rate(step, peak=peak, warmup=warmup, total=total, final=final)
    number(answer)
    return verdict(close(answer, truth, 0.01), "during warmup the rate is peak x (step + 1) / warmup; after it, "
                                               "half a cosine from peak down to final x peak")
