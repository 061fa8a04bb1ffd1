import pytest
import torch

from dpedu.sgd import least_squares
from dpedu.sgd.noisy_quadratic import NoisyQuadratic, expected_excess


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
    # gradient descent from w = 0 shrinks δ_i = -w*_i by (1 - 2ηλ_i) per step: after t steps the excess
    # loss is Σ λ_i (1 - 2ηλ_i)^(2t) w*_i²; B = 1e12 leaves a noise term of relative size ~1e-8
    lam = problem.curvatures
    for row, lr in enumerate((0.1, 0.2)):
        gd = (lam * (1 - 2 * lr * lam) ** (2 * 5) * problem.w_star**2).sum().item()
        assert curves[-1, row, 1].item() == pytest.approx(gd, rel=1e-6)
    assert (curves[-1, :, 0] > curves[-1, :, 1]).all()  # a batch of one adds noise


def test_isserlis_factor_weights_only_the_lambda_squared_term():
    problem = NoisyQuadratic.spectrum()
    exact = expected_excess(problem, 0.2, 2, 50)
    assert torch.equal(expected_excess(problem, 0.2, 2, 50, isserlis_factor=1.0), exact)
    # the term adds variance, so dropping it lowers the expectation and doubling it raises it
    dropped, doubled = (expected_excess(problem, 0.2, 2, 50, isserlis_factor=f) for f in (0.0, 2.0))
    assert (dropped[1:] < exact[1:]).all() and (doubled[1:] > exact[1:]).all()
    # without noise from the batch (B -> inf) the term has no effect: gradient descent either way
    assert torch.allclose(expected_excess(problem, 0.2, 1e12, 50, isserlis_factor=0.0),
                          expected_excess(problem, 0.2, 1e12, 50), rtol=1e-9, atol=0)


def test_excess_loss_is_the_expected_loss_above_the_noise_floor():
    problem = NoisyQuadratic.spectrum(dimension=4, smallest=0.1, noise=0.5)
    w = torch.tensor([0.0, 2.0, 1.0, -1.0], dtype=torch.float64)
    X, y = problem.sample(400_000, torch.Generator().manual_seed(2))
    sampled = ((X[0] @ w - y[0]) ** 2).mean().item() - 0.5**2
    assert sampled == pytest.approx(problem.excess_loss(w).item(), rel=0.02)
    assert problem.excess_loss(problem.w_star).item() == 0
    assert problem.simple_noise_scale(problem.w_star) == float("inf")  # no signal at the optimum


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
    (lambda p: expected_excess(p, 0.1, 8, 3, isserlis_factor=-1.0), ValueError, "isserlis_factor"),
    (lambda p: expected_excess("p", 0.1, 8, 3), TypeError, "problem must be a NoisyQuadratic"),
    (lambda p: expected_excess(p, 0.1, float("nan"), 3), ValueError, "batch_size"),
    (lambda p: expected_excess(p, "0.1", 8, 3), TypeError, "lr and batch_size must be numbers"),
    (lambda p: expected_excess(p, torch.ones(3), torch.ones(2), 3), ValueError, "broadcast"),
    (lambda p: p.excess_loss(torch.zeros(1, dtype=torch.float64)), ValueError, "w must have 10 entries"),
    (lambda p: p.excess_loss([0.0] * 10), TypeError, "w must be a torch.Tensor"),
    (lambda p: p.simple_noise_scale(torch.zeros(2, 10, dtype=torch.float64)), ValueError, "w must be a 1-D"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call(NoisyQuadratic.spectrum())
