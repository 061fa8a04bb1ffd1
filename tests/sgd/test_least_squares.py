import pytest
import torch

from dpedu.sgd import least_squares


def problem(n=50, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return least_squares.with_bias(torch.randn(n, d, generator=g)), torch.randn(n, generator=g, dtype=torch.float64)


def test_per_example_gradients_match_autograd():
    A, y = problem()
    w = torch.randn(A.shape[1], dtype=torch.float64, requires_grad=True)
    rows = least_squares.per_example_gradients(A, y, w.detach())
    for i in (0, 7, 49):
        (grad,) = torch.autograd.grad((A[i] @ w - y[i]) ** 2, w)
        torch.testing.assert_close(rows[i], grad)
    (full,) = torch.autograd.grad(least_squares.loss(A, y, w), w)
    torch.testing.assert_close(rows.mean(0), full)


def test_hessian_and_optimum():
    A, y = problem()
    w = torch.zeros(A.shape[1], dtype=torch.float64)
    H = torch.autograd.functional.hessian(lambda v: least_squares.loss(A, y, v), w)
    torch.testing.assert_close(least_squares.hessian(A), H)
    w_star = least_squares.optimum(A, y)
    torch.testing.assert_close(least_squares.per_example_gradients(A, y, w_star).mean(0),
                               torch.zeros_like(w_star), atol=1e-12, rtol=0)


def test_loss_takes_one_or_several_weight_vectors():
    A, y = problem()
    W = torch.randn(3, A.shape[1], dtype=torch.float64)
    several = least_squares.loss(A, y, W)
    assert several.shape == (3,)
    torch.testing.assert_close(several[1], least_squares.loss(A, y, W[1]))


def test_batch_gradients_are_the_mean_of_per_example_gradients_for_each_run():
    g = torch.Generator().manual_seed(1)
    A, y = torch.randn(3, 8, 4, generator=g, dtype=torch.float64), torch.randn(3, 8, generator=g, dtype=torch.float64)
    W = torch.randn(3, 4, generator=g, dtype=torch.float64)
    for run in range(3):
        torch.testing.assert_close(least_squares.batch_gradients(A, y, W)[run],
                                   least_squares.per_example_gradients(A[run], y[run], W[run]).mean(0))


@pytest.mark.parametrize(("call", "name"), [
    (lambda A, y: least_squares.with_bias(torch.zeros(3)), "X must be a non-empty 2-D"),
    (lambda A, y: least_squares.loss(A, y[:-1], torch.zeros(5, dtype=torch.float64)), "y must be a 1-D"),
    (lambda A, y: least_squares.loss(A, y, torch.zeros(4, dtype=torch.float64)), "w must have 5 entries"),
    (lambda A, y: least_squares.per_example_gradients(A, y, torch.zeros(2, 5, dtype=torch.float64)), "w must"),
    (lambda A, y: least_squares.batch_gradients(A, y, A), "shaped"),
    (lambda A, y: least_squares.hessian(y), "A must be a non-empty 2-D"),
    (lambda A, y: least_squares.optimum(A, y.unsqueeze(1)), "y must be a 1-D")])
def test_shapes_that_do_not_fit_are_named(call, name):
    A, y = problem()
    with pytest.raises(ValueError, match=name):
        call(A, y)


def test_optimum_solves_the_normal_equations_in_float64_whatever_the_dtype_of_A():
    A, y = problem()
    normal = torch.linalg.solve(A.T @ A, A.T @ y)  # AᵀA w = Aᵀy: an independent route to w*
    torch.testing.assert_close(least_squares.optimum(A, y), normal)
    assert least_squares.optimum(A.float(), y.float()).dtype == torch.float64


@pytest.mark.parametrize(("call", "name"), [
    (lambda A, y: least_squares.with_bias([[1.0, 2.0]]), "X must be a torch.Tensor"),
    (lambda A, y: least_squares.loss(A, y.tolist(), torch.zeros(5, dtype=torch.float64)), "y must be a torch.Tensor"),
    (lambda A, y: least_squares.loss(A, y, [0.0] * 5), "w must be a torch.Tensor"),
    (lambda A, y: least_squares.per_example_gradients(A, y, torch.zeros(5)), "w must have A's dtype"),
    (lambda A, y: least_squares.batch_gradients(A, y, None), "W must be a torch.Tensor"),
    (lambda A, y: least_squares.hessian(A.numpy()), "A must be a torch.Tensor")])
def test_what_is_not_a_tensor_of_the_right_dtype_is_a_type_error(call, name):
    A, y = problem()
    with pytest.raises(TypeError, match=name):
        call(A, y)
