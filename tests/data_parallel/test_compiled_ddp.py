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


def test_ddp_around_a_compiled_model_gets_a_graph_per_bucket_each_all_reduced_before_the_next_backward(steps):
    for rank in steps:
        split = rank[compiled_ddp.ORDERS[1], True]
        assert split["graphs"] == [2, 2, 2, 2]  # Linear and Tanh, one layer (one 1 MB bucket) per graph
        kinds = [kind if kind == "all_reduce" else f"{kind} {i}" for kind, i in split["events"]]
        for graph in (3, 2, 1):  # each graph's bucket goes out before the graph below begins its backward
            done = kinds.index(f"backward done {graph}")
            assert kinds[done + 1] == "all_reduce" and kinds[done + 2] == f"backward begins {graph - 1}"


def test_one_graph_without_ddp_optimizer_all_reduces_only_after_the_whole_backward(steps):
    for rank in steps:
        whole = rank[compiled_ddp.ORDERS[1], False]
        assert whole["graphs"] == [8]
        assert [kind for kind, _ in whole["events"][:2]] == ["backward begins", "backward done"]
        assert all(kind == "all_reduce" for kind, _ in whole["events"][2:]) and len(whole["events"]) > 3


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
