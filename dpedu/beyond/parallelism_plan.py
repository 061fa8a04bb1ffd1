"""Which parallelism when: a memory calculator for a model, a batch and a GPU.

Assumptions, all stated so that they can be argued with:

- Mixed-precision Adam: 16 bytes of model states per parameter (Rajbhandari et al. 2020: 2 + 2 + 12),
  sharded as ZeRO stage 1-3 shards them over the data-parallel ranks (``zero_memory.model_state_bytes``).
- Tensor parallelism of degree t (Megatron-LM, Shoeybi et al. 2019) splits every layer's parameters
  t ways; it needs all-reduces inside every layer, so t stays within one node (at most 8 GPUs). It
  splits the activations t ways only *with sequence parallelism* (Korthikanti et al. 2022), which this
  calculator assumes: tensor parallelism alone leaves the layer norms' and dropouts' activations whole
  on every GPU, s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes per layer instead of s·b·h·(34 + 5·a·s/h)/t
  (``transformer_activation_bytes`` computes both). Pipeline parallelism is left out: with 1F1B its
  first stage holds about as many activations as the whole model does for one micro-batch, and its
  parameters split like tensor parallelism's.
- Activations of a transformer, in 16 bits, without recomputation: s·b·h·(34 + 5·a·s/h) bytes per
  layer for sequence s, micro-batch b, hidden size h and a heads (Korthikanti et al. 2022,
  arXiv:2205.05198); pass ``activation_bytes`` for any other model.
- Nothing else: no buffers, no fragmentation, no framework overhead. "Fits" is an optimistic bound.
- Preferred order, least communication first: DDP; ZeRO-1 and ZeRO-2 (same traffic as DDP); ZeRO-3
  (1.5× DDP's); then tensor parallelism t = 2, 4, 8 inside a node, with DDP across the t-GPU groups
  (Megatron-LM's layout; all-reduces inside every layer, over the node's links).

Used in lesson 09.
"""

from __future__ import annotations

from typing import NamedTuple

from dpedu._validate import real, whole
from dpedu.beyond.zero_memory import model_state_bytes

__all__ = ["transformer_activation_bytes", "Option", "options", "recommend"]

GB = 1e9  # the papers' gigabytes


def transformer_activation_bytes(*, layers: int, sequence: int, micro_batch: int, hidden: int, heads: int,
                                 tensor_parallel: int = 1, sequence_parallel: bool = True) -> float:
    """Korthikanti et al. (2022): 16-bit activations kept for backward per GPU, per layer s·b·h·(34 + 5·a·s/h)
    without model parallelism; with ``tensor_parallel`` t > 1, that divided by t with sequence parallelism,
    s·b·h·(10 + 24/t + 5·a·s/(h·t)) without it."""
    for name, value in (("layers", layers), ("sequence", sequence), ("micro_batch", micro_batch),
                        ("hidden", hidden), ("heads", heads), ("tensor_parallel", tensor_parallel)):
        whole(name, value)
    if not isinstance(sequence_parallel, bool):
        raise TypeError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    s, b, h, a, t = sequence, micro_batch, hidden, heads, tensor_parallel
    if sequence_parallel or t == 1:
        return layers * s * b * h * (34 + 5 * a * s / h) / t
    return layers * s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


class Option(NamedTuple):
    name: str
    tensor_parallel: int
    zero_stage: int
    model_states_gb: float
    activations_gb: float
    total_gb: float
    fits: bool


def options(params: float, *, gpus: int, gpu_memory_gb: float, activation_bytes: float = 0.0) -> list[Option]:
    """Per-GPU memory of each way to train ``params`` parameters on ``gpus`` GPUs, in the preferred order.

    ``activation_bytes`` are one replica's without model parallelism; a tensor-parallel option of degree t
    holds 1/t of them, which assumes sequence parallelism (see the module's docstring)."""
    real("params", params, above=0)
    whole("gpus", gpus)
    real("gpu_memory_gb", gpu_memory_gb, above=0)
    real("activation_bytes", activation_bytes, at_least=0)
    candidates = [("DDP", 1, 0), ("ZeRO-1", 1, 1), ("ZeRO-2", 1, 2), ("ZeRO-3", 1, 3)]
    candidates += [(f"tensor parallel {t}", t, 0) for t in (2, 4, 8) if gpus % t == 0]
    found = []
    for name, t, stage in candidates:
        states = model_state_bytes(params / t, gpus // t, stage)["total"] / GB
        activations = activation_bytes / t / GB  # tensor + sequence parallelism
        found.append(Option(name, t, stage, states, activations, states + activations,
                            states + activations <= gpu_memory_gb))
    return found


def recommend(params: float, *, gpus: int, gpu_memory_gb: float, activation_bytes: float = 0.0) -> Option | None:
    """The first option, in the preferred order, whose model states and activations fit; None if none does."""
    return next((o for o in options(params, gpus=gpus, gpu_memory_gb=gpu_memory_gb,
                                    activation_bytes=activation_bytes) if o.fits), None)
