"""Which GPUs this machine has and whether torch can use them, found without initialising CUDA here.

Three sources, and what it means when they disagree:

- NVML (``torch.cuda.device_count()``) lists the GPUs without starting CUDA, so that a later fork stays
  safe (``start_methods``). But it also lists GPUs that CUDA cannot start: a driver older than the CUDA
  this torch was built with, GPUs busy in exclusive-process mode.
- CUDA itself, started once in a short-lived child process (``probe``), says whether torch can use them.
  The answer is kept for the life of this process; GPUs that CUDA cannot start count as none
  (``usable_count``), with a warning that says why and what to do.
- The system (``/proc/driver/nvidia/gpus``, ``nvidia-smi -L``) lists NVIDIA GPUs whatever torch was built
  with: GPUs there and none for torch means a CPU-only torch (``system_gpu_count``).

Where CUDA cannot start, the remedy is chosen from the driver's version: PyPI's torch is a CUDA 13 build, and on a
driver that runs CUDA 12 builds only (older than 580.65.06) the learner gets the line that installs torch's CUDA 12
build (``driver_remedy``, ``cuda12_install``).

Also the machine's side of multi-GPU NCCL: shared memory (``/dev/shm``, which Docker sizes to 64 MB
unless told otherwise), and the settings that make float32 matrix products on GPUs round to TF32.

Used by ``start_methods.gpu_count`` (so by every GPU branch of dpedu), lesson 00's environment report
and ``./course check-gpu``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["Probe", "probe", "usable_count", "one_gpu_per_local_rank", "system_gpu_count", "driver_version",
           "driver_cuda", "cuda12_install", "driver_remedy", "cpu_only_remedy", "shared_memory_bytes",
           "tf32_override", "SHARED_MEMORY_REMEDY", "SHARED_MEMORY_NEEDED"]

NVIDIA_PROC = Path("/proc/driver/nvidia")  # the driver's own files: its version, one folder per GPU
SHARED_MEMORY_NEEDED = 2**30  # bytes; NCCL's shared-memory segments between GPUs outgrow Docker's 64 MB default
SHARED_MEMORY_REMEDY = ("NCCL between GPUs needs more shared memory than /dev/shm has: start the container with "
                        "--ipc=host or --shm-size=8g (or set NCCL_SHM_DISABLE=1, slower)")
# The oldest NVIDIA driver that runs the builds of each CUDA major release (NVIDIA's CUDA compatibility guide,
# minor version compatibility: any 12.x build from 525.60.13 on, any 13.x build from 580.65.06 on). PyPI's default
# Linux torch is a CUDA 13 build from 2.11 on (2.12 to 2.14: 13.0; 2.15: 13.2).
OLDEST_DRIVER = {12: "525.60.13", 13: "580.65.06"}
# The CUDA 12 build of each release on pytorch.org's own index (pytorch's RELEASE.md, "Release Compatibility Matrix").
# CUDA 12.6 has kernels for Maxwell to Hopper, not Blackwell (RTX 50xx, B200), which needs a CUDA 12.8+ build.
NOT_FOR_BLACKWELL = ("(not on a Blackwell GPU, RTX 50xx or B200, for which this build has no kernels: update "
                     "the driver there)")
CUDA12_INDEX = {"2.12": "cu126", "2.13": "cu126", "2.14": "cu126"}


@dataclass(frozen=True)
class Probe:
    """What NVML listed, and what CUDA, started in a child process, found: (name, memory in bytes) per GPU,
    or why it could not start."""
    listed: int
    properties: tuple[tuple[str, int], ...] = ()
    error: str | None = None


def _properties_here() -> list[tuple[str, int]]:  # initialises CUDA in the process that calls it
    return [(p.name, p.total_memory) for p in map(torch.cuda.get_device_properties, range(torch.cuda.device_count()))]


_CHILD = "import json; from dpedu.runtime.gpus import _properties_here; print(json.dumps(_properties_here()))"


@functools.cache
def probe() -> Probe:
    """NVML's count, and each GPU's properties read by CUDA in a short-lived child process (here, if CUDA is
    already up in this process). Computed once per process."""
    listed = torch.cuda.device_count()  # NVML: CUDA stays uninitialised
    if listed == 0:
        return Probe(0)
    if torch.cuda.is_initialized():
        return Probe(listed, tuple(map(tuple, _properties_here())))
    try:
        run = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return Probe(listed, error="starting CUDA took more than 120 s")
    if run.returncode != 0:
        return Probe(listed, error=(run.stderr.strip().splitlines() or [f"exit code {run.returncode}"])[-1])
    return Probe(listed, tuple(map(tuple, json.loads(run.stdout.strip().splitlines()[-1]))))


def usable_count() -> int:
    """How many GPUs torch can use here: NVML's count where CUDA starts, 0 (with a warning) where it does not."""
    found = probe()
    if found.error is not None:
        _warn_once(f"NVML lists {found.listed} GPU(s), but CUDA cannot start ({found.error}), so dpedu runs on "
                   f"the CPU; to use them, {driver_remedy()}")
    return len(found.properties)


@functools.cache
def _warn_once(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def one_gpu_per_local_rank(local_rank: int, local_world_size: int, script: str) -> bool:
    """For a rank of a torchrun ``script``: whether every process on this machine can have a GPU of its own,
    which CUDA can start. Otherwise all run on the CPU, the same answer on every rank (a mix would hang in the
    first collective), and local rank 0 says why on stderr where there are GPUs it cannot use. Where NVML
    lists enough GPUs this starts CUDA in the calling process, which uses them next."""
    listed = torch.cuda.device_count()  # NVML
    usable = listed >= local_world_size and torch.cuda.is_available()  # is_available: can CUDA start?
    if listed and not usable and local_rank == 0:
        why = (f"{listed} GPU(s) for {local_world_size} ranks on this machine (--nproc-per-node={listed} would use "
               f"them)" if listed < local_world_size else
               f"CUDA cannot start: {driver_remedy()}")
        print(f"{script}: every rank runs on the CPU: {why}", file=sys.stderr, flush=True)
    return usable


def system_gpu_count() -> int:
    """NVIDIA GPUs that the system lists, asked without torch (the driver's /proc entries, else nvidia-smi)."""
    listing = NVIDIA_PROC / "gpus"
    if listing.is_dir():
        return len(list(listing.iterdir()))
    if (smi := shutil.which("nvidia-smi")) is None:
        return 0
    try:
        run = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return 0
    return sum(line.startswith("GPU ") for line in run.stdout.splitlines())


def driver_version() -> str | None:
    """The NVIDIA driver's version, from /proc (no CUDA, no NVML); None where there is none."""
    version = NVIDIA_PROC / "version"
    if not version.exists():
        return None
    words = version.read_text().split()
    found = [w for w in words if w.count(".") >= 1 and w.replace(".", "").isdigit()]
    return found[0] if found else None


def driver_cuda(driver: str | None) -> int | None:
    """The newest CUDA major release whose builds the NVIDIA driver ``driver`` runs (13 from 580.65.06 on, 12 from
    525.60.13); 0 for an older driver, None where the version is unknown."""
    if driver is None:
        return None
    return max((major for major, oldest in OLDEST_DRIVER.items() if _numbers(driver) >= _numbers(oldest)), default=0)


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def cuda12_install(release: str = torch.__version__, python: str = sys.executable) -> str:
    """The pip command that puts torch's CUDA 12 build into ``python``'s environment: ``release`` itself where
    pytorch.org has one for it, else the newest release known here to have one."""
    version = release.split("+")[0]
    minor = ".".join(version.split(".")[:2])
    if minor in CUDA12_INDEX:
        wanted, index = f"torch=={version}+{CUDA12_INDEX[minor]}", CUDA12_INDEX[minor]
    else:
        newest = max(CUDA12_INDEX, key=lambda known: tuple(map(int, known.split("."))))
        major, last = newest.split(".")
        wanted, index = f"torch>={newest},<{major}.{int(last) + 1}", CUDA12_INDEX[newest]
    return f'{python} -m pip install "{wanted}" --index-url https://download.pytorch.org/whl/{index}'


def driver_remedy() -> str:
    """What to do where CUDA cannot start, for this machine's driver and this torch's CUDA: where the driver is
    too old for a CUDA 13 torch but runs CUDA 12 builds, the command that installs one."""
    built_for = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    driver = driver_version()
    runs = driver_cuda(driver)
    if built_for is not None and runs == 12 < built_for:
        return (f"this torch ({torch.__version__}) is built for CUDA {torch.version.cuda}, which needs NVIDIA driver "
                f"{OLDEST_DRIVER[built_for]} or later, and this driver ({driver}) runs CUDA 12 "
                f"builds: install torch's CUDA 12 build, {cuda12_install()} {NOT_FOR_BLACKWELL}, or update the "
                f"driver")
    if built_for is not None and runs is not None and runs < built_for:
        return (f"this torch is built for CUDA {torch.version.cuda}, and this driver ({driver}) is older than any "
                f"CUDA build of torch 2.12 or later runs on: update the NVIDIA driver")
    elsewhere = ("if the GPUs are in exclusive-process mode, free them or ask for the default compute mode; on an "
                 "NVSwitch system (HGX, DGX), 'system not yet initialized' means the fabric manager is not running "
                 "(systemctl start nvidia-fabricmanager)")
    if built_for is not None and runs is not None:
        return f"this driver ({driver}) runs CUDA {runs} builds, so it is not the cause: {elsewhere}"
    return (f"update the NVIDIA driver to one that supports CUDA {torch.version.cuda}, or install a torch built for "
            f"the CUDA your driver has ({cuda12_install()} for CUDA 12); {elsewhere}")


def cpu_only_remedy() -> str:
    """What to do where the system lists NVIDIA GPUs but this torch is a CPU-only build: PyPI's default build
    (CUDA 13), or the CUDA 12 build where the driver runs no CUDA 13 build."""
    release = torch.__version__.split("+")[0]
    driver = driver_version()
    runs = driver_cuda(driver)
    start = f"this machine has NVIDIA GPUs but this torch ({torch.__version__}) is a CPU-only build"
    if runs == 0:
        return (f"{start}, and its NVIDIA driver ({driver}) is older than any CUDA build of torch 2.12 runs on: "
                "update it")
    if runs == 12:
        return (f"{start}: install torch's CUDA 12 build (PyPI's default is a CUDA 13 build, which needs NVIDIA "
                f"driver {OLDEST_DRIVER[13]} or later; this one is {driver}): {cuda12_install()} {NOT_FOR_BLACKWELL}")
    pypi = (f"{sys.executable} -m pip install --force-reinstall --index-url https://pypi.org/simple "
            f'"torch=={release}"')
    if runs is None:  # no driver version to read (WSL, say): nvidia-smi's header says which CUDA it runs
        return (f"{start}: where nvidia-smi's header says \"CUDA Version: 13\" or later, install PyPI's default Linux "
                f"build, which includes CUDA 13: {pypi}; where it says 12.x, torch's CUDA 12 build: {cuda12_install()}")
    return f"{start}: install PyPI's default Linux build, which includes CUDA: {pypi}"


def shared_memory_bytes() -> int | None:
    """The size of /dev/shm, where NCCL puts the buffers GPUs of one machine exchange; None where there is none."""
    if not os.path.isdir("/dev/shm"):
        return None
    stats = os.statvfs("/dev/shm")
    return stats.f_frsize * stats.f_blocks


def tf32_override() -> str | None:
    """``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE``'s value where it turns TF32 on for float32 matrix products (some
    vendor containers set it; torch reads it when it starts); None where it does not."""
    value = os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "")
    return value if value not in ("", "0") else None
