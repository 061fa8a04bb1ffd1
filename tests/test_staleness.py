import math

import pytest
import torch

import dpedu
from dpedu.staleness import delayed_gd, stability_limit

H = torch.diag(torch.tensor([0.1, 0.5, 1.0], dtype=torch.float64))
X0 = torch.ones(3, dtype=torch.float64)


def grad(x):
    return H @ x


def test_public_name_and_shape():
    iterates = dpedu.delayed_gd(grad, X0, 0.1, 2, 7)
    assert iterates.shape == (8, 3) and torch.equal(iterates[0], X0)
    assert dpedu.delayed_gd(lambda x: 0.5 * x, torch.ones(2, 3, dtype=torch.float64), 0.1, 1, 4).shape == (5, 2, 3)


def test_staleness_zero_is_plain_gradient_descent():
    iterates = delayed_gd(grad, X0, 0.3, 0, 20)
    x = X0.clone()
    for t in range(20):
        x = x - 0.3 * grad(x)
        torch.testing.assert_close(iterates[t + 1], x)


def test_each_update_uses_the_gradient_of_staleness_steps_ago():
    tau = 3
    iterates = delayed_gd(grad, X0, 0.2, tau, 12)
    for t in range(12):
        torch.testing.assert_close(iterates[t + 1], iterates[t] - 0.2 * grad(iterates[max(t - tau, 0)]))
    # while t < staleness the gradient is the start point's: the first tau + 1 steps are equal
    steps = iterates[1:tau + 2] - iterates[:tau + 1]
    assert all(torch.allclose(step, steps[0]) for step in steps)


@pytest.mark.parametrize("tau", [0, 1, 2, 3, 6])
def test_converges_just_inside_the_exact_boundary_and_diverges_just_outside(tau):
    edge = 2 * math.sin(math.pi / (4 * tau + 2))  # for curvature 1
    inside = delayed_gd(lambda x: x, torch.ones(1, dtype=torch.float64), 0.95 * edge, tau, 3000)[-1].abs().item()
    outside = delayed_gd(lambda x: x, torch.ones(1, dtype=torch.float64), 1.05 * edge, tau, 3000)[-1].abs().item()
    assert inside < 1e-2 and outside > 1e2
    assert stability_limit(tau) == pytest.approx(edge, rel=1e-9)


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"staleness": -1}, ValueError, "staleness"), ({"staleness": 1.5}, ValueError, "staleness"),
    ({"steps": -3}, ValueError, "steps"), ({"lr": float("nan")}, ValueError, "lr"),
    ({"lr": float("inf")}, ValueError, "lr"), ({"lr": -0.1}, ValueError, "lr"),
    ({"grad": 3}, TypeError, "grad"), ({"x0": [1.0, 2.0]}, TypeError, "x0"),
    ({"grad": lambda x: x[:1]}, ValueError, "shaped like x0"),
])
def test_bad_input_is_refused_with_the_argument_named(kwargs, error, name):
    call = {"grad": grad, "x0": X0, "lr": 0.1, "staleness": 1, "steps": 3} | kwargs
    with pytest.raises(error, match=name):
        delayed_gd(**call)


def test_zero_steps_returns_only_the_start_point():
    assert torch.equal(delayed_gd(grad, X0, 0.1, 5, 0), X0.unsqueeze(0))
