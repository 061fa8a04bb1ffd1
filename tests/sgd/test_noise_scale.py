import math

import pytest
import torch

import dpedu
from dpedu.sgd import least_squares
from dpedu.sgd.noise_scale import simple_noise_scale, two_batch_noise_scale
from dpedu.sgd.noisy_quadratic import NoisyQuadratic


def test_known_value_for_constructed_rows():
    # G = (1, 0); rows G ± (0, 2) in equal numbers: population tr(Σ) = 4, |G|² = 1, so B_simple = 4
    rows = torch.tensor([[1.0, 2.0], [1.0, -2.0]] * 50)
    assert simple_noise_scale(rows, whole_dataset=True) == pytest.approx(4.0)
    # as a sample of 100: tr(Σ) = 400/99 (divisor n - 1), |G|² = 1 - (400/99)/100 = 95/99, ratio 80/19
    assert simple_noise_scale(rows) == pytest.approx(80 / 19)


def test_the_noise_scale_ignores_units_and_the_order_of_the_rows():
    rows = torch.randn(200, 5, generator=torch.Generator().manual_seed(3)) + torch.tensor([1.0, 0, 0, 0, 0])
    reference = simple_noise_scale(rows)
    assert simple_noise_scale(7.5 * rows) == pytest.approx(reference)  # a ratio of squared gradients
    assert simple_noise_scale(rows.flip(0)) == pytest.approx(reference)
    # the whole dataset twice over is the same population: the same G and Σ
    assert simple_noise_scale(torch.cat([rows, rows]), whole_dataset=True) == pytest.approx(
        simple_noise_scale(rows, whole_dataset=True))


def test_the_bias_correction_removes_most_of_the_small_sample_underestimate():
    """Samples of 32 rows from a population with G = (1, 0) and tr(Σ) = 4, so B_simple = 4: the
    squared mean of a sample overstates |G|², so without the correction B_simple comes out low."""
    generator = torch.Generator().manual_seed(4)
    samples = torch.tensor([1.0, 0.0]) + 2 * torch.randn(4000, 32, 2, generator=generator) / 2**0.5
    corrected = torch.tensor([simple_noise_scale(s) for s in samples]).median().item()
    naive = torch.tensor([simple_noise_scale(s, whole_dataset=True) for s in samples]).median().item()
    assert corrected == pytest.approx(4, rel=0.1) and naive < 0.95 * 4


def test_matches_the_closed_form_of_the_noisy_quadratic():
    problem = NoisyQuadratic.spectrum()
    generator = torch.Generator().manual_seed(0)
    w = torch.full((10,), 0.5, dtype=torch.float64)
    X, y = problem.sample(40_000, generator)
    rows = least_squares.per_example_gradients(X[0], y[0], w)
    assert simple_noise_scale(rows) == pytest.approx(problem.simple_noise_scale(w), rel=0.05)
    assert dpedu.simple_noise_scale is simple_noise_scale


def test_two_batch_estimator_recovers_the_same_value():
    problem = NoisyQuadratic.spectrum()
    generator = torch.Generator().manual_seed(1)
    w = torch.zeros(10, dtype=torch.float64)

    def norms(batch):
        X, y = problem.sample(batch, generator, runs=3000)
        return least_squares.batch_gradients(X, y, w.expand(len(X), -1)).pow(2).sum(-1)

    estimate = two_batch_noise_scale(norms(2), norms(128), 2, 128)
    assert estimate == pytest.approx(problem.simple_noise_scale(w), rel=0.1)


def test_noise_without_signal_gives_infinity():
    rows = torch.tensor([[1.0], [-1.0]] * 10)
    assert simple_noise_scale(rows) == math.inf
    assert two_batch_noise_scale([1.0], [1.0 / 8], 1, 8) == math.inf


@pytest.mark.parametrize(("rows", "error", "message"), [
    (torch.ones(1, 3), ValueError, "at least two"), (torch.ones(5), ValueError, "2-D"),
    ([[1.0, 2.0], [3.0, 4.0]], TypeError, "per_example_grads must be a torch.Tensor"),
    (torch.tensor([[1.0, float("nan")], [1.0, 2.0]]), ValueError, "non-finite"),
    (torch.tensor([[float("inf")], [1.0]]), ValueError, "non-finite"),
])
def test_bad_per_example_gradients_are_refused(rows, error, message):
    with pytest.raises(error, match=message):
        simple_noise_scale(rows)


def test_whole_dataset_must_be_a_bool():
    with pytest.raises(TypeError, match="whole_dataset"):
        simple_noise_scale(torch.ones(4, 2), whole_dataset="no")  # a non-empty string is truthy


@pytest.mark.parametrize(("args", "error", "message"), [
    (([1.0], [0.5], 8, 8), ValueError, "smaller"), (([1.0], [0.5], 0, 8), ValueError, "small_batch"),
    (([], [0.5], 1, 8), ValueError, "small_batch_sq"), (([1.0], [float("nan")], 1, 8), ValueError, "big_batch_sq"),
    (([1.0], [-0.5], 1, 8), ValueError, "big_batch_sq_norms must .* >= 0"),
    (("ab", [0.5], 1, 8), TypeError, "small_batch_sq_norms must be a sequence of numbers"),
])
def test_bad_two_batch_arguments_are_refused(args, error, message):
    with pytest.raises(error, match=message):
        two_batch_noise_scale(*args)
