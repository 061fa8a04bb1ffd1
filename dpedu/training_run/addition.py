"""Multi-digit addition as token sequences: the data lesson 13 trains its small GPT on, generated, never downloaded.

One example is ``a+b=`` followed by the sum's digits **least significant first**: with 2 digits,
``"12+39="`` then ``"15"`` and ``"0"``, i.e. the tokens of ``"12+39=150"`` for 12 + 39 = 51. Writing the
answer reversed lets the model produce each digit after the digits whose carry it needs, which makes
addition far easier to learn for a small causal transformer (Lee et al. 2023, "Teaching Arithmetic to
Small Transformers", arXiv:2307.03381, the "reverse" format). Numbers are zero-padded to ``digits``
digits, so every sequence has the same length, ``3 * digits + 3``: no padding, no masks.

``addition_splits`` draws distinct pairs (a, b) from a seed and splits them into a training set and a
held-out set that share no pair; the same seed gives the same tensors on every machine and every rank.

Used in lesson 13 and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from dpedu._validate import whole

__all__ = ["VOCABULARY", "Splits", "addition_splits", "encode", "decode", "answer_value", "sequence_length",
           "answer_length"]

VOCABULARY = "0123456789+="  # token i is the character VOCABULARY[i]
MAX_DIGITS = 3  # 10**(2 * digits) pairs are enumerated; 3 digits is a million pairs


class Splits(NamedTuple):
    """Token tensors of shape (examples, ``3 * digits + 3``), int64; no pair (a, b) is in both."""
    train: torch.Tensor
    heldout: torch.Tensor
    digits: int


def sequence_length(digits: int) -> int:
    """Tokens in one example: ``digits`` + 1 + ``digits`` + 1 for ``a+b=``, then the sum's ``digits + 1``."""
    return 3 * digits + 3


def answer_length(digits: int) -> int:
    """The sum of two ``digits``-digit numbers has at most ``digits + 1`` digits."""
    return digits + 1


def encode(a: torch.Tensor, b: torch.Tensor, digits: int) -> torch.Tensor:
    """Tokens of ``a+b=`` and the reversed, zero-padded sum, one row per pair; shape (len(a), 3 * digits + 3)."""
    place = 10 ** torch.arange(digits - 1, -1, -1)  # most significant digit first
    low_first = 10 ** torch.arange(digits + 1)  # the answer, least significant digit first

    def to_digits(n: torch.Tensor, powers: torch.Tensor) -> torch.Tensor:
        return n[:, None] // powers % 10

    plus = torch.full((len(a), 1), VOCABULARY.index("+"))
    equals = torch.full((len(a), 1), VOCABULARY.index("="))
    return torch.cat([to_digits(a, place), plus, to_digits(b, place), equals, to_digits(a + b, low_first)], dim=1)


def decode(tokens: torch.Tensor) -> list[str]:
    """Each row of tokens as its text (the answer stays reversed, as the model writes it): ``"12+39=150"``."""
    return ["".join(VOCABULARY[t] for t in row.tolist()) for row in tokens]


def answer_value(tokens: torch.Tensor, digits: int) -> torch.Tensor:
    """The number that each row's answer digits (reversed) write, as int64: ``"12+39=150"`` -> 51."""
    answer = tokens[:, -answer_length(digits):]
    return (answer * 10 ** torch.arange(answer_length(digits))).sum(dim=1)


def addition_splits(digits: int = 2, *, train: int = 8000, heldout: int = 1000, seed: int = 0) -> Splits:
    """``train`` and ``heldout`` examples of ``digits``-digit addition, distinct pairs drawn with ``seed``.

    Guarantees: deterministic in its arguments (a private generator; the global RNG is untouched);
    every pair (a, b) occurs at most once over both sets, so the held-out set measures generalisation,
    not memory (b + a may be in one set and a + b in the other: commutativity is something to learn).
    """
    whole("digits", digits, 1, MAX_DIGITS)
    whole("train", train)
    whole("heldout", heldout)
    pairs = 10 ** (2 * digits)
    if train + heldout > pairs:
        raise ValueError(f"train + heldout must be at most {pairs} (every distinct pair of {digits}-digit "
                         f"numbers), got {train} + {heldout}")
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(pairs, generator=generator)[:train + heldout]  # distinct pair numbers
    tokens = encode(chosen // 10**digits, chosen % 10**digits, digits)
    return Splits(tokens[:train], tokens[train:], digits)
