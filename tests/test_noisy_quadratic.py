import pytest
import torch

from dpedu import least_squares
from dpedu.noisy_quadratic import NoisyQuadratic, expected_excess


def test_recursion_matches_the_mean_of_sampled_sgd_runs():
    problem = NoisyQuadratic.spectrum(dimension=5, smallest=0.1)
    generator = torch.Generator().manual_seed(0)
    runs, batch, lr, steps = 2000, 4, 0.15, 60
    W = torch.zeros(runs, 5, dtype=torch.float64)
    for _ in range(steps):
        X, y = problem.sample(batch, generator, runs)
        W = W - lr * least_squares.batch_gradients(X, y, W)
    sampled = problem.excess_loss(W)
    exact = expected_excess(problem, lr, batch, steps)[-1].item()
    assert abs(sampled.mean().item() - exact) < 4 * sampled.std().item() / runs**0.5


def test_full_batch_limit_is_gradient_descent_and_shapes_broadcast():
    problem = NoisyQuadratic.spectrum()
    curves = expected_excess(problem, torch.tensor([[0.1], [0.2]]), torch.tensor([[1.0, 1e12]]), 5)
    assert curves.shape == (6, 2, 2)
    delta = -problem.w_star
    for _ in range(5):
        delta = delta - 0.1 * 2 * problem.curvatures * delta
    # B = 1e12 leaves a noise term of relative size ~1e-8
    assert curves[-1, 0, 1].item() == pytest.approx(problem.excess_loss(delta + problem.w_star).item(), rel=1e-6)


def test_warmup_and_bad_arguments():
    problem = NoisyQuadratic.spectrum()
    plain = expected_excess(problem, 0.1, 8, 3)
    warm = expected_excess(problem, 0.1, 8, 3, warmup_steps=3)
    assert warm[1] > plain[1] and torch.equal(warm[0], plain[0])
    with pytest.raises(ValueError, match="lr"):
        expected_excess(problem, float("nan"), 8, 3)
    with pytest.raises(ValueError, match="batch_size"):
        expected_excess(problem, 0.1, 0, 3)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda p: NoisyQuadratic.spectrum(dimension=0), ValueError, "dimension"),
    (lambda p: NoisyQuadratic.spectrum(smallest=0.0), ValueError, "smallest"),
    (lambda p: NoisyQuadratic.spectrum(largest=0.001), ValueError, "largest"),
    (lambda p: NoisyQuadratic.spectrum(noise=-1.0), ValueError, "noise"),
    (lambda p: p.sample(0, torch.Generator()), ValueError, "batch"),
    (lambda p: p.sample(4, torch.Generator(), runs=0), ValueError, "runs"),
    (lambda p: p.sample(4, 0), TypeError, "generator"),
    (lambda p: expected_excess(p, 0.1, 8, -1), ValueError, "steps"),
    (lambda p: expected_excess(p, 0.1, 8, 3, warmup_steps=1.5), ValueError, "warmup_steps"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call(NoisyQuadratic.spectrum())
