"""``nn.DataParallel`` on whatever this machine has: none, one or several GPUs (lesson 02).

GPUs are counted with ``start_methods.gpu_count()`` (``torch.cuda.device_count()``), which asks NVML and
leaves CUDA uninitialised (``torch.cuda.is_available()`` would initialise it and spoil later forks). The GPU
functions run only where there are GPUs; on CPU the lesson says what they would measure. Those that put work on
the GPUs pin full float32 for the rest of the kernel (``runtime.float32_precision``): the lesson compares what
the GPUs computed, forward and backward, with the CPU's float32 after they return, which TF32 would break.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import gather, parallel_apply, replicate, scatter

from dpedu._validate import whole
from dpedu.runtime import start_methods
from dpedu.runtime.float32_precision import pin_full_float32_precision


def wrap(model: nn.Module) -> nn.DataParallel:
    """``model`` wrapped in ``nn.DataParallel`` over every GPU here; with none, the CPU pass-through.

    DataParallel needs the module on ``device_ids[0]`` and at least one device id when torch sees a
    GPU (``device_ids=[]`` then fails on ``device_ids[0]``). Without a GPU (or on Apple's MPS) it
    keeps ``device_ids == []`` and its forward simply calls the module.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    gpus = start_methods.gpu_count()
    if gpus == 0:
        return nn.DataParallel(model)
    pin_full_float32_precision()  # no TF32 from now on: the lesson compares what the GPUs compute with the CPU
    return nn.DataParallel(model.to("cuda:0"), device_ids=list(range(gpus)), output_device=0)


def forward_on_gpus(model: nn.Module, X: torch.Tensor, devices: list[int]) -> tuple[torch.Tensor, list[list]]:
    """What DataParallel's forward does, with torch's own four functions; ``model`` on ``devices[0]``.

    Returns the gathered output and each replica's parameters (non-leaf copies: call ``retain_grad``
    on them before backward to see what each replica contributes).
    """
    if len(devices) < 2:
        raise ValueError(f"devices must name at least 2 GPUs, got {devices!r}")
    pin_full_float32_precision()  # no TF32 from now on: output and gradients are compared with the CPU's
    replicas = replicate(model, devices)  # copy the parameters to every GPU (a differentiable broadcast)
    inputs = scatter(X, devices)  # split the batch, one piece per GPU
    outputs = parallel_apply(replicas[:len(inputs)], [(part,) for part in inputs])  # one thread per GPU
    return gather(outputs, devices[0]), [list(r.parameters()) for r in replicas]


def _seconds(work: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``work`` on the GPUs, synchronised so that queued kernels are counted."""
    def synchronize_every_gpu() -> None:  # replicate's copies run on the other GPUs' streams too
        for device in range(torch.cuda.device_count()):
            torch.cuda.synchronize(device)

    times = []
    for _ in range(repeats):
        synchronize_every_gpu()
        start = time.perf_counter()
        work()
        synchronize_every_gpu()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def examples_per_second(module: nn.Module, X: torch.Tensor, y: torch.Tensor, repeats: int = 20) -> float:
    """Forward and backward throughput of ``module`` (a plain model or a DataParallel) on (X, y)."""
    whole("repeats", repeats)
    step = lambda: F.cross_entropy(module(X), y).backward()  # noqa: E731
    for _ in range(3):  # warm up: kernels chosen, memory pools filled
        step()
    return len(X) / _seconds(step, repeats)


def replication_cost(model: nn.Module, X: torch.Tensor, y: torch.Tensor, repeats: int = 20) -> dict:
    """On every GPU here: the time of ``replicate`` against a whole DataParallel step, and peak memory.

    ``model`` must be on ``cuda:0``. Returns ``replicate_s``, ``step_s`` and ``peak_bytes`` (one per GPU,
    for one forward and backward).
    """
    whole("repeats", repeats)
    devices = list(range(start_methods.gpu_count()))
    if len(devices) < 2:
        raise RuntimeError(f"replication_cost needs at least 2 GPUs, found {len(devices)}")
    pin_full_float32_precision()  # timed in the precision the lesson's other GPU cells compute in
    parallel = nn.DataParallel(model, device_ids=devices)
    step = lambda: F.cross_entropy(parallel(X), y).backward()  # noqa: E731
    step()
    for device in devices:
        torch.cuda.reset_peak_memory_stats(device)
    model.zero_grad(set_to_none=True)
    step()
    peaks = [torch.cuda.max_memory_allocated(device) for device in devices]
    return {"replicate_s": _seconds(lambda: replicate(model, devices), repeats),
            "step_s": _seconds(step, repeats), "peak_bytes": peaks}
