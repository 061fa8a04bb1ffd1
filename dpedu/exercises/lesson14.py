"""Checks for lesson 14's exercises: what accelerate's loader and backward do with the numbers you give them."""

from __future__ import annotations

import math

from dpedu._validate import real, whole
from dpedu.exercises import close, number, verdict


def examples_per_step(micro_batch: int, accumulate: int, processes: int, answer: int) -> bool:
    """How many examples does one optimizer step see with a prepared ``DataLoader(batch_size=micro_batch)``,
    ``gradient_accumulation_steps=accumulate`` and ``processes`` processes?"""
    for name, value in (("micro_batch", micro_batch), ("accumulate", accumulate), ("processes", processes)):
        whole(name, value)
    answer = number(answer)
    return verdict(answer == micro_batch * accumulate * processes,
                   "each process takes whole batches of the loader's batch_size, one per micro-batch")


def gathered(examples: int, batch: int, processes: int, answer: int) -> bool:
    """How many predictions does ``accelerator.gather`` return over a whole prepared held-out loader of
    ``examples`` examples, ``batch_size=batch``, on ``processes`` processes (``even_batches``, the default)?"""
    for name, value in (("examples", examples), ("batch", batch), ("processes", processes)):
        whole(name, value)
    answer = number(answer)
    rounds = math.ceil(math.ceil(examples / batch) / processes)
    return verdict(answer == rounds * processes * batch,
                   "the loader's batches are dealt to the processes in turn, and every process gets a full batch "
                   "in every round: the short last batch and missing ones are filled from the start of the data")


def twice_divided_lr(lr: float, accumulate: int, answer: float) -> bool:
    """With SGD (momentum or not, no weight decay) and no clipping, ``accelerator.backward(loss / accumulate)`` under
    ``gradient_accumulation_steps=accumulate`` trains as the right loop would at which learning rate (1 %)?"""
    real("lr", lr, above=0)
    whole("accumulate", accumulate)
    answer = number(answer)
    return verdict(close(answer, lr / accumulate, 0.01),
                   "accelerator.backward divides by the accumulation steps already; a gradient divided again "
                   "by accumulate moves SGD's parameters as a learning rate divided by it would")
