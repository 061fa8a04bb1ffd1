"""Checks for lesson 13's exercises: the script's micro-batch, the sampler's padding, the learning rate
schedule, and a model's FLOPs per token and MFU."""

from __future__ import annotations

import math

from dpedu._validate import whole
from dpedu.exercises import close, number, verdict
from dpedu.training_run.batches import micro_batch_size
from dpedu.training_run.flops import flops_per_token, mfu
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


def training_flops(parameters: int, layers: int, width: int, sequence: int, answer: float) -> bool:
    """FLOPs of one token's forward and backward through a GPT of ``parameters`` non-embedding parameters,
    ``layers`` blocks of width ``width``, in sequences of ``sequence`` tokens (within 1 %)."""
    truth = flops_per_token(parameters, layers, width, sequence)
    number(answer)
    return verdict(close(answer, truth, 0.01), "6 per parameter (2 forward, 4 backward) and 12 L d T for attention's "
                                               "two matmuls per layer, forward and backward")


def model_flops_utilisation(tokens_per_second: float, flops_per_token: float, devices: int, peak_per_device: float,
                            answer: float) -> bool:
    """The MFU, as a fraction, of a run of ``tokens_per_second`` at ``flops_per_token`` on ``devices`` devices of
    ``peak_per_device`` FLOP/s each (within 1 %)."""
    whole("devices", devices)
    truth = mfu(tokens_per_second, flops_per_token, devices * peak_per_device)
    number(answer)
    return verdict(close(answer, truth, 0.01), "the model's FLOP/s (tokens/s x FLOPs per token) over the peak of "
                                               "every device that computed them, as a fraction (0.4, not 40)")
