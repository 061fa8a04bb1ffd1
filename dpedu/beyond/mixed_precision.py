"""Mixed precision: bfloat16 autocast on CPU, float16 with loss scaling on GPU, and what each changes.

Under ``torch.autocast`` the matmuls run in a 16-bit type while the parameters, the optimizer and the
reductions stay float32 (Micikevicius et al. 2018, arXiv:1710.03740). The activations that autograd
keeps for backward are then 16-bit too: half the bytes; autocast adds 16-bit copies of the weights, kept
for backward as well (``saved_bytes`` counts both). float16 has 5 exponent bits: its smallest positive
(subnormal) value is 2⁻²⁴ (about 6.0e-8); a value at or below 2⁻²⁵ rounds to 0 (the tie rounds to even,
0), one above it to 2⁻²⁴ or more, so small gradients vanish; multiplying the loss by a large factor S
before backward, and the gradients by 1/S after (``GradScaler``), keeps them. bfloat16 keeps float32's
8 exponent bits (with 8 bits of precision) and needs no scaling.

A bfloat16 matmul on CPU goes through oneDNN, which picks the widest instructions the CPU reports; on
some virtual machines it picks AMX instructions that the hypervisor does not allow, and the process
dies with "Illegal instruction". ``BF16_ENV`` caps oneDNN below AMX: set it before the process's first
matmul, and run bfloat16 work inside ranks (``dpedu.launch``), where a crash is an error, not a dead kernel.

Used in lesson 11a.
"""

from __future__ import annotations

import platform
import time

import torch
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, whole
from dpedu.beyond.pipeline import saved_storages
from dpedu.datasets import digits
from dpedu.models import mlp

__all__ = ["BF16_ENV", "PRECISIONS", "saved_bytes", "train_digits", "small_gradients", "matmul_seconds",
           "bfloat16_instructions"]

BF16_ENV = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
PRECISIONS = ("float32", "bfloat16", "float16")


def _check(precision: str, device: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")


def _autocast(precision: str, device: str):
    _check(precision, device)
    return torch.autocast(device, dtype=getattr(torch, precision), enabled=precision != "float32")


def saved_bytes(model: nn.Module, x: torch.Tensor, precision: str = "float32") -> dict[str, int]:
    """Bytes of the tensors autograd keeps for backward in one forward of ``model`` on ``x``, each storage
    counted once: "activations" (the input and what the layers compute from it) and "weight_copies" (the
    16-bit copies of the parameters that autocast makes; 0 in float32). The parameters' own storage is
    left out, as ``pipeline.run_schedule`` leaves it out: it is there whatever the precision."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    leaves = {id(p) for p in model.parameters()}
    kept: dict[str, dict[int, int]] = {"activations": {}, "weight_copies": {}}

    def copies_a_parameter(tensor: torch.Tensor) -> bool:  # a cast (and views) of a parameter, nothing else
        node = tensor.grad_fn
        while node is not None and len(node.next_functions) == 1:
            node = node.next_functions[0][0]
            if id(getattr(node, "variable", None)) in leaves:
                return True
        return False

    def where(tensor: torch.Tensor) -> dict[int, int]:
        return kept["weight_copies" if copies_a_parameter(tensor) else "activations"]

    with _autocast(precision, x.device.type), saved_storages(where, left_out=params):
        model(x)
    return {kind: sum(storages.values()) for kind, storages in kept.items()}


def train_digits(precision: str, *, steps: int, lr: float, batch_size: int = 64, hidden: int = 256,
                 device: str = "cpu") -> list[float]:
    """Train an MLP (64 -> ``hidden`` -> ``hidden`` -> 10) on the digits with SGD under ``precision``'s
    autocast, float16 with ``GradScaler``. Returns the float32 loss on the whole training set after
    every 10 steps (and at the end)."""
    _check(precision, device)
    whole("steps", steps)
    real("lr", lr, above=0)
    whole("batch_size", batch_size)
    whole("hidden", hidden)
    data = digits()
    X, y = data.X_train.to(device), data.y_train.to(device)
    model = mlp(64, hidden, 10, depth=2).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device, enabled=precision == "float16")
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(0)).to(device)
    losses = []
    for step in range(steps):
        rows = order[(step * batch_size) % len(X):][:batch_size]
        optimizer.zero_grad()
        with _autocast(precision, device):
            loss = F.cross_entropy(model(X[rows]), y[rows])
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if (step + 1) % 10 == 0 or step + 1 == steps:
            with torch.no_grad():
                losses.append(F.cross_entropy(model(X), y).item())
    return losses


def small_gradients(precision: str, loss_scale: float, *, weight: float = 1e-6, device: str = "cpu") -> dict:
    """One backward of a digits MLP whose loss is multiplied by ``weight`` (tiny gradients, as deep in
    a network or late in training), under ``precision``'s autocast, the loss times ``loss_scale`` and
    the gradients divided by it. Against float32: the share of gradient entries that became exactly 0
    among those float32 finds above 1e-12 in size (smaller ones may round either way), the relative
    error of all of them (norm of the difference over float32's norm), and float32's smallest non-zero
    gradient."""
    _check(precision, device)
    real("loss_scale", loss_scale, above=0)
    real("weight", weight, above=0)
    data = digits()
    X, y = data.X_train[:64].to(device), data.y_train[:64].to(device)

    def gradient(which: str, scale: float) -> torch.Tensor:
        model = mlp(64, 32, 10).to(device)
        with _autocast(which, device):
            loss = F.cross_entropy(model(X), y) * weight
        (loss * scale).backward()
        return torch.cat([p.grad.flatten().float() / scale for p in model.parameters()])

    reference, got = gradient("float32", 1.0), gradient(precision, loss_scale)
    alive = reference.abs() > 1e-12
    lost = (got == 0) & alive
    return {"lost_share": (lost.sum() / alive.sum()).item(),
            "relative_error": ((got - reference).norm() / reference.norm()).item(),
            "smallest_gradient": reference.abs()[reference != 0].min().item()}


def matmul_seconds(precision: str, size: int = 512, repeats: int = 10) -> float:
    """Median seconds of one (size x size) @ (size x size) matmul in ``precision`` on the CPU."""
    _check(precision, "cpu")
    whole("size", size)
    whole("repeats", repeats)
    a = torch.randn(size, size).to(getattr(torch, precision))
    a @ a  # warm-up: the first call picks kernels
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ a
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def bfloat16_instructions() -> bool | None:
    """Whether this CPU computes bfloat16 natively (x86's AVX512_BF16 or AMX), by torch's own check, which asks the
    CPU itself (macOS has no /proc/cpuinfo to read). None where the course does not judge: a CPU that is not x86 (torch
    lists an ARM CPU's bfloat16 flags too, but how fast its bfloat16 matmuls run there was not measured for the
    course), or a torch without those checks."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() not in ("x86_64", "amd64") or None in checks:
        return None
    return any(check() for check in checks)
