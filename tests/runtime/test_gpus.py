import os
import stat

import pytest
import torch

from dpedu.runtime import gpus
from dpedu.runtime.gpus import Probe


@pytest.fixture
def fresh_probe():
    gpus.probe.cache_clear()
    gpus._warn_once.cache_clear()
    yield
    gpus.probe.cache_clear()
    gpus._warn_once.cache_clear()


def test_without_gpus_listed_no_child_process_is_started(fresh_probe, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setattr(gpus.subprocess, "run", lambda *a, **k: pytest.fail("started a child process"))
    assert gpus.probe() == Probe(0) and gpus.usable_count() == 0


def test_listed_gpus_are_read_by_cuda_in_a_child_and_the_answer_is_kept(fresh_probe, monkeypatch):
    real = torch.cuda.device_count()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # NVML lists one GPU ...
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    found = gpus.probe()  # ... and the child, a real process, says what CUDA finds
    assert found.listed == 1 and found.error is None and len(found.properties) == real
    assert not torch.cuda._initialized  # nothing started here
    monkeypatch.setattr(gpus.subprocess, "run", lambda *a, **k: pytest.fail("asked twice"))
    assert gpus.probe() is found


def test_gpus_cuda_cannot_start_count_as_none_with_a_warning_that_says_what_to_do(fresh_probe, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # NVML lists two GPUs ...
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(gpus.sys, "executable", "false")  # ... and starting CUDA in the child fails
    with pytest.warns(RuntimeWarning, match="CUDA cannot start.*update the NVIDIA driver"):
        assert gpus.usable_count() == 0
    assert gpus.probe().listed == 2 and gpus.probe().error == "exit code 1"


def test_the_system_lists_nvidia_gpus_from_the_driver_or_nvidia_smi(monkeypatch, tmp_path):
    proc = tmp_path / "nvidia"
    (proc / "gpus" / "0000:17:00.0").mkdir(parents=True)
    (proc / "gpus" / "0000:65:00.0").mkdir()
    (proc / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 2024\n"
                                  "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    monkeypatch.setattr(gpus, "NVIDIA_PROC", proc)
    assert gpus.system_gpu_count() == 2 and gpus.driver_version() == "535.183.01"

    monkeypatch.setattr(gpus, "NVIDIA_PROC", tmp_path / "absent")  # no driver files: ask nvidia-smi
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Tesla T4 (UUID: GPU-1)'\necho 'GPU 1: Tesla T4 (UUID: GPU-2)'\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert gpus.system_gpu_count() == 2 and gpus.driver_version() is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gpus.system_gpu_count() == 0


def test_shared_memory_and_tf32_overrides_are_read_from_the_machine(monkeypatch):
    if os.path.isdir("/dev/shm"):
        assert gpus.shared_memory_bytes() > 0
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    assert gpus.tf32_override() == "1"
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "0")  # set, but off
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")  # the driver's switch: 0 turns TF32 off, never on
    assert gpus.tf32_override() is None


@pytest.mark.parametrize(("listed", "cuda_starts", "local_rank", "uses_gpus", "said"), [
    (2, True, 0, True, ""),
    (0, False, 0, False, ""),  # no GPU: nothing to say
    (1, True, 0, False, "1 GPU(s) for 2 ranks on this machine (--nproc-per-node=1 would use them)"),
    (1, True, 1, False, ""),  # local rank 0 says it, once per machine
    (2, False, 0, False, "CUDA cannot start: "),
])
def test_a_script_takes_a_gpu_per_rank_only_where_cuda_starts_and_says_why_not(listed, cuda_starts, local_rank,
                                                                               uses_gpus, said, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: listed)  # NVML
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_starts)  # CUDA itself
    assert gpus.one_gpu_per_local_rank(local_rank, 2, "train_x") is uses_gpus
    err = capsys.readouterr().err
    assert (said in err and err.startswith("train_x: every rank runs on the CPU: ")) if said else err == ""


def fake_driver(monkeypatch, tmp_path, version: str) -> None:
    (tmp_path / "version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  Sun May 12 2024\n")
    monkeypatch.setattr(gpus, "NVIDIA_PROC", tmp_path)


@pytest.mark.parametrize(("driver", "runs"), [
    ("580.65.06", 13), ("590.48.01", 13), ("580.65.05", 12), ("570.172.08", 12), ("535.183.01", 12),
    ("525.60.13", 12), ("525.60.12", 0), ("470.57.02", 0), (None, None)])
def test_the_newest_cuda_a_driver_runs_is_read_from_its_version(driver, runs):
    assert gpus.driver_cuda(driver) == runs


def test_the_cuda_12_install_names_this_release_where_pytorch_org_has_one_and_the_newest_known_elsewhere():
    assert gpus.cuda12_install("2.13.0+cu130", "python") == (
        'python -m pip install "torch==2.13.0+cu126" --index-url https://download.pytorch.org/whl/cu126')
    assert gpus.cuda12_install("2.15.0", "python") == (
        'python -m pip install "torch>=2.14,<2.15" --index-url https://download.pytorch.org/whl/cu126')


def test_a_cuda_13_torch_on_a_cuda_12_driver_is_told_the_install_line_and_a_new_enough_driver_is_not(
        monkeypatch, tmp_path):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    fake_driver(monkeypatch, tmp_path, "550.54.15")
    said = gpus.driver_remedy()
    assert "needs NVIDIA driver 580.65.06 or later, and this driver (550.54.15) runs CUDA 12" in said
    assert gpus.cuda12_install() in said
    fake_driver(monkeypatch, tmp_path, "580.95.05")  # the driver is not why CUDA did not start
    said = gpus.driver_remedy()
    assert "runs CUDA 13 builds, so it is not the cause" in said and "pip install" not in said
    fake_driver(monkeypatch, tmp_path, "470.57.02")
    assert gpus.driver_remedy().endswith("update the NVIDIA driver")


def test_a_cpu_only_torch_is_told_pypis_default_build_only_where_the_driver_runs_it(monkeypatch, tmp_path):
    fake_driver(monkeypatch, tmp_path, "580.95.05")
    assert "pypi.org/simple" in gpus.cpu_only_remedy() and "cu126" not in gpus.cpu_only_remedy()
    fake_driver(monkeypatch, tmp_path, "535.183.01")
    assert gpus.cuda12_install() in gpus.cpu_only_remedy() and "pypi.org" not in gpus.cpu_only_remedy()
    assert "Blackwell" in gpus.cpu_only_remedy()  # the one GPU family the CUDA 12.6 build cannot serve
    fake_driver(monkeypatch, tmp_path, "470.57.02")  # too old for any build: no install line at all
    assert gpus.cpu_only_remedy().endswith("update it") and "pip" not in gpus.cpu_only_remedy()
    monkeypatch.setattr(gpus, "NVIDIA_PROC", tmp_path / "absent")  # no version to read: nvidia-smi decides
    said = gpus.cpu_only_remedy()
    assert "nvidia-smi's header" in said and "pypi.org/simple" in said and gpus.cuda12_install() in said
