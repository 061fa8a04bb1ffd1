import pytest
import torch
import torch.distributed as dist
from torch import nn

from dpedu import launch
from dpedu.beyond import zero_memory as zm
from dpedu.beyond.zero_one import SGD_KINDS, Zero1Optimizer, same_parameters, train_sgd, train_zero_one

PSI = 1732  # tanh_mlp's parameters


@pytest.fixture(scope="module", params=[2, 3, 4])
def runs(request):
    """(world size, per rank: (train_zero_one's result, DDP's)), one launch per world size; 3 needs padding."""
    world_size = request.param
    return world_size, launch(lambda: (train_zero_one(steps=5), zm.train("ddp", steps=5)), world_size)


def test_trains_ddps_parameters_on_every_rank(runs):
    _, ranks = runs
    ddp = ranks[0][1]["params"]
    for zero, _ in ranks:
        for got, want in zip(zero["params"], ddp, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        assert all(torch.equal(a, b) for a, b in zip(zero["params"], ranks[0][0]["params"], strict=True))


def test_each_rank_holds_exactly_one_nth_of_adams_state_on_shards_that_tile_the_padded_vector(runs):
    world_size, ranks = runs
    padded = -(-PSI // world_size) * world_size  # 1734 on 3 ranks
    shards = [zero["shard"] for zero, _ in ranks]
    assert shards == [(r * padded // world_size, (r + 1) * padded // world_size) for r in range(world_size)]
    assert [zero["optimizer_bytes"] for zero, _ in ranks] == [8 * padded // world_size] * world_size


def test_one_step_reduce_scatters_the_whole_gradient_and_all_gathers_the_shard_with_no_all_reduce(runs):
    world_size, ranks = runs
    padded = -(-PSI // world_size) * world_size
    for zero, ddp in ranks:
        assert zero["traffic"] == {"reduce_scatter": 4 * padded, "all_gather": 4 * padded // world_size}
        assert ddp["traffic"] == {"all_reduce": 4 * PSI}


def _sgd_and_a_missing_gradient() -> dict:
    torch.manual_seed(0)  # the same model on every rank, however ranks start (spawned ones seed afresh)
    model = nn.Linear(3, 2)  # 8 parameters: on 3 ranks, padded to 9
    optimizer = Zero1Optimizer(model.parameters(), torch.optim.SGD, lr=1.0)
    before = [p.detach().clone() for p in model.parameters()]
    try:
        optimizer.step()  # no backward yet: every rank raises before sending anything
        missing = None
    except RuntimeError as error:
        missing = str(error)
    model(torch.full((1, 3), float(dist.get_rank()))).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    for g in grads:
        dist.all_reduce(g)
        g /= dist.get_world_size()
    optimizer.step()
    after = [p.detach().clone() for p in model.parameters()]
    optimizer.zero_grad(set_to_none=False)
    return {"missing": missing, "expected": [b - g for b, g in zip(before, grads, strict=True)], "after": after,
            "zeroed": all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters()),
            "shard": optimizer.shard.numel()}


def test_plain_sgd_steps_by_the_averaged_gradient_and_a_missing_gradient_raises():
    ranks = launch(_sgd_and_a_missing_gradient, 3)
    for rank in ranks:
        assert rank["missing"].startswith("params [0, 1] have no gradient (p.grad is None)")
        for got, want in zip(rank["after"], rank["expected"], strict=True):
            torch.testing.assert_close(got, want)
        assert rank["zeroed"] and rank["shard"] == 3


def _linear() -> list[torch.Tensor]:
    return list(nn.Linear(2, 2).parameters())


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: Zero1Optimizer(_linear(), torch.optim.Adam(_linear())), TypeError, "optimizer_class"),
    (lambda: Zero1Optimizer(_linear(), dict), TypeError, "optimizer_class"),
    (lambda: Zero1Optimizer([], torch.optim.Adam), ValueError, "params"),
    (lambda: Zero1Optimizer(torch.ones(2, requires_grad=True), torch.optim.Adam), TypeError, "params"),
    (lambda: Zero1Optimizer([torch.ones(2, requires_grad=True), torch.ones(2, dtype=torch.float64,
                                                                           requires_grad=True)],
                            torch.optim.Adam), ValueError, "params"),
    (lambda: Zero1Optimizer([torch.ones(2)], torch.optim.Adam), ValueError, "params"),
    (lambda: Zero1Optimizer(_linear(), torch.optim.Adam, process_group="world"), TypeError, "process_group"),
    (lambda: train_zero_one(steps=0), ValueError, "steps"),
    (lambda: train_zero_one(steps=1, lr=0), ValueError, "lr"),
    (lambda: train_sgd("zero2", steps=1), ValueError, "kind"),
    (lambda: train_sgd("ddp", steps=0), ValueError, "steps"),
    (lambda: train_sgd("ddp", steps=1, lr=-1.0), ValueError, "lr"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def _every_sgd_kind() -> dict:
    return {kind: train_sgd(kind, steps=3) for kind in SGD_KINDS}


def test_every_kind_trains_ddps_parameters_with_sgd_and_moves_them():
    ranks = launch(_every_sgd_kind, 4)  # hsdp needs an even number of ranks: rows of 2
    ddp = ranks[0]["ddp"]
    for kind in SGD_KINDS:
        assert same_parameters([rank[kind] for rank in ranks], ddp), kind
    start = list(zm.tanh_mlp().parameters())
    assert not same_parameters([ddp], start, 1e-2)  # 3 steps at lr 0.1 move them


def test_same_parameters_compares_every_rank_every_element_and_the_shapes():
    reference = [torch.zeros(2, 2), torch.zeros(2)]
    assert same_parameters([reference, [torch.full((2, 2), 5e-7), torch.zeros(2)]], reference)
    assert not same_parameters([reference, [torch.zeros(2, 2), torch.tensor([0.0, 2e-6])]], reference)
    assert not same_parameters([[torch.zeros(4), torch.zeros(2)]], reference)  # another shape
    assert not same_parameters([reference[:1]], reference)  # a parameter missing
    assert same_parameters([[torch.zeros(2, 2), torch.tensor([0.0, 1e-3])]], reference, within=1e-2)


def _hsdp_on_three_ranks():
    try:
        train_sgd("hsdp", steps=1)
    except ValueError as error:
        return str(error)


def test_hsdp_on_an_odd_number_of_ranks_is_refused_by_name():
    assert all("even number of ranks" in message for message in launch(_hsdp_on_three_ranks, 3))
