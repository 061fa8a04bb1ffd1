import pytest
import torch
import torch.distributed as dist
from torch import nn

from dpedu import SyncBatchNorm, launch
from dpedu.data_parallel.sync_batchnorm import _SyncBatchNormFunction

TOLERANCE = 1e-5  # float32 results against nn.BatchNorm's, whose sums run in another order
C = 3


def _global_batch(batch_sizes, tail, step):
    """The same global batch (inputs, output weights) on every rank, and a held-out input for eval."""
    generator = torch.Generator().manual_seed(100 + step)
    n = sum(batch_sizes)
    x = torch.randn(n, C, *tail, generator=generator) * 2 + 1
    g = torch.randn(n, C, *tail, generator=generator)  # loss = sum(y * g): every output gets a gradient
    return x, g, torch.randn(4, C, *tail, generator=generator)


def _affine(module):
    with torch.no_grad():
        module.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
        module.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
    return module


def _steps(module, batch_sizes, tail, rank, steps=2):
    """Two training steps on this rank's slice of the global batch; what they computed, then eval."""
    start = sum(batch_sizes[:rank])
    record = []
    for step in range(steps):
        x, g, held_out = _global_batch(batch_sizes, tail, step)
        x = x[start:start + batch_sizes[rank]].clone().requires_grad_()
        module.zero_grad()
        y = module(x)
        (y * g[start:start + batch_sizes[rank]]).sum().backward()
        record.append({"y": y.detach(), "x_grad": x.grad, "weight_grad": module.weight.grad.clone(),
                       "bias_grad": module.bias.grad.clone()})
    module.eval()
    state = {key: value.clone() for key, value in module.state_dict().items()}
    return record, state, module(held_out).detach()


def _on_rank(batch_sizes, tail):
    return _steps(_affine(SyncBatchNorm(C)), batch_sizes, tail, dist.get_rank())


def _reference(batch_sizes, tail):
    batch_norm = {0: nn.BatchNorm1d, 1: nn.BatchNorm1d, 2: nn.BatchNorm2d}[len(tail)]
    return _steps(_affine(batch_norm(C)), [sum(batch_sizes)], tail, 0)


def _close(a, b):
    return torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("batch_sizes", [[4, 1], [2, 5, 1], [3, 3, 3], [3, 0, 2]])
@pytest.mark.parametrize("tail", [(), (2, 3)], ids=["N,C", "N,C,H,W"])
def test_equals_batch_norm_on_the_concatenated_batch(batch_sizes, tail):
    ranks = launch(_on_rank, len(batch_sizes), args=(batch_sizes, tail))
    (reference, reference_state, reference_eval) = _reference(batch_sizes, tail)
    for step, expected in enumerate(reference):
        for key in ("y", "x_grad"):  # each rank holds its slice of the global output and input gradient
            assert _close(torch.cat([record[step][key] for record, _, _ in ranks]), expected[key]), (step, key)
        for key in ("weight_grad", "bias_grad"):  # summed over ranks (DDP then averages them)
            assert _close(sum(record[step][key] for record, _, _ in ranks), expected[key]), (step, key)
    for _, state, eval_output in ranks:
        assert set(state) == set(reference_state)
        for key in ("running_mean", "running_var"):
            assert _close(state[key], reference_state[key]), key
        assert state["num_batches_tracked"].item() == reference_state["num_batches_tracked"].item() == 2
        assert _close(eval_output, reference_eval)


def _half_precision(batch_sizes, dtype):
    """One training step of a float32 layer on this rank's slice of a half-precision global batch."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    module = _affine(SyncBatchNorm(C) if dist.is_initialized() else nn.BatchNorm2d(C))
    x, g, _ = _global_batch(batch_sizes, (2, 3), 0)
    start = sum(batch_sizes[:rank])
    x = x[start:start + batch_sizes[rank]].to(dtype).requires_grad_()
    y = module(x)
    (y * g[start:start + batch_sizes[rank]].to(dtype)).sum().backward()
    return y.detach(), x.grad, module.weight.grad, module.bias.grad, module.running_mean, module.running_var


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_input_is_normalised_in_float32_like_batch_norm(dtype):
    ranks = launch(_half_precision, 2, args=([4, 3], dtype))
    y, x_grad, *float32 = _half_precision([7], dtype)  # nn.BatchNorm2d on the whole batch, one process
    step = torch.finfo(dtype).eps  # one rounding step of the half-precision outputs (2^-7 for bfloat16)
    for ours, theirs in ((torch.cat([r[0] for r in ranks]), y), (torch.cat([r[1] for r in ranks]), x_grad)):
        assert ours.dtype == theirs.dtype == dtype
        assert torch.allclose(ours.float(), theirs.float(), rtol=step, atol=step)
    summed = [ranks[0][i] + ranks[1][i] for i in (2, 3)] + list(ranks[0][4:])  # parameter grads summed
    for ours, theirs in zip(summed, float32, strict=True):  # parameters and buffers stay float32
        assert ours.dtype == theirs.dtype == torch.float32 and _close(ours, theirs)


def test_a_second_derivative_is_refused_rather_than_wrong():
    x = torch.randn(4, C, requires_grad=True)
    (first,) = torch.autograd.grad(SyncBatchNorm(C)(x).pow(3).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        first.sum().backward()


def test_the_running_statistics_move_with_the_momentum_and_the_unbiased_variance():
    module = SyncBatchNorm(2, momentum=0.25)
    x = torch.tensor([[1.0, 0.0], [3.0, 0.0], [5.0, 6.0]])
    module(x)
    assert torch.allclose(module.running_mean, 0.25 * torch.tensor([3.0, 2.0]))
    assert torch.allclose(module.running_var, 0.75 + 0.25 * torch.tensor([4.0, 12.0]))


@pytest.mark.parametrize("shape", [(6, C), (5, C, 4), (2, C, 3, 3)])
def test_without_a_process_group_it_is_batch_norm(shape):
    assert not dist.is_initialized()
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 3 + 2
    ours = _affine(SyncBatchNorm(C, momentum=0.3))
    theirs = _affine({2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d}[len(shape)](C, momentum=0.3))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours(a).pow(2).sum().backward()
    theirs(b).pow(2).sum().backward()
    assert _close(a.grad, b.grad) and _close(ours.weight.grad, theirs.weight.grad)
    assert _close(ours.running_var, theirs.running_var) and _close(ours.running_mean, theirs.running_mean)
    ours.eval(), theirs.eval()
    assert _close(ours(x), theirs(x))


def test_gradients_are_those_of_the_formula():
    x = torch.randn(4, 2, 3, dtype=torch.double, requires_grad=True)
    weight = torch.rand(2, dtype=torch.double, requires_grad=True)
    bias = torch.rand(2, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, w, b: _SyncBatchNormFunction.apply(x, w, b, 1e-5)[0], (x, weight, bias))


def test_state_dicts_move_to_and_from_batch_norm_2d():
    ours = _affine(SyncBatchNorm(C))
    ours(torch.randn(5, C, 2, 2))
    theirs = nn.BatchNorm2d(C)
    theirs.load_state_dict(ours.state_dict())  # strict: the same names, nothing missing or extra
    back = SyncBatchNorm(C)
    back.load_state_dict(theirs.state_dict())
    assert all(torch.equal(value, back.state_dict()[key]) for key, value in ours.state_dict().items())
    assert [name for name, _ in ours.named_parameters()] == [name for name, _ in theirs.named_parameters()]


def _one_sample_in_all():
    return SyncBatchNorm(C)(torch.randn(1, C))


def test_one_value_per_channel_in_the_global_batch_is_refused():
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        SyncBatchNorm(C)(torch.randn(1, C))
    assert SyncBatchNorm(C)(torch.randn(1, C, 2)).shape == (1, C, 2)  # two values per channel: fine
    with pytest.raises(Exception, match="more than 1 value per channel"):
        launch(lambda: SyncBatchNorm(C)(torch.randn(1 - dist.get_rank(), C)), 2)  # 1 + 0 samples


def test_a_rank_with_no_sample_still_takes_part():
    def on_rank():
        x = torch.ones(2 * (1 - dist.get_rank()), C).cumsum(0).requires_grad_()  # rank 1 holds none
        y = SyncBatchNorm(C)(x)
        y.sum().backward()
        return y.detach(), x.grad

    (y0, grad0), (y1, grad1) = launch(on_rank, 2)
    assert torch.allclose(y0[:, 0], torch.tensor([-1.0, 1.0]), atol=1e-4) and y1.shape == grad1.shape == (0, C)


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda: SyncBatchNorm(0), ValueError, "num_features"),
    (lambda: SyncBatchNorm(2.0), ValueError, "num_features"),
    (lambda: SyncBatchNorm(2, eps=0), ValueError, "eps"),
    (lambda: SyncBatchNorm(2, momentum=1.5), ValueError, "momentum"),
    (lambda: SyncBatchNorm(2, momentum=None), ValueError, "momentum=None .* not supported"),
    (lambda: SyncBatchNorm(3)(torch.randn(4, 2)), ValueError, "input has 2 channels .* num_features=3"),
    (lambda: SyncBatchNorm(3)(torch.randn(4)), ValueError, r"\(N, C\)"),
    (lambda: SyncBatchNorm(3)([1.0, 2.0]), TypeError, "input must be a torch.Tensor"),
])
def test_bad_arguments_are_refused_by_name(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_the_backward_all_reduce_is_made_only_when_the_input_needs_a_gradient():
    from dpedu.runtime.traffic import bytes_sent

    def on_rank(input_needs_grad):
        x = torch.randn(4, C, generator=torch.Generator().manual_seed(dist.get_rank())).requires_grad_(input_needs_grad)
        layer = SyncBatchNorm(C)
        with bytes_sent() as sent:
            layer(x).square().sum().backward()
        return sum(what == "all_reduce" for what, _ in sent.calls), layer.weight.grad

    (without, weight_grad), (with_input_grad, same_weight_grad) = launch(lambda: [on_rank(False), on_rank(True)], 2)[0]
    assert (without, with_input_grad) == (1, 2)
    assert torch.equal(weight_grad, same_weight_grad)  # the parameter gradients need only the local sums


def test_a_large_mean_keeps_the_variance_float32_would_lose():
    # mean 1000, spread 0.01: in float32, E[x^2] - E[x]^2 is off by more than the variance itself
    x = 1000 + 0.01 * torch.randn(64, C, generator=torch.Generator().manual_seed(0))
    assert ((x * x).mean(0) - x.mean(0) ** 2 - x.double().var(0, unbiased=False)).abs().max() > 1e-3
    layer = SyncBatchNorm(C, momentum=1.0)  # the running variance becomes the batch's, unbiased
    layer(x)
    assert torch.allclose(layer.running_var.double(), x.double().var(0), rtol=1e-5)
    assert torch.allclose(layer.running_mean.double(), x.double().mean(0), rtol=1e-6)


def test_largest_gap_joins_the_ranks_slices_and_compares_whole_tensors_rank_by_rank():
    from dpedu.data_parallel.sync_batchnorm import largest_gap

    reference = {"output": torch.tensor([1.0, -2.0, 4.0]), "running statistics": torch.tensor([2.0, 4.0])}
    ranks = [{"output": torch.tensor([1.0, -2.0]), "running statistics": torch.tensor([2.0, 4.0])},
             {"output": torch.tensor([3.0]), "running statistics": torch.tensor([2.0, 5.0])}]
    assert largest_gap(ranks, reference, "output") == pytest.approx(1 / 4)  # slices joined: [1, -2, 3]
    assert largest_gap(ranks, reference, "running statistics") == pytest.approx(1 / 4)  # rank 1's, the worse
    assert largest_gap(ranks[:1], reference, "running statistics") == 0
