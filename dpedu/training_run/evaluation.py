"""Held-out accuracy: exact match of the answer, computed on every rank's shard and summed: lesson 13.

The metric is exact match: an example counts as correct when every digit of its answer is right. It is
computed teacher-forced, in one forward pass: the prediction at each answer position is the argmax given
the true tokens before it. For "all answer digits right" this is *the same verdict* as greedy decoding
(feeding the model its own digits back): if every argmax is right, greedy decoding sees exactly the
true prefix at each step and writes the same digits; at the first wrong argmax, both are wrong. So
``exact_match`` gives greedy decoding's answer at one pass's cost (``greedy_answers`` is there to check it).

Distributed evaluation done right: rank r takes examples r, r + world, r + 2·world, ... (``indices[rank::world]``),
a disjoint shard, *unpadded*; each rank counts (correct, examples) and one all-reduce sums the counts.
``DistributedSampler`` would instead pad the shards to equal length by repeating examples, and a mean over
its batches counts the repeats twice (lesson 03). Summing counts, not averaging per-rank means, also
weighs shards of unequal length right: the result equals one process evaluating the whole set.

A run's reported accuracy can be checked independently (``scores_as_reported``): its parameters, loaded in
another process, scored again on the same held-out set, must give the counts the run reported.

Evaluating in the middle of training (``train_addition --eval-every``) must not leave the model in eval mode:
``evaluating`` switches dropout off for the evaluation and back on after it.

Used in lesson 13a and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

from dpedu._validate import tensor, whole
from dpedu.training_run.addition import answer_length

__all__ = ["evaluating", "exact_match", "greedy_answers", "distributed_exact_match", "scores_as_reported"]


@contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """The model in eval mode (no dropout) and without gradients for the block, then in the mode it was in:
    an evaluation in the middle of training leaves dropout on for the steps after it."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def exact_match(model: nn.Module, tokens: torch.Tensor, digits: int) -> torch.Tensor:
    """One bool per row of ``tokens``: are all of its answer digits the model's argmax (teacher-forced)?

    Equal to ``(greedy_answers(model, prompts, digits) == answers).all(1)``; the model's mode is as it was.
    """
    tensor("tokens", tokens, dim=2)
    length = answer_length(digits)
    with evaluating(model):  # position t predicts token t + 1: the answer's predictions, the last ``length``
        predicted = model(tokens[:, :-1])[:, -length:].argmax(-1)
    return (predicted == tokens[:, -length:]).all(dim=1)


def greedy_answers(model: nn.Module, prompts: torch.Tensor, digits: int) -> torch.Tensor:
    """The answer digits the model writes after each prompt (``a+b=``), each fed back in: (rows, digits + 1)."""
    tensor("prompts", prompts, dim=2)
    sequence = prompts
    with evaluating(model):
        for _ in range(answer_length(digits)):
            next_token = model(sequence)[:, -1].argmax(-1, keepdim=True)
            sequence = torch.cat([sequence, next_token], dim=1)
    return sequence[:, prompts.shape[1]:]


def distributed_exact_match(model: nn.Module, tokens: torch.Tensor, digits: int, *,
                            batch_size: int = 1000) -> tuple[int, int]:
    """(correct, examples) over all of ``tokens``, each rank evaluating its own unpadded shard.

    Every rank passes the same ``tokens``; inside a process group each evaluates ``tokens[rank::world]``
    and an all-reduce sums the counts, so every rank returns the same pair, equal to what one process
    evaluating all of ``tokens`` returns (outside a process group this is that one process). Pass the
    plain model (``ddp.module``): evaluation needs no gradient synchronisation.
    """
    whole("batch_size", batch_size)
    grouped = dist.is_available() and dist.is_initialized()
    rank, world = (dist.get_rank(), dist.get_world_size()) if grouped else (0, 1)
    device = next(model.parameters()).device
    shard = tokens[rank::world]  # disjoint and unpadded: every example on exactly one rank
    correct = sum(exact_match(model, shard[i:i + batch_size].to(device), digits).sum().item()
                  for i in range(0, len(shard), batch_size))
    counts = torch.tensor([correct, len(shard)], dtype=torch.int64, device=device)
    if grouped:
        dist.all_reduce(counts)  # sums: integer counts, exact whatever the order of addition
    return int(counts[0]), int(counts[1])


def scores_as_reported(model: nn.Module, tokens: torch.Tensor, digits: int, reported: tuple[int, int]) -> bool:
    """Lesson 13's independent check of a run's held-out accuracy: ``model``, holding the run's parameters
    (loaded from its checkpoint), scored on ``tokens`` here, gives the run's own ``reported`` (correct, examples)
    exactly. Integer counts: any parameter that differs enough to change one answer fails it."""
    return distributed_exact_match(model, tokens, digits) == tuple(reported)
