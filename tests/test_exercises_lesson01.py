import pytest
import torch

from dpedu import least_squares
from dpedu.datasets import diabetes
from dpedu.exercises import lesson01


def test_checks_accept_right_answers_and_reject_wrong_ones():
    A = least_squares.with_bias(diabetes().X_train)
    lr_limit = 2 / torch.linalg.eigvalsh(least_squares.hessian(A)).max().item()
    assert lesson01.largest_stable_lr(lr_limit)
    assert not lesson01.largest_stable_lr(1 / lr_limit)
    assert not lesson01.largest_stable_lr(float("nan"))


def test_variance_check_wants_the_finite_population_correction(capsys):
    """Against per-example gradients from autograd: B=1 is the plain spread, B=N has no error at all."""
    data = diabetes()
    A, y = least_squares.with_bias(data.X_train), data.y_train.double()
    w = torch.zeros(11, dtype=torch.float64, requires_grad=True)
    g = torch.stack([torch.autograd.grad((A[i] @ w - y[i]) ** 2, w)[0] for i in range(len(A))])
    sigma2 = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    assert lesson01.minibatch_variance(1, sigma2)
    assert lesson01.minibatch_variance(len(A), 0.0)  # the whole dataset: the exact gradient
    assert not lesson01.minibatch_variance(len(A), sigma2 / len(A))  # with-replacement formula
    assert "without replacement" in capsys.readouterr().out
    with pytest.raises(ValueError, match="batch_size"):
        lesson01.minibatch_variance(len(A) + 1, 1.0)


def test_noise_floor_check_and_bad_arguments():
    A = least_squares.with_bias(diabetes().X_train)
    y = diabetes().y_train.double()
    g = least_squares.per_example_gradients(A, y, least_squares.optimum(A, y))
    trace = ((g - g.mean(0)) ** 2).sum(1).mean().item()
    assert lesson01.noise_floor(0.02, 2, 0.02 * trace / 8)
    assert not lesson01.noise_floor(0.02, 2, 0.02 * trace / 4)
    with pytest.raises(ValueError, match="batch_size"):
        lesson01.noise_floor(0.02, 0, 1.0)
    with pytest.raises(ValueError, match="lr"):
        lesson01.noise_floor(float("inf"), 2, 1.0)
