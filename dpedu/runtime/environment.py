"""What this machine offers for distributed training: the report lesson 00 opens with.

Used in lesson 00 and by ``./course check-gpu``.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dpedu.runtime import gpus, start_methods


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    memory_gib: float


@dataclass(frozen=True)
class EnvironmentReport:
    python: str
    torch: str
    system: str
    cpu_cores: int
    gpus: tuple[GPU, ...]
    backends: dict[str, bool]
    start_method: str
    start_method_why: str | None
    cuda: str | None = None  # the CUDA this torch was built with (None: a CPU-only build)
    driver: str | None = None  # the NVIDIA driver's version, where there is one
    shared_memory: int | None = None  # bytes in /dev/shm
    matmul_precision: str = "highest"  # torch.get_float32_matmul_precision(): "high" means TF32 on GPUs
    warnings: tuple[str, ...] = ()  # what will bite on this machine, each with what to do

    def __str__(self) -> str:
        listed = "\n".join(f"  GPU {g.index}: {g.name}, {g.memory_gib:.1f} GiB" for g in self.gpus) or "  none"
        backends = ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in self.backends.items())
        build = f"CUDA {self.cuda}" if self.cuda else "CPU only"
        lines = [f"Python {self.python}, torch {self.torch} ({build}), on {self.system}",
                 f"CPU cores: {self.cpu_cores}", f"GPUs:\n{listed}"]
        if self.gpus:  # what GPU runs depend on; the CPU lessons do not
            shm = "none" if self.shared_memory is None else f"{self.shared_memory / 2**30:.1f} GiB"
            runs = gpus.driver_cuda(self.driver)
            driver = (f"NVIDIA driver {self.driver} (runs CUDA {runs} builds; this torch is a CUDA {self.cuda} build)"
                      if runs else f"NVIDIA driver {self.driver or 'unknown'}")
            lines.append(f"{driver}; /dev/shm {shm}; "
                         f"float32 matmul precision {self.matmul_precision!r}")
        lines += [f"torch.distributed backends: {backends}",
                  f"dpedu.launch starts ranks by: {self.start_method}"
                  + (f" ({self.start_method_why})" if self.start_method_why else "")]
        return "\n".join(lines + [f"Warning: {w}" for w in self.warnings])


def _gpus(found: gpus.Probe) -> tuple[GPU, ...]:
    """Each GPU NVML lists, with its name and memory as CUDA read them in a child process (``gpus.probe``),
    or the reason CUDA could not start."""
    if found.error is not None:  # NVML sees GPUs but CUDA cannot start (driver too old, GPUs busy, ...)
        return tuple(GPU(i, f"unusable by torch: {found.error}", 0.0) for i in range(found.listed))
    return tuple(GPU(i, name, memory / 2**30) for i, (name, memory) in enumerate(found.properties))


def _warnings(found: gpus.Probe, shared_memory: int | None) -> tuple[str, ...]:
    """What will make this machine's GPU paths fail, each with its remedy."""
    said = []
    if found.error is not None:
        said.append(f"CUDA cannot start ({found.error}): {gpus.driver_remedy()}")
    if torch.version.cuda is None and gpus.system_gpu_count():
        said.append(gpus.cpu_only_remedy())
    if len(found.properties) >= 2 and shared_memory is not None and shared_memory < gpus.SHARED_MEMORY_NEEDED:
        said.append(f"/dev/shm has {shared_memory / 2**20:.0f} MB: {gpus.SHARED_MEMORY_REMEDY}")
    if found.properties and (override := gpus.tf32_override()):
        said.append(f"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE={override} makes float32 matrix products on "
                    f"GPUs round to TF32 (10 bits); the course pins full precision where it compares GPU "
                    f"results with CPU ones, but your own code gets TF32")
    return tuple(said)


def environment_report() -> EnvironmentReport:
    """Versions, cores, GPUs with their memory, the torch.distributed backends built in, how ``dpedu.launch``
    starts ranks here (and why, when it cannot fork), and, where GPUs are listed, what GPU runs depend on
    (driver, shared memory, TF32), with a warning for each thing that will bite. Leaves CUDA uninitialised."""
    found = gpus.probe()
    available = dist.is_available()
    backends = {
        "gloo": available and dist.is_gloo_available(),
        "nccl": available and dist.is_nccl_available(),
        "mpi": available and dist.is_mpi_available(),
    }
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    shared_memory = gpus.shared_memory_bytes()
    return EnvironmentReport(platform.python_version(), torch.__version__,
                             f"{platform.system()} {platform.machine()}", cores, _gpus(found), backends,
                             *start_methods.choose_start_method(), cuda=torch.version.cuda,
                             driver=gpus.driver_version(), shared_memory=shared_memory,
                             matmul_precision=torch.get_float32_matmul_precision(),
                             warnings=_warnings(found, shared_memory))
