"""Full float32 precision on GPUs: no TF32, even where the environment turns it on.

On Ampere and later NVIDIA GPUs a float32 matmul may round its operands to TF32 (10 mantissa bits, a
relative error near 1e-3), and cuDNN's float32 convolutions do so by default. torch keeps TF32 off for
matmuls, but ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (set in some vendor containers) turns it on:
``torch.get_float32_matmul_precision()`` then reads "high". The course compares what GPUs compute with
float32 on the CPU within 1e-6 to 1e-4, which TF32 breaks.

``pin_full_float32_precision()`` turns it off for the rest of the process: in a rank given a GPU
(``dpedu.launch``'s nccl ranks, ``dpedu.scripts.train_ddp``, lesson 12's module split across GPUs) and
in lesson 02's functions that put a model on the kernel's GPUs, whose results (the backward too) the
lesson compares after they return. It goes through ``torch.set_float32_matmul_precision("highest")``,
which undoes the override; setting only the newer ``torch.backends.cuda.matmul.fp32_precision = "ieee"``
would not do: under the override a later read of ``torch.backends.cuda.matmul.allow_tf32`` raises
torch's "mix of the legacy and new APIs" error.

Used in lessons 02 (``nn_data_parallel``), 03, 07, 09, 10 and 11 (every GPU rank of ``dpedu.launch``, and
``two_d_parallel.train_split``), and by ``dpedu.scripts.train_ddp`` (lessons 03, 09).
"""

from __future__ import annotations

import torch

__all__ = ["pin_full_float32_precision"]


def pin_full_float32_precision() -> None:
    """From now on in this process, float32 matmuls (cuBLAS) and convolutions (cuDNN) compute in full
    float32: the matmul precision is "highest" and cuDNN's TF32 is off. Nothing is restored."""
    torch.set_float32_matmul_precision("highest")  # writes cuBLAS's and oneDNN's new settings too
    torch.backends.cudnn.allow_tf32 = False
    # That wrote cuDNN's new settings as "none", which defers to torch.backends.fp32_precision: say "ieee".
    torch.backends.cudnn.conv.fp32_precision = torch.backends.cudnn.rnn.fp32_precision = "ieee"
