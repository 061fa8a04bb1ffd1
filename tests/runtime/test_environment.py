import warnings

import torch
import torch.distributed as dist

from dpedu import environment_report
from dpedu.runtime import gpus
from dpedu.runtime.gpus import Probe


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


def test_gpus_that_torch_cannot_use_are_reported_not_raised_with_the_remedy(monkeypatch):
    monkeypatch.setattr(gpus, "probe", lambda: Probe(2, error="CUDA driver version is insufficient"))
    with warnings.catch_warnings():  # counting them for the start method warns too (tests/runtime/test_gpus.py)
        warnings.simplefilter("ignore", RuntimeWarning)
        report = environment_report()
    assert [g.index for g in report.gpus] == [0, 1] and all(g.name.startswith("unusable by torch") for g in report.gpus)
    assert any("update the NVIDIA driver" in w for w in report.warnings)
    assert "Warning: CUDA cannot start" in str(report)


def test_two_gpus_with_dockers_64_mb_of_shared_memory_get_the_container_options(monkeypatch):
    monkeypatch.setattr(gpus, "probe", lambda: Probe(2, (("Tesla T4", 15 * 2**30),) * 2))
    monkeypatch.setattr(gpus, "shared_memory_bytes", lambda: 64 * 2**20)
    report = environment_report()
    assert [g.name for g in report.gpus] == ["Tesla T4"] * 2 and report.shared_memory == 64 * 2**20
    (warning,) = report.warnings
    assert "/dev/shm has 64 MB" in warning and "--ipc=host" in warning and "--shm-size" in warning
    assert "/dev/shm 0.1 GiB" in str(report)
    monkeypatch.setattr(gpus, "probe", lambda: Probe(1, (("Tesla T4", 15 * 2**30),)))
    assert environment_report().warnings == ()  # one GPU: no peer to share memory with


def test_a_tf32_override_is_named_where_there_are_gpus(monkeypatch):
    monkeypatch.setattr(gpus, "probe", lambda: Probe(1, (("NVIDIA H100", 80 * 2**30),)))
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    (warning,) = environment_report().warnings
    assert warning.startswith("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 makes float32 matrix products") and "TF32" in warning


def test_a_cpu_only_torch_on_a_machine_with_nvidia_gpus_gets_the_install_line(monkeypatch):
    monkeypatch.setattr(gpus, "probe", lambda: Probe(0))  # a CPU-only torch lists no GPUs ...
    monkeypatch.setattr(gpus, "system_gpu_count", lambda: 4)  # ... on a machine whose driver lists four
    monkeypatch.setattr(torch.version, "cuda", None)
    (warning,) = environment_report().warnings
    release = torch.__version__.split("+")[0]
    assert "CPU-only build" in warning and f'"torch=={release}"' in warning and "pypi.org/simple" in warning


def test_the_report_compares_the_drivers_cuda_with_torchs_and_gives_the_cuda_12_install_line(monkeypatch, tmp_path):
    (tmp_path / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar 5 2024\n")
    monkeypatch.setattr(gpus, "NVIDIA_PROC", tmp_path)
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # PyPI's default build ...
    monkeypatch.setattr(gpus, "probe", lambda: Probe(2, error="RuntimeError: The NVIDIA driver on your system is "
                                                              "too old (found version 12040)"))  # ... on CUDA 12.4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        text = str(environment_report())
    assert "NVIDIA driver 550.54.15 (runs CUDA 12 builds; this torch is a CUDA 13.0 build)" in text
    assert gpus.cuda12_install() in text and "pypi.org" not in text
