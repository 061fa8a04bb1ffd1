"""dpedu.training_run.gpt (shapes, causality, size) and dpedu.training_run.schedule (warmup + cosine)."""

import math

import pytest
import torch

from dpedu.training_run.gpt import GPT
from dpedu.training_run.schedule import learning_rate


def test_logits_have_one_row_per_position_and_the_default_model_is_small():
    model = GPT(12, 8)
    assert model(torch.randint(0, 12, (5, 8))).shape == (5, 8, 12)
    assert model(torch.randint(0, 12, (5, 3))).shape == (5, 3, 12)  # shorter sequences too (greedy decoding)
    assert model.parameter_count() == sum(p.numel() for p in model.parameters()) == 102_144
    assert GPT(12, 8, width=128, layers=2).parameter_count() < 500_000  # "a few hundred thousand at most"
    with pytest.raises(ValueError, match="longer than the model's length=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="width must be a multiple of heads"):
        GPT(12, 8, width=30, heads=4)


def test_attention_is_causal_a_later_token_never_changes_earlier_logits():
    torch.manual_seed(0)
    model = GPT(12, 8).eval()
    tokens = torch.randint(0, 12, (4, 8))
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 12
    before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :5], after[:, :5])  # positions 0-4 cannot see position 5: bit-identical
    assert (before[:, 5:] - after[:, 5:]).abs().amax() > 1e-4  # positions 5-7 do see it


def test_warmup_then_cosine_from_peak_to_final():
    lr = [learning_rate(s, peak=1.0, warmup=10, total=110, final=0.1) for s in range(110)]
    assert lr[:10] == pytest.approx([(s + 1) / 10 for s in range(10)], abs=1e-12)  # linear warmup
    assert lr[10] == pytest.approx(1.0, abs=1e-12) and lr[-1] == pytest.approx(0.1, abs=1e-12)
    assert lr[60] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 50 / 99)), abs=1e-12)
    assert all(a >= b for a, b in zip(lr[10:], lr[11:], strict=False))  # never rises after the peak
    assert learning_rate(500, peak=2.0, warmup=0, total=110) == pytest.approx(0.2, abs=1e-12)  # stays at the end
    with pytest.raises(ValueError, match="warmup must be an int from 0 to 109"):
        learning_rate(0, peak=1.0, warmup=110, total=110)
