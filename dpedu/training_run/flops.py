"""Model FLOPs utilisation (MFU): how much of the machine's arithmetic a training run turns into the model's.

- ``training_flops_per_token``: one token's forward and backward by formula, 6·N + 12·L·d·T. A weight that
  multiplies costs 2 FLOPs per token forward (a multiply and an add) and 4 backward (the gradient of its input
  and its own): 6·N (Kaplan et al. 2020, arXiv:2001.08361). Attention's two matmuls per layer (scores, then
  the weighted values) cost 2·2·T·d per token forward, 3 times that with backward: 12·L·d·T, PaLM's
  12·L·H·Q·T with H heads of Q dimensions, H·Q = d (Chowdhery et al. 2022, arXiv:2204.02311, appendix B;
  nanoGPT's ``estimate_mfu``). Causal attention is counted whole, as both do. N is every parameter but the
  embedding tables, Kaplan's non-embedding count: a table is looked up, not multiplied. PaLM counts all its
  parameters, but it has no position table (rotary positions) and its token table is its output head; nanoGPT
  counts all but the position table, its token table also its head. So all three count each weight that
  multiplies once, as here (this GPT's head is a weight of its own, and counts).
- ``counted_flops_per_token``: the same measured, by ``torch.utils.flop_counter.FlopCounterMode`` on one
  forward and backward. It counts matmuls and attention, nothing elementwise, so it sits below the formula by
  exactly 6 FLOPs per token for each bias and LayerNorm parameter, which N holds and which multiply nothing.
- ``peak_flops``: this process's peak, measured: the best of a few square matmuls, with its own threads.
- ``mfu``: achieved model FLOP/s over the peak of the devices that achieved them (PaLM's definition). Held to
  n times one rank's peak, n ranks' MFU over one process's is their scaling efficiency, by construction.
- ``plausible_mfu``: lesson 13's check of an MFU: above 0, below the peak it is measured against.

Used in lesson 13 and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from dpedu._validate import real, tensor, whole

__all__ = ["non_embedding_parameters", "training_flops_per_token", "flops_per_token", "counted_flops_per_token",
           "peak_flops", "mfu", "reported_mfu_holds", "plausible_mfu"]


def non_embedding_parameters(model: nn.Module) -> int:
    """Kaplan et al.'s N: every parameter of ``model`` but those of its ``nn.Embedding`` tables."""
    tables = {id(p) for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in tables)


def training_flops_per_token(model: nn.Module, sequence: int) -> int:
    """FLOPs of one token's forward and backward through ``model`` (lesson 13's ``gpt.GPT``), in sequences
    of ``sequence`` tokens: 6·N + 12·L·d·T (N non-embedding parameters, L layers, width d, T = ``sequence``)."""
    return flops_per_token(non_embedding_parameters(model), len(model.blocks), model.tokens.embedding_dim, sequence)


def flops_per_token(parameters: int, layers: int, width: int, sequence: int) -> int:
    """6·N + 12·L·d·T: the training FLOPs per token of a GPT with N = ``parameters`` non-embedding parameters,
    L = ``layers`` blocks of width d = ``width``, in sequences of T = ``sequence`` tokens."""
    for name, value in (("parameters", parameters), ("layers", layers), ("width", width), ("sequence", sequence)):
        whole(name, value)
    return 6 * parameters + 12 * layers * width * sequence


def counted_flops_per_token(model: nn.Module, tokens: torch.Tensor) -> float:
    """FLOPs per token of one forward and backward of ``model`` on ``tokens`` (batch, length), as
    ``FlopCounterMode`` counts them; the gradients it leaves are cleared. Attention runs in the math kernel
    (plain matmuls, the same result): the fused CPU kernel's count depends on torch (2.13's counter leaves it
    out; 2.15's counts its backward computing the scores again)."""
    tensor("tokens", tokens, dim=2)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens).sum().backward()  # which loss does not change a matmul's FLOPs
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / tokens.numel()


def peak_flops(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32, *,
               sizes: Sequence[int] | None = None, repeats: int = 5) -> float:
    """This process's peak FLOP/s on ``device`` in ``dtype``, measured: for each size n the median time of
    ``repeats`` n × n matmuls (2·n³ FLOPs) after an untimed one; the best size's rate. With this process's
    threads (one per rank in lesson 13, where a few hundred rows reach a core's peak in a few hundredths of a
    second; more threads and GPUs get larger sizes). Leaves the random state alone (a run must not draw other
    numbers for having measured)."""
    device = torch.device(device)
    default = (2048, 4096, 8192) if device.type == "cuda" else \
        (256, 384, 512) if torch.get_num_threads() == 1 else (512, 768, 1024)
    sizes = [whole("sizes", n) for n in sizes or default]
    whole("repeats", repeats)
    generator = torch.Generator(device).manual_seed(0)
    best = 0.0
    for n in sizes:
        a, b = (torch.randn(n, n, device=device, generator=generator).to(dtype) for _ in range(2))
        seconds = []
        for _ in range(repeats + 1):
            _synchronize(device)
            start = time.perf_counter()
            a @ b
            _synchronize(device)  # GPU work is asynchronous: wait for it before reading the clock
            seconds.append(time.perf_counter() - start)
        best = max(best, 2 * n**3 / statistics.median(seconds[1:]))
    return best


def mfu(tokens_per_second: float, flops_per_token: float, peak: float) -> float:
    """Model FLOPs utilisation: the model FLOP/s achieved, ``tokens_per_second`` × ``flops_per_token``, over
    ``peak``, the peak FLOP/s of all the devices that computed those tokens: ranks × one rank's where each rank
    has a device of its own. Lesson 13 passes ranks × one core's peak on an oversubscribed machine too, which
    counts cores it does not have (4 ranks on 2 cores: half the machine's MFU), and 13b's text says so."""
    real("tokens_per_second", tokens_per_second, at_least=0)
    real("flops_per_token", flops_per_token, above=0)
    real("peak", peak, above=0)
    return tokens_per_second * flops_per_token / peak


def reported_mfu_holds(summary: dict, flops_per_token: float, ranks: int) -> bool:
    """Lesson 13a's check of the script's summary: is its ``mfu`` its ``tokens_per_second`` × ``flops_per_token``
    over ``ranks`` × the ``peak_flops`` its rank 0 measured (to float rounding)?"""
    expected = mfu(summary["tokens_per_second"], flops_per_token, ranks * summary["peak_flops"])
    return math.isclose(summary["mfu"], expected, rel_tol=1e-9)


def plausible_mfu(value: float, *, below: float = 1.0) -> bool:
    """Lesson 13's check of an MFU: above 0 and below ``below``. 1: no run does more arithmetic than the peak
    it is measured against (an MFU above it means the tokens, the FLOPs per token or the peak are wrong); the
    lesson also asserts 0.8 for one process, whose step does more than matmuls (softmax, LayerNorm, Adam)."""
    return 0 < value < below


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
