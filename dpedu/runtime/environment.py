"""What this machine offers for distributed training: the report lesson 00 opens with.

Used in lesson 00 and by ``./course check-gpu``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist

from dpedu.runtime import start_methods


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

    def __str__(self) -> str:
        gpus = "\n".join(f"  GPU {g.index}: {g.name}, {g.memory_gib:.1f} GiB" for g in self.gpus) or "  none"
        backends = ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in self.backends.items())
        return (f"Python {self.python}, torch {self.torch}, on {self.system}\n"
                f"CPU cores: {self.cpu_cores}\nGPUs:\n{gpus}\n"
                f"torch.distributed backends: {backends}\n"
                f"dpedu.launch starts ranks by: {self.start_method}"
                + (f" ({self.start_method_why})" if self.start_method_why else ""))


def _gpu_properties() -> list[tuple[str, int]]:
    """(name, memory in bytes) of each GPU; initialises CUDA in the process that calls it."""
    return [(p.name, p.total_memory) for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))]


def _gpus() -> tuple[GPU, ...]:
    """Each GPU's name and memory, read without initialising CUDA in this process.

    A process with CUDA initialised can no longer fork ranks that use it (``dpedu.launch`` would
    fall back to the slower spawn), so unless CUDA is already up the properties are read in a
    short-lived child process.
    """
    if not start_methods.gpu_count():
        return ()
    if torch.cuda.is_initialized():
        found = _gpu_properties()
    else:
        child = ("import json; from dpedu.runtime.environment import _gpu_properties; "
                 "print(json.dumps(_gpu_properties()))")
        run = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
        if run.returncode != 0:  # NVML sees GPUs but CUDA cannot start (driver too old, GPUs busy, ...)
            why = (run.stderr.strip().splitlines() or ["unknown error"])[-1]
            return tuple(GPU(i, f"unusable by torch: {why}", 0.0) for i in range(start_methods.gpu_count()))
        found = json.loads(run.stdout.strip().splitlines()[-1])
    return tuple(GPU(i, name, memory / 2**30) for i, (name, memory) in enumerate(found))


def environment_report() -> EnvironmentReport:
    """Versions, cores, GPUs with their memory, the torch.distributed backends built in, and how
    ``dpedu.launch`` starts ranks here (and why, when it cannot fork)."""
    gpus = _gpus()
    available = dist.is_available()
    backends = {
        "gloo": available and dist.is_gloo_available(),
        "nccl": available and dist.is_nccl_available(),
        "mpi": available and dist.is_mpi_available(),
    }
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return EnvironmentReport(platform.python_version(), torch.__version__,
                             f"{platform.system()} {platform.machine()}", cores, gpus, backends,
                             *start_methods.choose_start_method())

