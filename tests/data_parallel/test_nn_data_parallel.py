"""nn.DataParallel built for zero, one and several GPUs; the GPU branches run by faking what torch reports."""

import importlib

import pytest
import torch
import torch.nn.functional as F
from tf32 import lesson_02_batch, lesson_02_gap, lesson_02_model, plain_float32
from torch import nn

from dpedu.data_parallel import nn_data_parallel
from dpedu.models import mlp

torch_data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")  # the module, not the function


@pytest.fixture
def torch_sees_gpus(monkeypatch, fake_gpus, tf32_override):
    """Make dpedu and torch report ``n`` CUDA GPUs; moving a module to one is recorded instead of done. The
    GPUs round float32 matmuls to TF32 unless the precision is "highest", as under NVIDIA's NGC override
    (``tf32_override``, which also puts back any pin a test made in this process)."""
    moves = []

    def fake(n):
        fake_gpus(n)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)  # nn.DataParallel asks torch itself
        monkeypatch.setattr(torch_data_parallel, "_get_available_device_type", lambda: "cuda")
        monkeypatch.setattr(torch_data_parallel, "_check_balance", lambda device_ids: None)
        monkeypatch.setattr(nn.Module, "to", lambda self, *args, **kwargs: moves.append(str(args[0])) or self)
        return moves

    return fake


def test_without_gpus_the_wrapper_calls_the_model_and_prefixes_its_keys():
    model = mlp(8, 4, 2, seed=0)
    wrapper = nn_data_parallel.wrap(model)
    X = torch.randn(5, 8)
    assert wrapper.device_ids == [] and torch.equal(wrapper(X), model(X))
    assert list(wrapper.state_dict()) == [f"module.{key}" for key in model.state_dict()]


def test_the_old_cpu_only_construction_fails_where_torch_sees_a_gpu(torch_sees_gpus):
    torch_sees_gpus(1)
    with pytest.raises(IndexError, match="list index out of range"):
        nn.DataParallel(mlp(8, 4, 2), device_ids=[])


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_with_gpus_the_wrapper_spans_them_all_with_the_model_on_the_first(torch_sees_gpus, gpus):
    moves = torch_sees_gpus(gpus)
    wrapper = nn_data_parallel.wrap(mlp(8, 4, 2))
    assert wrapper.device_ids == list(range(gpus)) and wrapper.output_device == 0
    assert wrapper.src_device_obj == torch.device("cuda", 0) and moves[0] == "cuda:0"
    assert set(moves) == {"cuda:0"}  # with one GPU DataParallel moves the model there itself, to the same place


def test_on_gpus_wrap_pins_full_float32_so_the_lessons_comparison_holds(fake_gpus, torch_sees_gpus):
    (X, _), model = lesson_02_batch(), lesson_02_model()
    fake_gpus(0)
    nn_data_parallel.wrap(model)
    assert torch.get_float32_matmul_precision() == "high"  # without GPUs nothing changes
    assert lesson_02_gap(model, X) > 1e-4  # what the GPUs would compute unpinned: lesson 02's 1e-5 fails
    torch_sees_gpus(2)
    nn_data_parallel.wrap(model)
    assert torch.get_float32_matmul_precision() == "highest" and not torch.backends.cudnn.allow_tf32
    assert lesson_02_gap(model, X) < 1e-5  # the lesson's wrapper(X) against the CPU model, after wrap returned


def on_the_cpu(monkeypatch):
    """torch's replicate, scatter, parallel_apply and gather (CUDA only) replaced by what they do, on the CPU;
    the replicas are the model itself, so each one's gradient adds to its parameters', as replicate's does."""
    monkeypatch.setattr(nn_data_parallel, "replicate", lambda model, devices: [model] * len(devices))
    monkeypatch.setattr(nn_data_parallel, "scatter", lambda X, devices: X.chunk(len(devices)))
    monkeypatch.setattr(nn_data_parallel, "parallel_apply",
                        lambda modules, inputs: [module(*args) for module, args in zip(modules, inputs, strict=True)])
    monkeypatch.setattr(nn_data_parallel, "gather", lambda outputs, device: torch.cat(outputs))


def lesson_02_gradient_gap() -> float:
    """Lesson 02's check of ``forward_on_gpus``: the gradient after its output's backward, which the caller
    runs, against one plain float32 model on the whole batch."""
    (X, y), model, reference = lesson_02_batch(), lesson_02_model(), lesson_02_model()
    output, _ = nn_data_parallel.forward_on_gpus(model, X, [0, 1])
    F.cross_entropy(output, y).backward()
    F.cross_entropy(plain_float32(reference, X), y).backward()
    return max((a.grad - b.grad).abs().max().item() for a, b in zip(model.parameters(), reference.parameters(),
                                                                   strict=True))


def test_forward_on_gpus_pins_full_float32_for_the_backward_its_caller_runs(monkeypatch, tf32_override):
    on_the_cpu(monkeypatch)
    with monkeypatch.context() as unpinned:
        unpinned.setattr(nn_data_parallel, "pin_full_float32_precision", lambda: None)
        assert lesson_02_gradient_gap() > 1e-5  # without the pin, lesson 02's check fails under the override
    assert lesson_02_gradient_gap() < 1e-5
    assert torch.get_float32_matmul_precision() == "highest"  # still, for whatever the lesson compares next


def test_wrap_refuses_what_is_not_a_module():
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        nn_data_parallel.wrap(lambda x: x)


def test_forward_on_gpus_wants_two_devices_and_the_gpu_measurements_want_gpus():
    with pytest.raises(ValueError, match="devices"):
        nn_data_parallel.forward_on_gpus(mlp(8, 4, 2), torch.randn(4, 8), [0])
    with pytest.raises(ValueError, match="repeats"):
        nn_data_parallel.examples_per_second(mlp(8, 4, 2), torch.randn(4, 8), torch.zeros(4, dtype=torch.long),
                                          repeats=0)
    if torch.cuda.device_count() < 2:
        with pytest.raises(RuntimeError, match="at least 2 GPUs"):
            nn_data_parallel.replication_cost(mlp(8, 4, 2), torch.randn(4, 8), torch.zeros(4, dtype=torch.long))


def test_gpu_timings_wait_for_every_gpu_not_only_the_current_one(monkeypatch):
    synchronized = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synchronized.append(device))
    nn_data_parallel._seconds(lambda: None, repeats=1)
    assert synchronized == [0, 1, 2, 0, 1, 2]  # before the clock starts and before it stops
