import pytest

from dpedu import launch
from dpedu.beyond import fsdp_step, zero_one

PSI = 1732
LAYERS = [4 * (16 * 32 + 32), 4 * (32 * 32 + 32), 4 * (32 * 4 + 4)]  # float32 bytes of tanh_mlp's Linears
OPTIONS = {"default": {}, "kept": {"reshard_after_forward": False}, "bfloat16": {"mixed_precision": True},
           "prefetch": {"forward_prefetch": True}}


@pytest.fixture(scope="module")
def ranks():
    def run():
        traced = {name: fsdp_step.traced_step(steps=3, **options) for name, options in OPTIONS.items()}
        return traced, zero_one.train_sgd("ddp", steps=3)  # the same SGD steps under DDP
    return launch(run, 2)


def _moments(traced):
    return {moment: (held, issued, dtypes) for moment, held, issued, dtypes in traced["timeline"]}


def test_the_default_gathers_one_layer_at_a_time_twice_a_step_and_prefetches_in_backward(ranks):
    for traced, ddp in ranks:
        at = _moments(traced["default"])
        assert [at[f"forward {i}"][:2] for i in range(3)] == [(LAYERS[i], i + 1) for i in range(3)]
        assert at["after forward"][0] == at["after backward"][0] == at["after step"][0] == 0
        # backward: the layer's own all-gather and the next one's (prefetched) before the layer runs
        assert [at[f"backward {i}"][1] for i in (2, 1, 0)] == [5, 6, 6]
        assert [at[f"backward {i}"][0] for i in range(3)] == LAYERS
        kinds = [kind for kind, _ in traced["default"]["calls"]]
        assert kinds.count("all_gather") == 6 and kinds.count("reduce_scatter") == 3
        assert zero_one.same_parameters([traced["default"]["params"]], ddp)


def test_keeping_the_parameters_from_forward_to_backward_holds_them_all_and_gathers_once(ranks):
    for traced, _ in ranks:
        at = _moments(traced["kept"])
        assert at["after forward"][0] == 4 * PSI == sum(LAYERS)
        assert [at[f"backward {i}"][1] for i in range(3)] == [3, 3, 3]  # no all-gather in backward
        assert at["after step"][0] == 0
        sent = [b for kind, b in traced["kept"]["calls"] if kind == "all_gather"]
        assert sum(sent) == 4 * PSI // 2
        assert traced["kept"]["params"][0].equal(traced["default"]["params"][0])


def test_bfloat16_gathers_half_the_bytes_and_reduces_in_float32(ranks):
    for traced, _ in ranks:
        at = _moments(traced["bfloat16"])
        assert [at[f"forward {i}"] for i in range(3)] == [(LAYERS[i] // 2, i + 1, ["bfloat16"]) for i in range(3)]
        gathered = {name: sum(b for kind, b in traced[name]["calls"] if kind == "all_gather")
                    for name in ("default", "bfloat16")}
        reduced = {name: sum(b for kind, b in traced[name]["calls"] if kind == "reduce_scatter")
                   for name in ("default", "bfloat16")}
        assert gathered["bfloat16"] * 2 == gathered["default"] and reduced["bfloat16"] == reduced["default"] == 4 * PSI
        assert traced["bfloat16"]["grad_dtypes"] == ["float32"]
        assert all(abs(a / b - 1) < 0.01 for a, b in zip(traced["bfloat16"]["losses"], traced["default"]["losses"],
                                                          strict=True))


def test_forward_prefetch_issues_the_next_layers_all_gather_first(ranks):
    for traced, _ in ranks:
        at = _moments(traced["prefetch"])
        assert [at[f"forward {i}"][1] for i in range(3)] == [2, 3, 3]
        assert traced["prefetch"]["params"][0].equal(traced["default"]["params"][0])


@pytest.mark.parametrize(("kwargs", "error", "name"), [
    ({"steps": 0}, ValueError, "steps"), ({"steps": 1, "lr": 0}, ValueError, "lr"),
    ({"steps": 1, "mixed_precision": "yes"}, TypeError, "mixed_precision"),
    ({"steps": 1, "reshard_after_forward": 1}, TypeError, "reshard_after_forward"),
])
def test_bad_arguments_are_refused_by_name_before_any_collective(kwargs, error, name):
    with pytest.raises(error, match=name):
        fsdp_step.traced_step(**kwargs)
