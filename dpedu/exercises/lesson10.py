"""Checks for lesson 10's exercises: how often to checkpoint, and the epochs of an elastic run."""

from __future__ import annotations

import math

from dpedu._validate import real, whole
from dpedu.data_parallel.digits_ddp import digits_loader
from dpedu.exercises import close, verdict

# Llama 3 (arXiv:2407.21783, Table 5), as part 2 cites it: unexpected interruptions, days, GPUs
LLAMA3_INTERRUPTIONS, LLAMA3_DAYS, LLAMA3_GPUS = 419, 54, 16_384


def steps_per_epoch(global_batch_size: int, workers: int, answer: int) -> bool:
    """How many steps of ``global_batch_size`` examples does an epoch of the digits training set have on
    ``workers`` workers, each taking an equal share, as part 3's script reads it (``DistributedSampler``,
    then full batches only)?"""
    whole("global_batch_size", global_batch_size)
    whole("workers", workers)
    if global_batch_size % workers:
        raise ValueError(f"global_batch_size {global_batch_size} must divide among workers={workers}")
    truth = len(digits_loader(global_batch_size // workers, num_replicas=workers, rank=0))
    return verdict(answer == truth, "each worker gets ceil(1438 / workers) examples (DistributedSampler pads the "
                                    "last ones), in full batches of global_batch_size / workers")


def checkpoint_minutes(gpus: int, write_minutes: float, answer: float) -> bool:
    """At Llama 3's rate of unexpected interruptions per GPU-hour, how many minutes apart should a job on
    ``gpus`` GPUs checkpoint when a checkpoint takes ``write_minutes`` to write (Young's rule,
    √(2 · cost · MTBF))? Within 2 %."""
    whole("gpus", gpus)
    real("write_minutes", write_minutes, above=0)
    mtbf_minutes = 60 * LLAMA3_DAYS * 24 * LLAMA3_GPUS / (LLAMA3_INTERRUPTIONS * gpus)
    truth = math.sqrt(2 * write_minutes * mtbf_minutes)
    return verdict(close(answer, truth, 0.02), "the job's MTBF is one GPU's divided by the number of GPUs; "
                                              "then sqrt(2 x write time x MTBF), in minutes")
