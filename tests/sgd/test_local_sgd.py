"""Local SGD and DiLoCo in gloo ranks: H = 1 is synchronous SGD, the bytes fall as 1/H, torch's averager agrees."""

import pytest
import torch

from dpedu import RankFailedError, launch
from dpedu.sgd import local_sgd

pytestmark = pytest.mark.usefixtures("no_leftover_processes")  # tests/conftest.py

MODEL_BYTES = (64 * 32 + 32 + 32 * 10 + 10) * 4  # the digits MLP, float32: what one all-reduce carries
STEPS = 32


def run_all():
    settings = {"steps": STEPS, "batch_size": 8, "lr": 0.1}
    return {
        "sync": local_sgd.train("sync", **settings),
        "local 1": local_sgd.train("local", **settings),
        "local 4": local_sgd.train("local", period=4, **settings),
        "local 16": local_sgd.train("local", period=16, **settings),
        "torch 4": local_sgd.train("torch", period=4, **settings),
        "diloco 4": local_sgd.train("diloco", period=4, **settings),
        "diloco 4, lr 1, no momentum": local_sgd.train("diloco", period=4, outer_lr=1.0, outer_momentum=0.0,
                                                       **settings),
        "sync adamw": local_sgd.train("sync", inner="adamw", **{**settings, "lr": 0.01}),
        "local 1 adamw": local_sgd.train("local", inner="adamw", **{**settings, "lr": 0.01}),
        "diloco 4 adamw": local_sgd.train("diloco", period=4, inner="adamw", **{**settings, "lr": 0.01}),
        "torch steps": local_sgd.torch_averaging_steps(4, warmup_steps=0, steps=12),
        "torch steps, warmup 3": local_sgd.torch_averaging_steps(4, warmup_steps=3, steps=12),
    }


@pytest.fixture(scope="module")
def runs():
    return launch(run_all, 2)


def gap(a, b):
    return (a["parameters"] - b["parameters"]).abs().max().item()


def test_one_local_step_then_averaging_is_synchronous_sgd(runs):
    rank_0, _ = runs
    assert gap(rank_0["local 1"], rank_0["sync"]) < 1e-5
    assert max(abs(a - b) for a, b in zip(rank_0["local 1"]["loss"], rank_0["sync"]["loss"], strict=True)) < 1e-5
    # the equivalence needs a step linear in the gradient: AdamW's is not
    assert gap(rank_0["local 1 adamw"], rank_0["sync adamw"]) > 1e-3


def test_diloco_with_outer_lr_1_and_no_momentum_is_local_sgd_and_with_nesterov_it_is_not(runs):
    rank_0, _ = runs
    assert gap(rank_0["diloco 4, lr 1, no momentum"], rank_0["local 4"]) < 1e-5
    assert gap(rank_0["diloco 4"], rank_0["local 4"]) > 1e-2


def test_torch_model_averager_is_local_sgd_once_its_warmup_aligns_the_rounds(runs):
    rank_0, _ = runs
    assert gap(rank_0["torch 4"], rank_0["local 4"]) < 1e-6
    assert rank_0["torch 4"]["bytes"] == rank_0["local 4"]["bytes"]
    assert rank_0["torch steps"] == [1, 5, 9]  # warmup_steps=0: after the first step, then every 4
    assert rank_0["torch steps, warmup 3"] == [4, 8, 12]


def test_bytes_fall_as_one_over_h_and_the_ranks_agree_after_every_round(runs):
    rank_0, rank_1 = runs
    assert rank_0["sync"]["bytes"] == [MODEL_BYTES * step for step in range(1, STEPS + 1)]
    assert rank_0["local 4"]["bytes"] == [MODEL_BYTES * r for r in range(1, STEPS // 4 + 1)]
    assert rank_0["local 4"]["examples"] == [8 * 4 * r for r in range(1, STEPS // 4 + 1)]
    for name, period in {"sync": 1, "local 1": 1, "local 4": 4, "local 16": 16, "diloco 4": 4}.items():
        assert rank_0[name]["bytes"][-1] == MODEL_BYTES * STEPS // period  # exactly 1/H of synchronous SGD's
        assert rank_0[name]["loss"] == rank_1[name]["loss"] and rank_0[name]["bytes"] == rank_1[name]["bytes"]
        assert torch.equal(rank_0[name]["parameters"], rank_1[name]["parameters"])
    assert rank_0["local 16"]["loss"][-1] < rank_0["local 16"]["loss"][0]  # it trains


def shard_too_small():
    local_sgd.train("local", steps=1, batch_size=719 + 2, lr=0.1)


def test_diloco_as_the_paper_runs_it_with_adamw_inside_trains_and_keeps_the_ranks_identical(runs):
    first, second = runs
    diloco = first["diloco 4 adamw"]
    assert diloco["loss"][-1] < diloco["loss"][0] and torch.equal(diloco["parameters"],
                                                                   second["diloco 4 adamw"]["parameters"])


def test_bad_arguments_are_named():
    good = {"steps": 8, "batch_size": 4, "lr": 0.1}
    for method, change, name in [("adam", {}, "method"), ("local", {"inner": "adam"}, "inner"),
                                 ("sync", {"period": 2}, "period"), ("torch", {"period": 1}, "period"),
                                 ("local", {"steps": 0}, "steps"), ("local", {"batch_size": 0}, "batch_size"),
                                 ("local", {"lr": 0.0}, "lr"), ("diloco", {"outer_lr": -1.0}, "outer_lr"),
                                 ("diloco", {"outer_momentum": 1.0}, "outer_momentum"),
                                 ("local", {"period": 4, "eval_every": 6}, "eval_every"),
                                 ("local", {"period": 3}, "eval_every"), ("local", {"seed": -1}, "seed")]:
        with pytest.raises(ValueError, match=name):
            local_sgd.train(method, **{**good, **change})
    with pytest.raises(RuntimeError, match="inside ranks"):
        local_sgd.train("local", **good)
    with pytest.raises(ValueError, match="period"):
        local_sgd.torch_averaging_steps(1)
    with pytest.raises(RuntimeError, match="inside ranks"):
        local_sgd.torch_averaging_steps(4)
    with pytest.raises(RankFailedError, match="batch_size=721 is larger than this rank's"):
        launch(shard_too_small, 2)


def at_lr_1() -> dict[str, float]:
    settings = {"steps": 256, "batch_size": 16, "lr": 1.0}  # lesson 06's part 8, at exercise 6's rate
    return {"sync": local_sgd.train("sync", **settings)["loss"][-1],
            "local, H=64": local_sgd.train("local", period=64, **settings)["loss"][-1]}


def test_at_lr_1_ddp_still_trains_and_long_rounds_do_not():
    """Backs lesson 06's "at lr 1.0 DDP still trains and long rounds do not" and answer 6.6's figures (DDP ends
    at 0.006, H = 64 at 1.35, measured)."""
    final = launch(at_lr_1, 2)[0]
    assert final["sync"] < 0.05 and final["local, H=64"] > 0.5, final
