import torch
import torch.distributed as dist

from dpedu import environment_report


def test_report_agrees_with_torch_and_leaves_cuda_alone():
    report = environment_report()
    assert report.torch == torch.__version__
    assert report.cpu_cores >= 1
    assert len(report.gpus) == torch.cuda.device_count()  # on a GPU machine too
    assert report.backends == {"gloo": dist.is_gloo_available(), "nccl": dist.is_nccl_available(),
                               "mpi": dist.is_mpi_available()}
    assert not torch.cuda.is_initialized()
    text = str(report)
    assert f"torch {torch.__version__}" in text and "gloo yes" in text
    assert f"dpedu.launch starts ranks by: {report.start_method}" in text


def test_gpus_are_read_in_a_child_while_cuda_is_not_initialised(fake_gpus, monkeypatch):
    from dpedu.runtime import environment

    real_count = torch.cuda.device_count()
    fake_gpus(1)  # take the child path even without a GPU
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert len(environment._gpus()) == real_count  # what the child read


def test_gpus_that_torch_cannot_use_are_reported_not_raised(fake_gpus, monkeypatch):
    from dpedu.runtime import environment

    fake_gpus(2)  # NVML sees two GPUs ...
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(environment.sys, "executable", "false")  # ... and the child reading them fails
    gpus = environment._gpus()
    assert [g.index for g in gpus] == [0, 1] and all(g.name.startswith("unusable by torch") for g in gpus)
