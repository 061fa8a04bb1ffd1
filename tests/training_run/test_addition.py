"""dpedu.training_run.addition: deterministic, disjoint splits, and tokens that say what they add."""

import pytest
import torch

from dpedu.training_run.addition import VOCABULARY, addition_splits, answer_length, answer_value, decode, encode
from dpedu.training_run.addition import sequence_length as length


def test_an_example_reads_a_plus_b_then_the_sum_least_significant_digit_first():
    tokens = encode(torch.tensor([12, 99, 5]), torch.tensor([39, 1, 0]), 2)
    assert decode(tokens) == ["12+39=150", "99+01=001", "05+00=500"]
    assert answer_value(tokens, 2).tolist() == [51, 100, 5]
    assert tokens.shape == (3, length(2)) and answer_length(2) == 3
    assert tokens.dtype == torch.int64 and tokens.max() < len(VOCABULARY)


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_every_example_is_a_true_sum_and_the_splits_share_no_pair(digits):
    train = 500 if digits > 1 else 60  # 1 digit: only 100 pairs
    splits = addition_splits(digits, train=train, heldout=30, seed=3)
    assert splits.train.shape == (train, length(digits)) and splits.heldout.shape == (30, length(digits))
    place = 10 ** torch.arange(digits - 1, -1, -1)
    for tokens in (splits.train, splits.heldout):
        a, b = (tokens[:, :digits] * place).sum(1), (tokens[:, digits + 1:2 * digits + 1] * place).sum(1)
        assert torch.equal(answer_value(tokens, digits), a + b)
        assert decode(tokens[:1])[0][digits] == "+" and decode(tokens[:1])[0][2 * digits + 1] == "="
    prompts = lambda t: {tuple(row) for row in t[:, :2 * digits + 1].tolist()}  # noqa: E731 - the pair (a, b)
    assert len(prompts(splits.train)) == train and len(prompts(splits.heldout)) == 30  # no pair twice in a set
    assert not prompts(splits.train) & prompts(splits.heldout)  # nor in both


def test_the_same_seed_gives_the_same_data_and_leaves_the_global_random_state_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    one, two = addition_splits(2, seed=7), addition_splits(2, seed=7)
    assert torch.equal(one.train, two.train) and torch.equal(one.heldout, two.heldout)
    assert not torch.equal(one.train, addition_splits(2, seed=8).train)
    assert torch.equal(torch.get_rng_state(), before)


def test_all_pairs_can_be_used_but_not_more():
    splits = addition_splits(1, train=90, heldout=10)
    assert len({tuple(r) for r in torch.cat([splits.train, splits.heldout]).tolist()}) == 100
    with pytest.raises(ValueError, match="train \\+ heldout must be at most 100"):
        addition_splits(1, train=91, heldout=10)
    with pytest.raises(ValueError, match="digits must be an int from 1 to 3"):
        addition_splits(4)
    with pytest.raises(ValueError, match="heldout must be an int >= 1"):
        addition_splits(2, heldout=0)
