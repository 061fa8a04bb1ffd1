import math

import pytest
import torch

from dpedu.exercises import lesson06


def test_checks_accept_the_right_answers():
    assert lesson06.largest_lr(3, 4.0, 2 * math.sin(math.pi / 14) / 4)
    assert lesson06.sync_round_time(4, 1 + 1 / 2 + 1 / 3 + 1 / 4)
    assert lesson06.mean_staleness(16, 15)
    assert lesson06.local_sgd_bytes(150_000_000, 10_000, 500, 12e9)


def test_checks_reject_wrong_answers():
    assert not lesson06.largest_lr(3, 4.0, 2 / 4)
    assert not lesson06.sync_round_time(4, 1.0)
    assert not lesson06.mean_staleness(16, 16)
    assert not lesson06.local_sgd_bytes(150_000_000, 10_000, 500, 4 * 150_000_000 * 10_000)  # DDP's
    assert not lesson06.local_sgd_bytes(150_000_000, 10_000, 500, 150_000_000 * 20)  # parameters, not bytes


def test_the_momentum_check_follows_one_minus_one_over_m():
    assert lesson06.implicit_momentum(2, 0.5) and lesson06.implicit_momentum(1, 0.0)
    assert not lesson06.implicit_momentum(2, 0.75) and not lesson06.implicit_momentum(4, 0.5)


def test_the_round_time_check_agrees_with_a_simulation_and_scales():
    draws = torch.empty(400_000, 4, dtype=torch.float64).exponential_(generator=torch.Generator().manual_seed(1))
    assert lesson06.sync_round_time(4, draws.max(1).values.mean().item())  # within 1 %, independently
    # H_P ≈ ln P + γ + 1/(2P) - 1/(12P²) (error ~1/(120 P⁴)), computed without 1.6 GB of draws
    for workers in (1024, 10**6):
        expansion = math.log(workers) + 0.5772156649015329 + 1 / (2 * workers) - 1 / (12 * workers**2)
        assert lesson06.sync_round_time(workers, expansion)
        assert not lesson06.sync_round_time(workers, 1.02 * expansion)


@pytest.mark.parametrize(("call", "name"), [(lambda: lesson06.largest_lr(-1, 1.0, 1.0), "staleness"),
                                            (lambda: lesson06.largest_lr(1, 0.0, 1.0), "curvature"),
                                            (lambda: lesson06.largest_lr(101, 1.0, 1.0), "staleness"),
                                            (lambda: lesson06.sync_round_time(0, 1.0), "workers"),
                                            (lambda: lesson06.sync_round_time(10**6 + 1, 1.0), "workers"),
                                            (lambda: lesson06.mean_staleness(2.5, 1.0), "workers"),
                                            (lambda: lesson06.local_sgd_bytes(0, 10, 2, 1.0), "parameters"),
                                            (lambda: lesson06.local_sgd_bytes(10, 10, 0, 1.0), "period")])
def test_bad_arguments_are_refused(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_implicit_momentum_takes_numpy_and_torch_numbers_and_refuses_text():
    assert lesson06.implicit_momentum(8, torch.tensor(0.875)) and not lesson06.implicit_momentum(8, torch.tensor(0.8))
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson06.implicit_momentum(8, "0.875")
