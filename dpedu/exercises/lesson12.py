"""Checks for lesson 12's exercises: the pipeline's bubble and 1F1B's memory."""

from __future__ import annotations

from dpedu._validate import whole
from dpedu.beyond.pipeline import bubble_fraction, peak_in_flight, schedule
from dpedu.exercises import close, number, verdict


def bubble(stages: int, micro_batches: int, answer: float) -> bool:
    """What share of a GPipe step do ``stages`` stages spend idle with ``micro_batches`` micro-batches,
    when every forward and backward takes the same time (within 1 %)?"""
    truth = bubble_fraction(whole("stages", stages, maximum=1000), whole("micro_batches", micro_batches))
    number(answer)
    return verdict(close(answer, truth, 0.01), "draw the timeline: how many slots does the first stage wait "
                                               "before its first backward, and how many slots are there?")


def micro_batches_kept(kind: str, stages: int, micro_batches: int, stage: int, answer: int) -> bool:
    """At most how many micro-batches' activations does stage ``stage`` (0 = first) keep under ``kind``
    ("gpipe" or "1f1b") with ``stages`` stages and ``micro_batches`` micro-batches?"""
    whole("stages", stages, maximum=64)
    whole("micro_batches", micro_batches, maximum=256)
    truth = peak_in_flight(schedule(kind, stages, micro_batches, stage))
    number(answer)
    return verdict(answer == truth, "list the stage's forwards and backwards in order and count the "
                                    "micro-batches forwarded but not yet backwarded")
