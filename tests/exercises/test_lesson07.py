import pytest
import torch

from dpedu.exercises import lesson07
from dpedu.sgd.noisy_quadratic import NoisyQuadratic, expected_excess


def test_checks():
    assert lesson07.linear_scaling(0.1, 256, 2048, 0.8)
    assert not lesson07.linear_scaling(0.1, 256, 2048, 0.1)
    assert lesson07.steps_at(100, 1000, 250, 500)
    assert not lesson07.steps_at(100, 1000, 250, 400)
    assert lesson07.largest_base_lr(32, 0.0306) and not lesson07.largest_base_lr(32, 0.05)


def test_the_base_lr_check_rejects_the_noise_free_guess_and_unstable_answers():
    assert lesson07.largest_base_lr(32, 0.030764)  # the edge with gradient noise (5 digits)
    assert not lesson07.largest_base_lr(32, 1 / 32)  # 2 / (k * lambda_max): 1.6 % too high, unstable
    assert not lesson07.largest_base_lr(32, 0.03080)  # 0.1 % above the edge: still unstable
    assert not lesson07.largest_base_lr(32, 0.0300)  # safe, but 2.5 % short of the largest


def test_the_base_lr_edge_is_where_the_exact_expected_loss_stops_settling():
    """Independently of the check's matrix: noisy_quadratic's recursion, run at batch 32 · 4."""
    problem = NoisyQuadratic.spectrum()
    curves = expected_excess(problem, 32 * torch.tensor([0.0306, 1 / 32]), 32 * 4, 3000)
    settled, exploded = curves[:, 0], curves[:, 1]
    assert abs(settled[-1] - settled[-1000]) < 1e-9 * settled[-1]  # at its noise floor
    assert exploded[-1] > 1e20 * exploded[-1000]  # 1/32 is on the unstable side


@pytest.mark.parametrize(("call", "name"), [(lambda: lesson07.linear_scaling(-0.1, 256, 512, 1.0), "lr"),
                                            (lambda: lesson07.steps_at(100, 0, 250, 1.0), "critical_batch"),
                                            (lambda: lesson07.steps_at(100, 10, float("inf"), 1.0), "batch"),
                                            (lambda: lesson07.largest_base_lr(0, 1.0), "k"),
                                            (lambda: lesson07.largest_base_lr(4, 1.0, base_batch=0), "base_batch")])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
