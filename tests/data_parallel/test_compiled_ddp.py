import pytest

from dpedu import launch
from dpedu.data_parallel import compiled_ddp


@pytest.fixture(scope="module")
def steps():
    def run():
        return {(order, optimize): compiled_ddp.compiled_step(order, optimize_ddp=optimize)
                for order in compiled_ddp.ORDERS for optimize in (True, False)}
    return launch(run, 2)


def test_compiling_the_ddp_module_captures_no_graph_and_ddp_runs_eagerly(steps):
    for rank in steps:
        for optimize in (True, False):
            run = rank[compiled_ddp.ORDERS[0], optimize]
            assert run["graphs"] == [] and [kind for kind, _ in run["events"]] == ["all_reduce"] * 4
            # eager autograd hands out each layer's bias before its weight: one layer per 1 MiB bucket
            assert compiled_ddp.last_backward(run) == "R[b3 w3] R[b2 w2] R[b1 w1] R[b0 w0]"


def test_ddp_around_a_compiled_model_gets_a_graph_per_layer_and_five_buckets_each_sent_once_complete(steps):
    weight, bias = 2**20, 2048
    for rank in steps:
        split = rank[compiled_ddp.ORDERS[1], True]
        # Linear and Tanh: DDPOptimizer cuts after each layer, whose 1 MiB + 2 KiB reached the 1 MiB cap
        assert split["graphs"] == [2, 2, 2, 2]
        # DDP rebuilds its buckets from the order the gradients arrived, a compiled graph's weight before its bias:
        # each bias waits for the next graph's backward in a bucket with the next weight, b0 goes alone
        assert compiled_ddp.last_backward(split) == "B3 R[w3] B2 R[b3 w2] B1 R[b2 w1] B0 R[b1 w0] R[b0]"
        assert [n for kind, n in split["events"] if kind == "all_reduce"] == [weight, *[weight + bias] * 3, bias]


def test_one_graph_without_ddp_optimizer_all_reduces_only_after_the_whole_backward(steps):
    for rank in steps:
        whole = rank[compiled_ddp.ORDERS[1], False]
        assert whole["graphs"] == [8]
        assert [kind for kind, _ in whole["events"][:2]] == ["backward begins", "backward done"]
        assert all(kind == "all_reduce" for kind, _ in whole["events"][2:]) and len(whole["events"]) > 3
        assert sorted(name for bucket in whole["buckets"] for name in bucket) == sorted(f"{k}{i}" for k in "wb"
                                                                                       for i in range(4))


def test_every_way_computes_the_same_gradients(steps):
    for rank in steps:
        reference = rank[compiled_ddp.ORDERS[0], True]["grads"]
        for run in rank.values():
            assert max((a - b).abs().max().item() for a, b in zip(run["grads"], reference, strict=True)) < 1e-6


def test_compiled_training_matches_eager_training():
    eager, traced = launch(lambda: [compiled_ddp.step_seconds(b, steps=3)["params"] for b in ("eager", "aot_eager")],
                           2)[0]
    assert max((a - b).abs().max().item() for a, b in zip(eager, traced, strict=True)) < 1e-6


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: compiled_ddp.compiled_step("compile(model)"), ValueError, "order"),
    (lambda: compiled_ddp.compiled_step(compiled_ddp.ORDERS[1], optimize_ddp=1), TypeError, "optimize_ddp"),
    (lambda: compiled_ddp.step_seconds("cudagraphs"), ValueError, "backend"),
    (lambda: compiled_ddp.step_seconds("eager", steps=1), ValueError, "steps"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
