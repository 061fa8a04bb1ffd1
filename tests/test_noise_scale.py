import math

import pytest
import torch

import dpedu
from dpedu import least_squares
from dpedu.noise_scale import simple_noise_scale, two_batch_noise_scale
from dpedu.noisy_quadratic import NoisyQuadratic


def test_known_value_for_constructed_rows():
    # G = (1, 0); rows G ± (0, 2) in equal numbers: population tr(Σ) = 4, |G|² = 1, so B_simple = 4
    rows = torch.tensor([[1.0, 2.0], [1.0, -2.0]] * 50)
    assert simple_noise_scale(rows, whole_dataset=True) == pytest.approx(4.0)
    n = len(rows)  # as a sample: tr(Σ) with n - 1, |G|² less tr(Σ)/n
    trace = 4.0 * n / (n - 1)
    assert simple_noise_scale(rows) == pytest.approx(trace / (1 - trace / n))


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


@pytest.mark.parametrize(("rows", "message"), [
    (torch.ones(1, 3), "at least two"), (torch.ones(5), "2-D"), ([[1.0, 2.0], [3.0, 4.0]], "2-D"),
    (torch.tensor([[1.0, float("nan")], [1.0, 2.0]]), "non-finite"),
    (torch.tensor([[float("inf")], [1.0]]), "non-finite"),
])
def test_bad_per_example_gradients_are_refused(rows, message):
    with pytest.raises(ValueError, match=message):
        simple_noise_scale(rows)


@pytest.mark.parametrize(("args", "message"), [
    (([1.0], [0.5], 8, 8), "smaller"), (([1.0], [0.5], 0, 8), "small_batch"), (([], [0.5], 1, 8), "small_batch_sq"),
    (([1.0], [float("nan")], 1, 8), "big_batch_sq"),
])
def test_bad_two_batch_arguments_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        two_batch_noise_scale(*args)
