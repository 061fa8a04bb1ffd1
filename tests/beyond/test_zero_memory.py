import math

import pytest
import torch
from torch import nn

from dpedu import launch
from dpedu.beyond import zero_memory as zm

PSI = 1732
FP32 = {"weight_bytes": 4, "grad_bytes": 4, "optimizer_bytes": 8}


@pytest.mark.parametrize(("stage", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_the_papers_example_7_5_billion_parameters_on_64_gpus(stage, gb):
    assert round(zm.model_state_bytes(7.5e9, 64, stage)["total"] / 1e9, 1) == gb


def test_torch_autocast_layout_moves_zero_1_and_2_but_not_the_total():
    autocast = [round(zm.model_state_bytes(7.5e9, 64, s, **zm.PRECISIONS["autocast"])["total"] / 1e9, 1)
                for s in range(4)]
    assert autocast == [120.0, 60.9, 31.4, 1.9]
    assert zm.PRECISIONS["apex"] == {"weight_bytes": 2, "grad_bytes": 2, "optimizer_bytes": 12}


@pytest.mark.parametrize("kind", ["ddp", "zero1"])
def test_default_ddp_holds_a_second_copy_of_every_gradient_in_its_buckets(kind):
    view = launch(lambda: zm.train(kind, steps=2), 2)
    default = launch(lambda: zm.train(kind, steps=2, bucket_view=False), 2)
    assert [r["bucket_copy"] for r in view] == [0, 0] and [r["bucket_copy"] for r in default] == [4 * PSI] * 2
    assert [r["held"] for r in view] == [r["held"] for r in default]
    for a, b in zip(view[0]["params"], default[0]["params"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_formulas_by_part_and_one_rank_changes_nothing():
    held = zm.model_state_bytes(100, 4, 2)
    assert held == {"parameters": 200, "gradients": 50, "optimizer": 300, "total": 550}
    assert all(zm.model_state_bytes(100, 1, s)["total"] == 1600 for s in range(4))


def test_held_bytes_counts_parameters_gradients_and_moments_without_step_counters():
    model = nn.Linear(3, 2)  # 8 parameters
    optimizer = torch.optim.Adam(model.parameters())
    assert zm.held_bytes(model, optimizer) == {"parameters": 32, "gradients": 0, "optimizer": 0}
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert zm.held_bytes(model, optimizer) == {"parameters": 32, "gradients": 32, "optimizer": 64}


@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_zero1_and_fsdp_train_the_same_parameters_and_hold_what_the_formulas_say(world_size):
    runs = {kind: launch(lambda kind=kind: zm.train(kind, steps=3), world_size) for kind in zm.KINDS}
    for kind, stage in (("ddp", 0), ("fsdp", 3)):
        formula = zm.model_state_bytes(PSI, world_size, stage, **FP32)
        assert all(r["held"] == {k: formula[k] for k in r["held"]} for r in runs[kind])
    zero = [r["held"] for r in runs["zero1"]]
    assert all(h["parameters"] == h["gradients"] == 4 * PSI for h in zero)
    assert sum(h["optimizer"] for h in zero) == 8 * PSI
    owned = [shape for r in runs["zero1"] for shape in r["owned"]]
    assert sorted(owned) == sorted(tuple(p.shape) for p in zm.tanh_mlp().parameters())  # each owned once, whole
    for kind in ("zero1", "fsdp"):
        for rank in runs[kind]:
            for got, want in zip(rank["params"], runs["ddp"][0]["params"], strict=True):
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    # what each rank hands in during the last step: DDP all-reduces its gradients (from its C++ reducer);
    # ZeRO-1 also broadcasts the parameters it owns; FSDP all-gathers its shard twice (forward, backward)
    # and reduce-scatters the whole gradients
    assert all(r["traffic"] == {"all_reduce": 4 * PSI} for r in runs["ddp"])
    assert [r["traffic"] for r in runs["zero1"]] == [
        {"all_reduce": 4 * PSI, "broadcast": sum(4 * math.prod(shape) for shape in r["owned"])} for r in runs["zero1"]]
    assert all(r["traffic"] == {"all_gather": 8 * PSI // world_size, "reduce_scatter": 4 * PSI} for r in runs["fsdp"])
    assert all(r["bucket_copy"] is None for r in runs["fsdp"])


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: zm.model_state_bytes(-1, 2, 0), ValueError, "params"),
    (lambda: zm.model_state_bytes(10, 0, 0), ValueError, "world_size"),
    (lambda: zm.model_state_bytes(10, 2, 4), ValueError, "stage"),
    (lambda: zm.model_state_bytes(10, 2, 1, grad_bytes=-2), ValueError, "grad_bytes"),
    (lambda: zm.held_bytes("model", None), TypeError, "model"),
    (lambda: zm.held_bytes(nn.Linear(1, 1), None), TypeError, "optimizer"),
    (lambda: zm.train("zero2", steps=1), ValueError, "kind"),
    (lambda: zm.train("ddp", steps=0), ValueError, "steps"),
    (lambda: zm.train("ddp", steps=1, lr=0), ValueError, "lr"),
    (lambda: zm.train("ddp", steps=1, bucket_view=1), TypeError, "bucket_view"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_fsdp_shards_on_the_ranks_device_even_where_torch_was_built_for_cuda(monkeypatch):
    # PyPI's default Linux build names cuda as its accelerator with no GPU present; FSDP2 builds its default
    # mesh from that answer. Forked ranks inherit the fake: train must not depend on it.
    monkeypatch.setattr(torch._C, "_get_accelerator", lambda *args: torch.device("cuda"))
    runs = launch(lambda: zm.train("fsdp", steps=2), 2, start_method="fork")
    reference = launch(lambda: zm.train("ddp", steps=2), 2, start_method="fork")
    for got, want in zip(runs[0]["params"], reference[0]["params"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_hsdp_on_a_2_by_2_mesh_holds_half_shards_and_trains_ddps_parameters():
    hsdp = launch(lambda: zm.train("hsdp", steps=3), 4)
    ddp = launch(lambda: zm.train("ddp", steps=3), 4)
    formula = zm.model_state_bytes(PSI, 2, 3, **FP32)  # sharded within rows of 2, replicated across rows
    assert all(r["held"] == {k: formula[k] for k in r["held"]} for r in hsdp)
    # all-gathers and the reduce-scatter within a row, one all-reduce of the gradient shards across the rows
    assert all(r["traffic"] == {"all_gather": 4 * PSI, "reduce_scatter": 4 * PSI, "all_reduce": 2 * PSI} for r in hsdp)
    for rank in hsdp:
        for got, want in zip(rank["params"], ddp[0]["params"], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_hsdp_needs_an_even_number_of_ranks():
    from dpedu import RankFailedError

    with pytest.raises(RankFailedError, match="hsdp needs an even number of ranks, got 3"):
        launch(lambda: zm.train("hsdp", steps=1), 3)
