"""dpedu.training_run.evaluation: teacher-forced exact match is greedy decoding's verdict, and evaluating
unpadded shards on 2 or 3 ranks and summing the counts equals evaluating the whole set in one process."""

import pytest
import torch
from torch import nn

from dpedu import launch
from dpedu.training_run.addition import VOCABULARY, addition_splits, answer_length, encode
from dpedu.training_run.evaluation import distributed_exact_match, evaluating, exact_match, greedy_answers
from dpedu.training_run.gpt import GPT

DIGITS = 2


class Oracle(nn.Module):
    """Reads a and b from the prompt and predicts the true answer, except one chosen digit when a % 3 == 0:
    a model whose exact-match accuracy is known (2/3 of the examples, roughly), with wrong answers of every kind."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Parameter(torch.zeros(1))  # evaluation asks the model for its device

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        place = 10 ** torch.arange(DIGITS - 1, -1, -1)
        a, b = (tokens[:, :DIGITS] * place).sum(1), (tokens[:, DIGITS + 1:2 * DIGITS + 1] * place).sum(1)
        truth = encode(a, b, DIGITS)[:, 1:]  # the next token after each position
        wrong_digit = a % answer_length(DIGITS)
        answer = truth[:, -answer_length(DIGITS):].clone()
        rows = torch.nonzero(a % 3 == 0).flatten()
        answer[rows, wrong_digit[rows]] = (answer[rows, wrong_digit[rows]] + 1) % 10
        truth[:, -answer_length(DIGITS):] = answer
        logits = nn.functional.one_hot(truth, len(VOCABULARY)).float()
        return logits[:, :tokens.shape[1]]


def heldout() -> torch.Tensor:
    return addition_splits(DIGITS, train=10, heldout=1001, seed=0).heldout  # 1001: 2 and 3 ranks do not divide it


def test_teacher_forced_exact_match_is_greedy_decodings_verdict():
    tokens = heldout()
    oracle = Oracle()
    expected = (tokens[:, :DIGITS] * 10 ** torch.arange(DIGITS - 1, -1, -1)).sum(1) % 3 != 0
    assert torch.equal(exact_match(oracle, tokens, DIGITS), expected)
    prompts, answers = tokens[:, :2 * DIGITS + 2], tokens[:, 2 * DIGITS + 2:]
    assert torch.equal((greedy_answers(oracle, prompts, DIGITS) == answers).all(1), expected)
    torch.manual_seed(0)
    model = GPT(len(VOCABULARY), 3 * DIGITS + 2)
    with torch.no_grad():
        model.head.weight.mul_(100)  # sharp, varied predictions from an untrained model
    assert torch.equal(exact_match(model, tokens, DIGITS), (greedy_answers(model, prompts, DIGITS) == answers).all(1))


def evaluate_on_my_shard(batch_size: int) -> tuple[int, int]:
    return distributed_exact_match(Oracle(), heldout(), DIGITS, batch_size=batch_size)


@pytest.mark.parametrize("world_size", [2, 3])
def test_unpadded_shards_summed_over_ranks_equal_one_process(world_size):
    one_process = distributed_exact_match(Oracle(), heldout(), DIGITS)  # no process group: the whole set
    assert one_process[1] == 1001 and 0 < one_process[0] < 1001
    assert one_process[0] == int(exact_match(Oracle(), heldout(), DIGITS).sum())
    # batch_size=100: shards of 501/500 or 334/334/333 examples end in a partial batch
    assert launch(evaluate_on_my_shard, world_size, (100,), timeout=60) == [one_process] * world_size


def test_a_padded_sampler_would_count_repeated_examples():
    """What the unpadded shards avoid: DistributedSampler pads 1001 examples to 1002 on 2 ranks."""
    from torch.utils.data.distributed import DistributedSampler
    shards = [list(DistributedSampler(range(1001), num_replicas=2, rank=r, shuffle=False)) for r in range(2)]
    assert sum(map(len, shards)) == 1002 and shards[1][-1] == 0  # example 0 counted twice
    assert sum(len(range(1001)[r::2]) for r in range(2)) == 1001


def test_evaluating_mid_training_leaves_the_model_in_the_mode_it_was_in():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    for was_training in (True, False):
        model.train(was_training)
        with evaluating(model):
            assert not model.training and not torch.is_grad_enabled()  # no dropout, no graph
        assert model.training is was_training and torch.is_grad_enabled()
    model.train()
    with pytest.raises(ZeroDivisionError), evaluating(model):
        1 / 0  # noqa: B018 - an evaluation that fails
    assert model.training


def test_exact_match_and_greedy_decoding_leave_a_training_model_training():
    oracle = Oracle().train()
    tokens = heldout()
    exact_match(oracle, tokens, DIGITS)
    greedy_answers(oracle, tokens[:, :-answer_length(DIGITS)], DIGITS)
    assert oracle.training
