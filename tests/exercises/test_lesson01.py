import pytest
import torch

from dpedu.datasets import diabetes
from dpedu.exercises import lesson01
from dpedu.sgd import least_squares


def full_batch_gd_final_loss(A, y, lr, steps=1000):
    w = torch.zeros(A.shape[1], dtype=torch.float64)
    for _ in range(steps):
        w = w - lr * least_squares.per_example_gradients(A, y, w).mean(0)
    return least_squares.loss(A, y, w).item()


def test_the_stable_lr_check_agrees_with_running_gradient_descent():
    data = diabetes()
    A, y = least_squares.with_bias(data.X_train), data.y_train.double()
    # λ_max of the Hessian from autograd, not from least_squares.hessian
    H = torch.autograd.functional.hessian(lambda w: least_squares.loss(A, y, w), torch.zeros(11, dtype=torch.float64))
    lr_limit = 2 / torch.linalg.eigvalsh(H).max().item()
    start = least_squares.loss(A, y, torch.zeros(11, dtype=torch.float64)).item()
    assert full_batch_gd_final_loss(A, y, 0.98 * lr_limit) < start  # GD itself: converges just below
    assert full_batch_gd_final_loss(A, y, 1.02 * lr_limit) > 1e6 * start  # and diverges just above
    assert lesson01.largest_stable_lr(lr_limit) and lesson01.largest_stable_lr(1.01 * lr_limit)
    assert not lesson01.largest_stable_lr(1 / lr_limit) and not lesson01.largest_stable_lr(lr_limit / 2)
    assert not lesson01.largest_stable_lr(float("nan")) and not lesson01.largest_stable_lr("0.1")


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
    """The spread of per-example gradients at the optimum, from autograd and the normal equations."""
    data = diabetes()
    A, y = least_squares.with_bias(data.X_train), data.y_train.double()
    w = torch.linalg.solve(A.T @ A, A.T @ y).requires_grad_()
    g = torch.stack([torch.autograd.grad((A[i] @ w - y[i]) ** 2, w)[0] for i in range(len(A))])
    trace = (g**2).sum(1).mean().item()  # the mean gradient is zero at the optimum
    assert lesson01.noise_floor(0.02, 2, 0.02 * trace / 8)
    assert not lesson01.noise_floor(0.02, 2, 0.02 * trace / 4)
    with pytest.raises(ValueError, match="batch_size"):
        lesson01.noise_floor(0.02, 0, 1.0)
    with pytest.raises(ValueError, match="lr"):
        lesson01.noise_floor(float("inf"), 2, 1.0)
