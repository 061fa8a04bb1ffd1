"""What this machine offers for distributed training: the report lesson 00 opens with."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

import torch
import torch.distributed as dist


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

    def __str__(self) -> str:
        gpus = "\n".join(f"  GPU {g.index}: {g.name}, {g.memory_gib:.1f} GiB" for g in self.gpus) or "  none"
        backends = ", ".join(f"{name} {'yes' if ok else 'no'}" for name, ok in self.backends.items())
        return (f"Python {self.python}, torch {self.torch}, on {self.system}\n"
                f"CPU cores: {self.cpu_cores}\nGPUs:\n{gpus}\n"
                f"torch.distributed backends: {backends}")


def environment_report() -> EnvironmentReport:
    """Versions, cores, GPUs with their memory, and which torch.distributed backends are built in.

    Reading GPU properties initialises CUDA; ``dpedu.launch`` then starts ranks with spawn.
    """
    gpus = tuple(
        GPU(i, props.name, props.total_memory / 2**30)
        for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0)
        for props in [torch.cuda.get_device_properties(i)]
    )
    available = dist.is_available()
    backends = {
        "gloo": available and dist.is_gloo_available(),
        "nccl": available and dist.is_nccl_available(),
        "mpi": available and dist.is_mpi_available(),
    }
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return EnvironmentReport(platform.python_version(), torch.__version__,
                             f"{platform.system()} {platform.machine()}", cores, gpus, backends)


if __name__ == "__main__":
    print(environment_report(), file=sys.stdout)
