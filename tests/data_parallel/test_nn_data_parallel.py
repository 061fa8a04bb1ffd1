"""nn.DataParallel built for zero, one and several GPUs; the GPU branches run by faking what torch reports."""

import importlib

import pytest
import torch
from torch import nn

from dpedu.data_parallel import nn_data_parallel
from dpedu.models import mlp

torch_data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")  # the module, not the function


@pytest.fixture
def torch_sees_gpus(monkeypatch, fake_gpus):
    """Make dpedu and torch report ``n`` CUDA GPUs; moving a module to one is recorded instead of done."""
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
