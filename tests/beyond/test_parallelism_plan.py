import pytest

from dpedu.beyond import parallelism_plan as plan
from dpedu.beyond.parallelism_plan import GB, GIB, Transformer

H100, V100 = 80 * GIB / GB, 32 * GIB / GB  # "80 GB" and "32 GB" GPUs hold 80 and 32 GiB
LLAMA3_405B = Transformer(layers=126, hidden=16384, heads=128, sequence=8192)
MEGATRON_8_3B = Transformer(layers=72, hidden=3072, heads=32, sequence=1024)
LLAMA3_BYTES = {"weight_bytes": 2, "grad_bytes": 4, "optimizer_bytes": 12}  # bf16 weights, fp32 gradients


def test_zero_paper_example_fits_from_stage_1_on_32_gb_and_from_stage_2_under_autocast():
    found = {o.name: o for o in plan.options(7.5e9, gpus=64, gpu_memory_gb=32)}
    assert [round(found[n].total_gb, 1) for n in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")] == [120.0, 31.4, 16.6, 1.9]
    assert plan.recommend(7.5e9, gpus=64, gpu_memory_gb=32).name == "ZeRO-1"
    autocast = plan.recommend(7.5e9, gpus=64, gpu_memory_gb=32, precision="autocast")
    assert autocast.name == "ZeRO-2" and round(autocast.total_gb, 1) == 31.4
    zero1 = plan.layout(7.5e9, gpus=64, gpu_memory_gb=32, zero_stage=1, precision="autocast")
    assert round(zero1.total_gb, 1) == 60.9 and not zero1.fits


def test_llama3_405b_fits_with_its_3d_layout_and_not_without_pipeline_or_tensor_parallelism():
    def fits(t, p):
        return plan.layout(405e9, gpus=16384, gpu_memory_gb=H100, tensor_parallel=t, pipeline_parallel=p,
                           zero_stage=2, precision=LLAMA3_BYTES, transformer=LLAMA3_405B,
                           accumulation=2048 * t * p // 16384).fits
    assert fits(8, 16) and not fits(8, 1) and not fits(1, 16)


def test_megatron_8_3b_fits_with_tensor_parallelism_only_with_recomputation():
    def layout(recompute):
        return plan.layout(8.3e9, gpus=512, gpu_memory_gb=V100, tensor_parallel=8, transformer=MEGATRON_8_3B,
                           micro_batch=8, accumulation=1, flash_attention=False, sequence_parallel=False,
                           recompute=recompute)
    assert layout("full").fits and not layout("none").fits
    assert round(layout("none").activations_gb, 1) == 35.6 and round(layout("none").model_states_gb, 1) == 16.6
    best = plan.recommend(8.3e9, gpus=512, gpu_memory_gb=V100, transformer=MEGATRON_8_3B, micro_batch=8,
                          global_batch=512, flash_attention=False, sequence_parallel=False)
    assert (best.name, best.micro_batch, best.recompute) == ("ZeRO-2", 1, "selective")


def test_smaller_micro_batches_come_before_recomputation_and_recomputation_before_tensor_parallelism():
    xl = Transformer(layers=24, hidden=2048, heads=24, sequence=2048)
    best = plan.recommend(1.3e9, gpus=8, gpu_memory_gb=H100, transformer=xl, micro_batch=32)
    assert (best.name, best.micro_batch, best.recompute) == ("DDP", 16, "none")
    # 7 GB: ZeRO-2 at micro-batch 1 needs 8.3 without recomputation, 6.3 at micro-batch 4 with full recomputation
    best = plan.recommend(1.3e9, gpus=8, gpu_memory_gb=7, transformer=xl, micro_batch=4)
    assert (best.name, best.micro_batch, best.recompute) == ("ZeRO-2", 4, "full")
    found = plan.options(1.3e9, gpus=8, gpu_memory_gb=H100, transformer=xl, micro_batch=4, flash_attention=False)
    first_tp = next(i for i, o in enumerate(found) if o.tensor_parallel > 1)
    assert {o.recompute for o in found[:first_tp]} == {"none", "selective", "full"}
    assert {o.micro_batch for o in found[:first_tp]} == {1, 2, 4}


def test_global_batch_bounds_data_parallelism():
    found = plan.options(405e9, gpus=16384, gpu_memory_gb=H100, transformer=LLAMA3_405B, global_batch=2048)
    assert min(o.tensor_parallel * o.pipeline_parallel for o in found) == 8  # d <= 2048 sequences
    assert all(o.accumulation * o.micro_batch * 16384 // (o.tensor_parallel * o.pipeline_parallel) == 2048
               for o in found)


def test_activations_are_split_by_tensor_parallelism_and_can_leave_nothing_that_fits():
    found = {o.name: o for o in plan.options(1e9, gpus=8, gpu_memory_gb=80, activation_bytes=40e9)}
    assert found["tensor parallel 4"].activations_gb == pytest.approx(10.0)
    assert found["ZeRO-3"].activations_gb == pytest.approx(40.0)
    assert plan.recommend(1e12, gpus=8, gpu_memory_gb=80) is None
    assert {o.tensor_parallel for o in plan.options(1e9, gpus=6, gpu_memory_gb=80)} == {1, 2}  # 6 % 4 != 0


def test_transformer_activations_korthikanti_formula():
    # one layer, s = 2, b = 1, h = 4, a = 2: s·b·h·(34 + 5·a·s/h) = 8 · (34 + 5) = 312
    assert plan.transformer_activation_bytes(layers=1, sequence=2, micro_batch=1, hidden=4, heads=2) == 312
    assert plan.transformer_activation_bytes(layers=3, sequence=2, micro_batch=2, hidden=4, heads=2) == 6 * 312


def test_flash_attention_and_recomputation():
    shape = {"layers": 3, "sequence": 2, "micro_batch": 1, "hidden": 4, "heads": 2}
    assert plan.transformer_activation_bytes(**shape, flash_attention=True) == 3 * 8 * 34
    assert plan.transformer_activation_bytes(**shape, recompute="selective") == 3 * 8 * 34
    assert plan.transformer_activation_bytes(**shape, recompute="full") == 3 * 2 * 8 + 312  # inputs + one layer
    assert plan.transformer_activation_bytes(**shape, recompute="full", tensor_parallel=2) == (3 * 16 + 312) / 2


def test_pipeline_first_stage_holds_one_micro_batch_of_the_whole_model_once_m_reaches_p():
    tiny = Transformer(layers=8, hidden=4, heads=2, sequence=2)
    def activations(p, m):
        return plan.layout(1e6, gpus=8, gpu_memory_gb=1, pipeline_parallel=p, transformer=tiny,
                           accumulation=m, flash_attention=False).activations_gb
    assert activations(4, 4) == activations(4, 16) == activations(1, 1) == 8 * 312 / GB
    assert activations(4, 2) == pytest.approx(activations(1, 1) / 2)


def test_tensor_parallelism_splits_all_activations_only_with_sequence_parallelism():
    shape = {"layers": 1, "sequence": 2, "micro_batch": 1, "hidden": 4, "heads": 2}
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=4) == 312 / 4
    # without sequence parallelism: 8 · (10 + 24/4 + 5·2·2/(4·4)) = 8 · 17.25 = 138, more than 312 / 4
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=4, sequence_parallel=False) == 138
    assert plan.transformer_activation_bytes(**shape, tensor_parallel=1, sequence_parallel=False) == 312


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: plan.options(0, gpus=1, gpu_memory_gb=1), ValueError, "params"),
    (lambda: plan.options(1e9, gpus=0, gpu_memory_gb=1), ValueError, "gpus"),
    (lambda: plan.options(1e9, gpus=1, gpu_memory_gb=0), ValueError, "gpu_memory_gb"),
    (lambda: plan.recommend(1e9, gpus=1, gpu_memory_gb=1, activation_bytes=-1), ValueError, "activation_bytes"),
    (lambda: plan.options(1e9, gpus=8, gpu_memory_gb=1, global_batch=0), ValueError, "global_batch"),
    (lambda: plan.layout(1e9, gpus=8, gpu_memory_gb=1, tensor_parallel=3), ValueError, "tensor_parallel"),
    (lambda: plan.layout(1e9, gpus=8, gpu_memory_gb=1, precision="fp8"), ValueError, "precision"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=2, micro_batch=1, hidden=4, heads=2,
                                               tensor_parallel=0), ValueError, "tensor_parallel"),
    (lambda: plan.transformer_activation_bytes(layers=0, sequence=1, micro_batch=1, hidden=1, heads=1),
     ValueError, "layers"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=1, micro_batch=1, hidden=1, heads=0),
     ValueError, "heads"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=1, micro_batch=1, hidden=1, heads=1,
                                               recompute="some"), ValueError, "recompute"),
    (lambda: plan.transformer_activation_bytes(layers=1, sequence=1, micro_batch=1, hidden=1, heads=1,
                                               flash_attention=1), TypeError, "flash_attention"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_recomputation_rule_keeps_layer_inputs_plus_one_layer():
    assert plan.kept_activation_bytes(4, 90, 10, full=False) == 360
    assert plan.kept_activation_bytes(4, 90, 10, full=True) == 4 * 10 + 90
    shape = {"layers": 3, "sequence": 2, "micro_batch": 1, "hidden": 4, "heads": 2, "flash_attention": True}
    none, full = (plan.transformer_activation_bytes(**shape, recompute=r) for r in ("none", "full"))
    assert none == 3 * 8 * 34 and full == 3 * 2 * 8 + 8 * 34  # a layer's input is 2·s·b·h of its 34·s·b·h


@pytest.mark.parametrize(("call", "name"), [
    (lambda: plan.kept_activation_bytes(0, 1, 1, full=True), "layers"),
    (lambda: plan.kept_activation_bytes(1, -1, 1, full=True), "layer_bytes"),
    (lambda: plan.kept_activation_bytes(1, 1, -1, full=True), "input_bytes"),
])
def test_recomputation_rule_refuses_bad_arguments_by_name(call, name):
    with pytest.raises(ValueError, match=name):
        call()
