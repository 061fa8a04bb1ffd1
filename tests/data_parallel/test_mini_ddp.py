"""dpedu.MiniDDP and average_gradients against torch's DistributedDataParallel, on real gloo ranks."""

import functools
import math

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dpedu import MiniDDP, launch
from dpedu.data_parallel.mini_ddp import average_gradients


def small_model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 3))


def train(kind, bucket_cap_mb=25.0, steps=4, zero_to_none=True):
    """Per step: two micro-batches accumulated, then SGD with momentum. Every rank starts from its own
    seed, so the wrappers must make rank 0's weights everyone's."""
    rank = dist.get_rank()
    model = small_model(seed=rank)
    if kind == "torch":
        wrapped = DistributedDataParallel(model)
    elif kind == "per parameter":
        wrapped = model
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, 0)
    else:
        wrapped = MiniDDP(model, bucket_cap_mb=bucket_cap_mb, overlap=kind == "overlap")
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(100 + rank)
    gradients = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=zero_to_none)
        for _ in range(2):
            X, y = torch.randn(8 + rank, 20, generator=generator), torch.randint(0, 3, (8 + rank,), generator=generator)
            nn.functional.cross_entropy(wrapped(X), y).backward()
            if kind == "per parameter":
                average_gradients(model)
        gradients.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
    return gradients, [p.detach().clone() for p in model.parameters()]


RUNS = {2: [("torch", 25.0, True), ("overlap", 25.0, True), ("overlap", 0.005, True), ("no overlap", 0.005, True),
            ("per parameter", 25.0, True), ("torch", 25.0, False), ("overlap", 0.005, False)],
        3: [("torch", 25.0, True), ("overlap", 0.005, True), ("per parameter", 25.0, True)]}


def every_run(runs):
    return {run: train(*run[:2], zero_to_none=run[2]) for run in runs}


@functools.cache
def outcomes(world_size):
    """Every configuration trained in one launch per world size (each launch costs seconds)."""
    return launch(every_run, world_size, args=(RUNS[world_size],))


def close(a, b):
    return all(torch.allclose(x, y, rtol=1e-5, atol=1e-7) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize(("world_size", "run"), [(p, run) for p, runs in RUNS.items() for run in runs
                                                 if run[0] != "torch"], ids=str)
def test_gradients_and_parameters_equal_torch_ddp_after_several_steps(world_size, run):
    """Also with zero_grad(set_to_none=False), which keeps MiniDDP's gradients in their buckets."""
    for rank_outcomes in outcomes(world_size):
        (ddp_grads, ddp_params), (grads, params) = rank_outcomes[("torch", 25.0, run[2])], rank_outcomes[run]
        assert all(close(a, b) for a, b in zip(ddp_grads, grads, strict=True))
        assert close(ddp_params, params)


def buckets_and_broadcast():
    model = small_model(seed=dist.get_rank())
    model.register_buffer("counter", torch.tensor([float(dist.get_rank())]))
    model[0].bias.requires_grad_(False)
    wrapped = MiniDDP(model, bucket_cap_mb=64 * 64 * 4 / 2**20)  # exactly the middle weight
    names = {p: n for n, p in model.named_parameters()}
    X = torch.randn(4, 20)
    wrapped(X).sum().backward()
    return ([[names[p] for p in b.parameters] for b in wrapped.buckets], model.state_dict(),
            model[0].bias.grad, wrapped.bucket_times)


def test_buckets_fill_in_reverse_order_skip_frozen_parameters_and_start_from_rank_0():
    (buckets, state0, frozen_grad, times), (_, state1, *_) = launch(buckets_and_broadcast, 2)
    assert buckets == [["4.bias", "4.weight", "2.bias"], ["2.weight"], ["0.weight"]]
    assert all(torch.equal(state0[k], state1[k]) for k in state0)  # parameters and buffers are rank 0's
    assert frozen_grad is None
    assert all(t["ready"] <= t["launched"] <= t["done"] for t in times)  # measured, in order


def unused_parameter():
    model = small_model(seed=0)
    wrapped = MiniDDP(model, bucket_cap_mb=0.005)
    out = model[0](torch.ones(2, 20)) if dist.get_rank() == 0 else wrapped(torch.ones(2, 20))
    out.sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def test_a_parameter_without_gradient_on_one_rank_counts_as_zero_and_nothing_hangs():
    grads0, grads1 = launch(unused_parameter, 2, timeout=30)
    assert all(torch.equal(a, b) for a, b in zip(grads0, grads1, strict=True))
    assert torch.equal(grads0[-1], torch.full((3,), 1.0))  # d(sum)/d(bias) = 2 rows on rank 1, 0 on rank 0


def bad_arguments():
    errors = []
    for args in (("not a module",), (nn.Linear(2, 2), 0), (nn.Linear(2, 2), -1.0), (nn.Linear(2, 2), math.nan),
                 (nn.Linear(2, 2), True)):
        try:
            MiniDDP(*args)
        except (TypeError, ValueError) as error:
            errors.append(f"{type(error).__name__}: {error}")
    return errors


def test_bad_arguments_are_refused_by_name():
    errors = launch(bad_arguments, 1)[0]
    assert errors[0].startswith("TypeError: module must be a torch.nn.Module")
    assert all(e.startswith("ValueError: bucket_cap_mb must be a finite number > 0") for e in errors[1:])
    with pytest.raises(RuntimeError, match="needs a process group"):
        MiniDDP(nn.Linear(2, 2))


class FailsOnce(torch.autograd.Function):
    armed = True

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if FailsOnce.armed:
            FailsOnce.armed = False
            raise RuntimeError("backward failed half-way")
        return grad


def recovers_after_a_failed_backward():
    torch.manual_seed(0)
    first, second = nn.Linear(4, 8), nn.Linear(8, 2)
    wrapped = MiniDDP(nn.Sequential(first, second), bucket_cap_mb=1e-4)  # one bucket per parameter

    def loss(x):
        return wrapped.module[1](FailsOnce.apply(wrapped.module[0](x))).pow(2).sum()

    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(dist.get_rank()))
    wrapped(x)  # forward through the wrapper, then a backward that dies after the second layer's buckets left
    try:
        loss(x).backward()
    except RuntimeError as error:
        assert "half-way" in str(error)
    wrapped.zero_grad()
    wrapped(x)
    loss(x).backward()
    mine = [p.grad.clone() for p in wrapped.parameters()]
    local = torch.autograd.grad(loss(x), list(wrapped.parameters()))  # plain autograd: this rank's own gradients
    for g in local:
        dist.all_reduce(g)
    return all(torch.allclose(m, g / dist.get_world_size(), atol=1e-6) for m, g in zip(mine, local, strict=True))


def test_a_backward_that_raised_half_way_leaves_the_next_one_correct():
    assert launch(recovers_after_a_failed_backward, 2, timeout=30) == [True, True]


def wrapped_twice():
    model = small_model(seed=0)
    MiniDDP(model)
    try:
        MiniDDP(model)
    except ValueError as error:
        return str(error)


def test_wrapping_one_module_twice_is_refused():
    assert "already wrapped" in launch(wrapped_twice, 1)[0]
