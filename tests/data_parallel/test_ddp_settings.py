"""ddp_settings: DDP's error on an unused layer and its two cures, gradient memory by address, the settings timed."""

import pytest
import torch

from dpedu import launch
from dpedu.data_parallel.ddp_settings import (
    STEP_TIME_BOUNDS,
    WithUnusedLayer,
    against_default,
    gradient_bytes,
    occupied_bytes,
    outside,
    setting_step_times,
    unused_parameter_steps,
)
from dpedu.data_parallel.ddp_timing import timing_model

GRADIENT_BYTES = 4 * sum(p.numel() for p in timing_model().parameters())
MiB = 2**20


def outcomes_and_bytes():
    unused = {name: unused_parameter_steps(settings) for name, settings in
              (("default", {}), ("find", {"find_unused_parameters": True}), ("static", {"static_graph": True}))}
    memory = {"copies": gradient_bytes("torch DDP"), "views": gradient_bytes("torch DDP", gradient_as_bucket_view=True),
              "MiniDDP": gradient_bytes("MiniDDP")}
    return unused, memory


@pytest.fixture(scope="module")
def measured():
    return launch(outcomes_and_bytes, 2, timeout=120)


def test_an_unused_layer_stops_default_ddp_at_its_second_forward_and_either_setting_cures_it(measured):
    gradients, used_map = 4 * (2 * (8 * 4 + 4)), 4 * 4  # both layers' float32 gradients; an int32 per parameter
    for unused, _ in measured:
        assert unused["default"]["completed"] == 1 and unused["default"]["all_reduces"] == [[]]  # nothing averaged
        assert unused["default"]["error"].startswith("Expected to have finished reduction in the prior iteration")
        assert unused["find"] == {"completed": 3, "all_reduces": [[gradients, used_map]] * 3, "error": None,
                                  "unused_grad_is_none": True}
        # static_graph sends the map of used parameters in its first step only
        assert unused["static"] == {"completed": 3, "all_reduces": [[used_map, gradients], [gradients], [gradients]],
                                    "error": None, "unused_grad_is_none": True}


def test_the_model_with_an_unused_layer_leaves_the_callers_random_state_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    WithUnusedLayer()
    assert torch.equal(torch.rand(3), expected)
    assert torch.equal(WithUnusedLayer().used.weight, WithUnusedLayer().used.weight)


def test_gradients_as_bucket_views_keep_one_copy_of_the_gradients_and_minddp_does_already(measured):
    for _, memory in measured:
        assert all(m["grads"] == m["buckets"] == GRADIENT_BYTES for m in memory.values())
        assert memory["copies"]["together"] == 2 * GRADIENT_BYTES  # .grad and the buckets: two copies
        assert memory["views"]["together"] == memory["MiniDDP"]["together"] == GRADIENT_BYTES


def test_occupied_bytes_counts_shared_memory_once():
    flat = torch.zeros(100)
    assert occupied_bytes([flat[:10], flat[50:], flat]) == 400  # views cover their whole storage
    assert occupied_bytes([torch.zeros(3), torch.zeros(5)]) == 32
    assert occupied_bytes([]) == 0


def three_settings():
    settings = {"default": {}, "one bucket": {"bucket_cap_mb": 25}, "find": {"find_unused_parameters": True}}
    return setting_step_times(settings, steps=2, batch_size=8, warmup=1)


def test_the_settings_are_timed_and_what_each_all_reduces_is_counted():
    parameters = len(list(timing_model().parameters()))
    for outcome in launch(three_settings, 2, timeout=120):
        timed = outcome["settings"]
        # the model uses every parameter: DDP warns that the flag costs a graph walk, once, in words only
        assert len(outcome["warnings"]) == 1 and "extra traversal of the autograd graph" in outcome["warnings"][0]
        assert not any(character.isdigit() for character in outcome["warnings"][0])
        for result in timed.values():
            assert len(result["seconds"]) == 2 and result["median"] > 0
        assert timed["one bucket"]["all_reduces"] == [GRADIENT_BYTES]  # a cap passed, 25 included: no 1 MiB first
        # rebuilt from the order the gradients arrived: the first bucket (limit 1 MiB) closes once reached,
        # on the last layer's weight (4 MiB) and what came before it; everything else in one 25 MiB bucket
        first = 4 * (10 + 10 * 1024 + 1024 + 1024 * 1024)  # output layer, then the last hidden layer's bias and weight
        assert timed["default"]["all_reduces"] == [first, GRADIENT_BYTES - first]
        # never rebuilt with find_unused_parameters: the buckets of construction, in registration order (the
        # first layer's weight alone in the 1 MiB one, sent last), then which parameters each rank used:
        # one int32 a parameter
        assert timed["find"]["all_reduces"] == [GRADIENT_BYTES - 256 * 1024 * 4, 256 * 1024 * 4, 4 * parameters]


@pytest.mark.parametrize("call, match", [
    (lambda: unused_parameter_steps({"find_unused": True}), "settings"),
    (lambda: gradient_bytes("DDP"), "wrapper"),
    (lambda: gradient_bytes("MiniDDP", gradient_as_bucket_view=True), "gradient_as_bucket_view"),
    (lambda: setting_step_times({}), "settings"),
    (lambda: setting_step_times({"a": {"bucket_size": 5}}), r"settings\['a'\]"),
])
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_settings_are_judged_against_the_default_round_by_round():
    timed = {"default": {"seconds": [1.0, 2.0, 1.0, 1.0]}, "slow": {"seconds": [2.0, 4.0, 2.0, 2.0]},
             "same": {"seconds": [1.0, 2.0, 1.0, 1.0]}}
    quartiles = against_default(timed)  # a round slowed for both moves no ratio
    assert quartiles == {"slow": (2.0, 2.0, 2.0), "same": (1.0, 1.0, 1.0)}
    assert outside(quartiles, STEP_TIME_BOUNDS) == ["slow (2.00x)"]
