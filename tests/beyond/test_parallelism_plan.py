import pytest

from dpedu.beyond import parallelism_plan as plan


def test_zero_paper_example_fits_from_stage_1_on_32_gb():
    found = {o.name: o for o in plan.options(7.5e9, gpus=64, gpu_memory_gb=32)}
    assert [round(found[n].total_gb, 1) for n in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")] == [120.0, 31.4, 16.6, 1.9]
    assert plan.recommend(7.5e9, gpus=64, gpu_memory_gb=32).name == "ZeRO-1"


def test_megatron_8_3_billion_fits_with_8_way_tensor_parallelism_not_with_ddp():
    found = {o.name: o for o in plan.options(8.3e9, gpus=512, gpu_memory_gb=32)}
    assert not found["DDP"].fits and found["tensor parallel 8"].fits
    assert round(found["tensor parallel 8"].model_states_gb, 1) == 16.6


def test_activations_are_split_by_tensor_parallelism_and_can_leave_nothing_that_fits():
    found = {o.name: o for o in plan.options(1e9, gpus=8, gpu_memory_gb=80, activation_bytes=40e9)}
    assert found["tensor parallel 4"].activations_gb == pytest.approx(10.0)
    assert found["ZeRO-3"].activations_gb == pytest.approx(40.0)
    assert plan.recommend(1e12, gpus=8, gpu_memory_gb=80) is None
    assert [o.name for o in plan.options(1e9, gpus=6, gpu_memory_gb=80)][-1] == "tensor parallel 2"  # 6 % 4 != 0


def test_transformer_activations_korthikanti_formula():
    # one layer, s = 2, b = 1, h = 4, a = 2: s·b·h·(34 + 5·a·s/h) = 8 · (34 + 5) = 312
    assert plan.transformer_activation_bytes(layers=1, sequence=2, micro_batch=1, hidden=4, heads=2) == 312
    assert plan.transformer_activation_bytes(layers=3, sequence=2, micro_batch=2, hidden=4, heads=2) == 6 * 312


def test_tensor_parallelism_splits_all_activations_only_with_sequence_parallelism():
    shape = {"layers": 1, "sequence": 2, "micro_batch": 1, "hidden": 4, "heads": 2}
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=4) == 312 / 4
    # without sequence parallelism: 8 · (10 + 24/4 + 5·2·2/(4·4)) = 8 · 17.25 = 138, more than 312 / 4
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=4, sequence_parallel=False) == 138
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=1, sequence_parallel=False) == 312


@pytest.mark.parametrize(("call", "name"), [
    (lambda: plan.options(0, gpus=1, gpu_memory_gb=1), "params"),
    (lambda: plan.options(1e9, gpus=0, gpu_memory_gb=1), "gpus"),
    (lambda: plan.options(1e9, gpus=1, gpu_memory_gb=0), "gpu_memory_gb"),
    (lambda: plan.recommend(1e9, gpus=1, gpu_memory_gb=1, activation_bytes=-1), "activation_bytes"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=2, micro_batch=1, hidden=4, heads=2,
                                               tensor_parallel=0), "tensor_parallel"),
    (lambda: plan.transformer_activation_bytes(layers=0, sequence=1, micro_batch=1, hidden=1, heads=1), "layers"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=1, micro_batch=1, hidden=1, heads=0), "heads"),
])
def test_bad_arguments_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=name):
        call()
