"""A GPU's TF32 matmuls, emulated on the CPU, for the tests that show full float32 precision matters.

Under ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (NVIDIA's NGC containers) the float32 matmul precision reads
"high", and cuBLAS on an Ampere or later GPU then rounds both operands of every float32 matmul to TF32:
10 mantissa bits of float32's 23. ``linear`` does the same on the CPU: each of its matmuls, forward
and backward, reads the precision when it runs, as cuBLAS does, and rounds unless it is "highest". The
``tf32_override`` fixture (tests/conftest.py) puts it in place of ``torch.nn.functional.linear``.
"""

import torch
from torch import nn

from dpedu.datasets import digits
from dpedu.models import mlp


def as_cublas_reads(t: torch.Tensor) -> torch.Tensor:
    """A float32 operand as cuBLAS reads it now: rounded to TF32 (the nearest value with the low 13 of
    the 23 mantissa bits zero) unless the float32 matmul precision is "highest"."""
    if torch.get_float32_matmul_precision() == "highest":
        return t
    bits = t.detach().contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & -(1 << 13)).view(torch.float32)


class TF32Linear(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` with every matmul's operands read as ``as_cublas_reads`` says."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        out = as_cublas_reads(x) @ as_cublas_reads(weight).T
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        rows = grad.reshape(-1, grad.shape[-1])
        grad_x = as_cublas_reads(grad) @ as_cublas_reads(weight)
        grad_weight = as_cublas_reads(rows).T @ as_cublas_reads(x.reshape(-1, x.shape[-1]))
        return grad_x, grad_weight, rows.sum(0) if ctx.has_bias else None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """What ``tf32_override`` puts in place of ``torch.nn.functional.linear`` (which ``nn.Linear`` calls)."""
    return TF32Linear.apply(x, weight, bias)


def lesson_02_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 02's global batch: the first 256 training digits and their labels."""
    images = digits()
    return images.X_train[:256], images.y_train[:256]


def plain_float32(model: nn.Sequential, X: torch.Tensor) -> torch.Tensor:
    """``model(X)`` in plain float32, each Linear's product written out so that no emulation reaches it:
    what lesson 02's reference model computes on the CPU."""
    for layer in model:
        X = X @ layer.weight.T + layer.bias if isinstance(layer, nn.Linear) else layer(X)
    return X


def lesson_02_gap(model: nn.Sequential, X: torch.Tensor) -> float:
    """How far ``model(X)`` (its Linear layers through ``F.linear``) is from the same model in plain float32."""
    return (model(X) - plain_float32(model, X)).abs().max().item()


def lesson_02_model() -> nn.Sequential:
    return mlp(64, 32, 10, seed=0)
