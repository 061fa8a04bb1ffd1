"""dpedu.training_run.flops: the 6 N + 12 L d T formula against FlopCounterMode's count of a real forward and
backward, the measured peak, and MFU's arithmetic (no timing is asserted beyond a positive, finite peak)."""

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from dpedu.training_run.addition import VOCABULARY, addition_splits, sequence_length
from dpedu.training_run.flops import (
    counted_flops_per_token,
    mfu,
    non_embedding_parameters,
    peak_flops,
    training_flops_per_token,
)
from dpedu.training_run.gpt import GPT


def bias_and_norm_parameters(model: GPT) -> int:
    """Parameters that multiply nothing: the Linear biases and the LayerNorms' gains and offsets."""
    return sum(p.numel() for name, p in model.named_parameters()
               if name.endswith("bias") or ".norm" in name or name.startswith("norm."))


@pytest.mark.parametrize(("digits", "shape"), [(2, {}), (1, {"width": 32, "heads": 2, "layers": 1}),
                                               (3, {"width": 128, "heads": 8, "layers": 4})])
def test_the_formula_is_the_counted_matmuls_plus_6_flops_for_each_bias_and_norm_parameter(digits, shape):
    length = sequence_length(digits) - 1
    torch.manual_seed(0)
    model = GPT(len(VOCABULARY), length, **shape)
    tokens = addition_splits(digits, train=64, heldout=1).train[:, :-1]  # one batch of the script's inputs
    formula, counted = training_flops_per_token(model, length), counted_flops_per_token(model, tokens)
    # The counter sees every matmul (2 FLOPs per weight per token forward, 4 backward; attention's scores and
    # weighted values whole, the causal mask's half included, as the math kernel computes them) and nothing
    # elementwise. The formula's N also holds the biases and LayerNorm parameters, 6 FLOPs each: exactly the gap.
    assert formula - counted == 6 * bias_and_norm_parameters(model)
    assert all(p.grad is None for p in model.parameters())  # counting leaves no gradients behind
    if not shape:  # lesson 13's model: the gap is 6 x 1,792 = 10,752 of 606,720, 1.8 %; about 1.1 / width in general
        assert (formula, counted, bias_and_norm_parameters(model)) == (617_472, 606_720, 1_792)
        assert abs(formula / counted - 1) < 0.02


def test_non_embedding_parameters_leave_out_both_tables_and_keep_the_untied_head():
    model = GPT(12, 8)
    tables = model.tokens.weight.numel() + model.positions.weight.numel()  # 12 x 64 + 8 x 64
    assert non_embedding_parameters(model) == model.parameter_count() - tables == 100_864
    assert model.head.weight.numel() == 768  # a matmul, counted (nanoGPT and PaLM tie it to the token table)


def test_counted_in_the_math_kernel_attention_is_whole_which_the_fused_cpu_kernel_may_leave_out():
    torch.manual_seed(0)
    model = GPT(12, 8)
    tokens = torch.randint(0, 12, (4, 8))
    with FlopCounterMode(display=False) as counter:  # the default kernel
        model(tokens).sum().backward()
    model.zero_grad(set_to_none=True)
    attention = 12 * 2 * 64 * 8  # per token: 12 L d T
    matmuls = 6 * (non_embedding_parameters(model) - bias_and_norm_parameters(model))
    assert counted_flops_per_token(model, tokens) == matmuls + attention
    # The fused CPU kernel's count depends on torch: 2.13's counter has no formula for it and leaves attention
    # out; 2.15's counts the fused kernel's backward, which computes the scores again (5 matmuls instead of 4,
    # so 7/6 of the math kernel's attention). The math kernel's count stays the one to compare with.
    assert counter.get_total_flops() / tokens.numel() in (matmuls, matmuls + attention, matmuls + attention * 7 // 6)


def test_mfu_is_achieved_model_flops_over_the_peak_and_the_peak_is_measured():
    assert mfu(1000.0, 6e5, 1.2e9) == pytest.approx(0.5)
    assert mfu(0.0, 6e5, 1e9) == 0.0
    state = torch.get_rng_state()
    peak = peak_flops("cpu", torch.float32, sizes=(64, 128), repeats=2)
    assert math.isfinite(peak) and peak > 1e6  # any CPU does millions of FLOP/s
    assert torch.equal(torch.get_rng_state(), state)  # measuring draws nothing from the run's random state


def test_held_to_the_same_peak_per_rank_n_ranks_mfu_over_one_process_is_the_scaling_efficiency():
    # Lesson 13 prints MFU(n) = MFU(1) x efficiency(n) as an equation: arithmetic, asserted here, not a finding
    one, samples = 8000.0, {1: 8000.0, 2: 10800.0, 4: 10300.0}  # samples/s of 1, 2 and 4 ranks
    for n, measured in samples.items():
        efficiency = measured / (n * one)
        ratio = mfu(8 * measured, 617_472, n * 1.1e11) / mfu(8 * one, 617_472, 1.1e11)
        assert ratio == pytest.approx(efficiency, rel=1e-12)


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="peak must be a finite number > 0"):
        mfu(1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="tokens_per_second must be a finite number >= 0"):
        mfu(-1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="sequence must be an int >= 1"):
        training_flops_per_token(GPT(12, 8), 0)
    with pytest.raises(ValueError, match="sizes must be an int >= 1"):
        peak_flops(sizes=(0,))
    with pytest.raises(ValueError, match="tokens must be a 2-D tensor"):
        counted_flops_per_token(GPT(12, 8), torch.zeros(8, dtype=torch.long))
