import math

import numpy as np
import pytest
import torch

import dpedu
from dpedu.sgd.staleness import delayed_gd, stability_edge, stability_limit

H = torch.diag(torch.tensor([0.1, 0.5, 1.0], dtype=torch.float64))
X0 = torch.ones(3, dtype=torch.float64)


def grad(x):
    return H @ x


def test_public_name_and_shape():
    iterates = dpedu.delayed_gd(grad, X0, 0.1, 2, 7)
    assert iterates.shape == (8, 3) and torch.equal(iterates[0], X0)
    assert dpedu.delayed_gd(lambda x: 0.5 * x, torch.ones(2, 3, dtype=torch.float64), 0.1, 1, 4).shape == (5, 2, 3)


def test_staleness_zero_is_plain_gradient_descent():
    # on the quadratic with Hessian H, GD multiplies each coordinate by (1 - lr·h_i) per step
    iterates = delayed_gd(grad, X0, 0.3, 0, 20)
    steps = torch.arange(21, dtype=torch.float64).unsqueeze(1)
    torch.testing.assert_close(iterates, (1 - 0.3 * H.diagonal()) ** steps * X0)


def test_stale_steps_start_from_the_start_point_and_decay_at_the_characteristic_rate():
    tau, lr = 3, 0.2
    iterates = delayed_gd(lambda x: x, torch.ones(1, dtype=torch.float64), lr, tau, 2000)[:, 0]
    # while t <= staleness every step uses the gradient at x0 = 1: x_t = 1 - lr·t exactly
    torch.testing.assert_close(iterates[:tau + 2], 1 - lr * torch.arange(tau + 2, dtype=torch.float64))
    # later |x_t| shrinks like r^t, r the largest root of z^(τ+1) - z^τ + lr (found independently)
    r = np.abs(np.roots([1.0, -1.0] + [0.0] * (tau - 1) + [lr])).max()
    late, early = iterates[1900:].abs().max().item(), iterates[900:1000].abs().max().item()
    assert (late / early) ** (1 / 1000) == pytest.approx(r, rel=1e-3)


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


def test_stability_limit_refuses_staleness_it_cannot_root_find_quickly():
    with pytest.raises(ValueError, match="staleness must be an int from 0 to 100"):
        stability_limit(101)


def test_stability_edge_is_within_its_stated_distance_of_a_known_edge_from_the_stable_side():
    for steps in (10, 60):
        edge = stability_edge(lambda x: x * x < 2, 0.0, 2.0, steps=steps)
        assert edge * edge < 2 and 0 <= 2**0.5 - edge <= max(2.0 / 2**steps, math.ulp(2**0.5))


@pytest.mark.parametrize(("args", "error", "name"), [
    ((3, 0.0, 1.0), TypeError, "stable must be a function"), ((lambda x: x < 1, 0.0, 0.0), ValueError, "high"),
    ((lambda x: x < 1, float("nan"), 2.0), ValueError, "low"), ((lambda x: True, 0.0, 1.0), ValueError, "stable"),
    ((lambda x: x < 1, 0.0, 2.0, 10**6), ValueError, "steps"),
])
def test_stability_edge_names_bad_arguments(args, error, name):
    with pytest.raises(error, match=name):
        stability_edge(*args)
