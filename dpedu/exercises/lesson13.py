"""Checks for lesson 13's exercises: the script's micro-batch, the sampler's padding, the learning rate
schedule, and a model's FLOPs per token and MFU (13a's 1 to 5); which examples a worker of a sharded stream yields,
and the all-reduce's share of a step (13b's 6 and 7)."""

from __future__ import annotations

import math
from numbers import Integral
from types import SimpleNamespace
from unittest import mock

from dpedu._validate import real, whole
from dpedu.exercises import close, number, plain, verdict
from dpedu.training_run import data_loading
from dpedu.training_run.batches import micro_batch_size
from dpedu.training_run.flops import flops_per_token, mfu
from dpedu.training_run.schedule import learning_rate


def micro_batch(global_batch: int, ranks: int, accumulate: int, answer: int) -> bool:
    """How many examples does each rank run per forward-backward with ``--global-batch global_batch`` on
    ``ranks`` ranks and ``--accumulate accumulate`` (exactly; the script refuses batches that do not divide)?"""
    truth = micro_batch_size(global_batch, ranks, accumulate)  # a ValueError names a global batch that does not divide
    answer = number(answer)
    return verdict(answer == truth, "one optimizer step sees the global batch: ranks x accumulate micro-batches")


def padding(examples: int, ranks: int, answer: int) -> bool:
    """How many examples does ``DistributedSampler`` (``drop_last=False``) repeat to split ``examples`` evenly
    over ``ranks`` ranks?"""
    whole("examples", examples)
    whole("ranks", ranks, maximum=100_000)
    answer = number(answer)
    truth = math.ceil(examples / ranks) * ranks - examples
    return verdict(answer == truth, "every rank gets ceil(examples / ranks); the total minus examples is padding")


def learning_rate_at(step: int, answer: float, *, peak: float = 3e-3, warmup: int = 100, total: int = 1000,
                     final: float = 0.1) -> bool:
    """The learning rate of optimizer step ``step`` (0-based) of the script's schedule (within 1 %)."""
    truth = learning_rate(step, peak=peak, warmup=warmup, total=total, final=final)
    answer = number(answer)
    return verdict(close(answer, truth, 0.01), "during warmup the rate is peak x (step + 1) / warmup; after it, "
                                               "half a cosine from peak down to final x peak")


def training_flops(parameters: int, layers: int, width: int, sequence: int, answer: float) -> bool:
    """FLOPs of one token's forward and backward through a GPT of ``parameters`` non-embedding parameters,
    ``layers`` blocks of width ``width``, in sequences of ``sequence`` tokens (within 1 %)."""
    truth = flops_per_token(parameters, layers, width, sequence)
    answer = number(answer)
    return verdict(close(answer, truth, 0.01), "6 per parameter (2 forward, 4 backward) and 12 L d T for attention's "
                                               "two matmuls per layer, forward and backward")


def model_flops_utilisation(tokens_per_second: float, flops_per_token: float, devices: int, peak_per_device: float,
                            answer: float) -> bool:
    """The MFU, as a fraction, of a run of ``tokens_per_second`` at ``flops_per_token`` on ``devices`` devices of
    ``peak_per_device`` FLOP/s each (within 1 %)."""
    whole("devices", devices)
    truth = mfu(tokens_per_second, flops_per_token, devices * peak_per_device)
    answer = number(answer)
    return verdict(close(answer, truth, 0.01), "the model's FLOP/s (tokens/s x FLOPs per token) over the peak of "
                                               "every device that computed them, as a fraction (0.4, not 40)")


def stream_share(examples: int, ranks: int, workers: int, rank: int, worker: int, answer: list[int]) -> bool:
    """Which examples does ``worker`` of rank ``rank`` yield from ``ExampleStream(examples, shard=True)``, read by
    ``ranks`` ranks with ``workers`` ``DataLoader`` workers each (in order)? Runs the stream's own ``__iter__`` as
    that worker runs it, here in this process."""
    whole("examples", examples, maximum=1_000_000)
    whole("ranks", ranks, maximum=10_000)
    whole("workers", workers, maximum=64)
    whole("rank", rank, 0, maximum=ranks - 1)
    whole("worker", worker, 0, maximum=workers - 1)
    given = answer.tolist() if hasattr(answer, "tolist") else answer  # a NumPy array or a tensor, as a list
    given = [plain(i) for i in given] if isinstance(given, (list, tuple, range)) else None
    if given is None or not all(isinstance(i, Integral) and not isinstance(i, bool) for i in given):
        raise TypeError(f"answer must be a list of example indices, got {answer!r}")
    this_worker = SimpleNamespace(id=worker, num_workers=workers)  # what get_worker_info() says inside that worker
    with mock.patch.object(data_loading, "get_worker_info", return_value=this_worker):
        truth = list(data_loading.ExampleStream(examples, rank=rank, world_size=ranks, shard=True))
    return verdict([int(i) for i in given] == truth,
                   "number the ranks' workers as copies k = rank x workers + worker of n = ranks x workers (ranks and "
                   "workers counted from 0): copy k yields k, k + n, k + 2n, ... below the number of examples")


def communication_share(compute_ms_per_example: float, all_reduce_ms: float, examples_per_rank: int,
                        answer: float) -> bool:
    """The all-reduce's share of a step, as a fraction, where a rank computes ``compute_ms_per_example`` ms per
    example on ``examples_per_rank`` examples and then all-reduces for ``all_reduce_ms`` ms whatever the batch
    (lesson 13b's controlled-compute cell, which overlaps nothing; within 1 %)."""
    compute = real("compute_ms_per_example", compute_ms_per_example, above=0) * whole("examples_per_rank",
                                                                                     examples_per_rank)
    all_reduce = real("all_reduce_ms", all_reduce_ms, above=0)
    answer = number(answer)
    return verdict(close(answer, all_reduce / (compute + all_reduce), 0.01),
                   "the step is compute (ms per example x examples) plus the all-reduce; its share is all-reduce / "
                   "step, as a fraction, within 1 % of the value")
