"""Which parallelism when: a memory calculator for a model, a batch and a GPU.

Assumptions, all stated so that they can be argued with:

- Model states: 16 bytes per parameter for mixed-precision Adam, split as ``precision`` says
  (``zero_memory.PRECISIONS``: "apex", 2 + 2 + 12, Rajbhandari et al. 2020's accounting; "autocast", 4 + 4 + 8,
  torch's own autocast and FSDP2 mixed precision; or any weight/gradient/optimizer bytes), sharded by
  ZeRO stage 0-3 over the data-parallel group (``zero_memory.model_state_bytes``).
- A layout is tensor parallelism t (Megatron-LM, Shoeybi et al. 2019: every layer split t ways, an
  all-reduce inside every layer, so t stays within one node of 8 GPUs) × pipeline parallelism p (the layers
  split into p stages) × data parallelism d = gpus/(t·p), with ZeRO over the d ranks. Each GPU holds
  1/(t·p) of the parameters.
- Activations of a transformer layer, 16-bit, per micro-batch of b sequences of s tokens, hidden size h,
  a heads (Korthikanti et al. 2022, arXiv:2205.05198): s·b·h·(34 + 5·a·s/h) bytes. The 5·a·s/h term is the
  attention scores, s² per head: FlashAttention-style kernels (torch's ``scaled_dot_product_attention``)
  never store them, and selective recomputation recomputes them; both drop the term. Full recomputation
  (activation checkpointing per layer) keeps each layer's 2·s·b·h-byte input, plus one layer's
  activations while it is recomputed. Tensor parallelism divides all of it by t only with sequence
  parallelism (else s·b·h·(10 + 24/t + 5·a·s/(h·t)) per layer, and whole layer inputs).
- Pipeline parallelism with 1F1B: the first stage holds min(m, p) micro-batches of its L/p layers, where m
  is the micro-batches per step: about one micro-batch of the whole model once m ≥ p (Korthikanti et al.
  2022, section 4.2.3; interleaved schedules hold somewhat more).
- Nothing else: no embeddings or logits, no buffers, no fragmentation. "Fits" is an optimistic bound.
- Preferred order, cheapest remedy first: data parallelism alone (DDP, then ZeRO-1 and ZeRO-2: the same
  traffic, written as a reduce-scatter and an all-gather); within it, a smaller micro-batch with gradient
  accumulation, then recomputation (selective, then full), then ZeRO-3 (1.5× DDP's traffic); only then
  tensor parallelism 2, 4, 8 inside a node, then pipeline stages across nodes, each again with those
  remedies. Memory only: time and traffic are not compared.

Used in lesson 12.
"""

from __future__ import annotations

from typing import NamedTuple

from dpedu._validate import real, whole
from dpedu.beyond.zero_memory import PRECISIONS, model_state_bytes

__all__ = ["GB", "GIB", "transformer_activation_bytes", "kept_activation_bytes", "Transformer", "Option", "layout",
           "options", "recommend"]

GB = 1e9  # the papers' gigabytes
GIB = 2**30  # GPUs' memory is binary: a "32 GB" V100 has 32 GiB, an "80 GB" H100 80 GiB
RECOMPUTE = ("none", "selective", "full")


def transformer_activation_bytes(*, layers: int, sequence: int, micro_batch: int, hidden: int, heads: int,
                                 tensor_parallel: int = 1, sequence_parallel: bool = True,
                                 flash_attention: bool = False, recompute: str = "none") -> float:
    """Korthikanti et al. (2022): 16-bit activations one GPU keeps for backward over ``layers`` layers.
    Per layer s·b·h·(34 + 5·a·s/h), divided by ``tensor_parallel`` t with sequence parallelism and
    s·b·h·(10 + 24/t + 5·a·s/(h·t)) without; ``flash_attention`` or ``recompute="selective"`` drops the
    attention scores' 5·a·s/h; ``recompute="full"`` keeps each layer's input (2·s·b·h, /t with sequence
    parallelism) plus one layer's activations, recomputed during backward."""
    for name, value in (("layers", layers), ("sequence", sequence), ("micro_batch", micro_batch),
                        ("hidden", hidden), ("heads", heads), ("tensor_parallel", tensor_parallel)):
        whole(name, value)
    for name, value in (("sequence_parallel", sequence_parallel), ("flash_attention", flash_attention)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")
    s, b, h, a, t = sequence, micro_batch, hidden, heads, tensor_parallel
    scores = 0 if flash_attention or recompute == "selective" else 5 * a * s / h
    split = sequence_parallel or t == 1
    one_layer = s * b * h * ((34 + scores) / t if split else 10 + (24 + scores) / t)
    return kept_activation_bytes(layers, one_layer, 2 * s * b * h / (t if split else 1), full=recompute == "full")


def kept_activation_bytes(layers: int, layer_bytes: float, input_bytes: float, *, full: bool) -> float:
    """The recomputation rule, for any stack of equal layers: without, every layer's ``layer_bytes`` are
    kept from forward to backward; with full recomputation only each layer's ``input_bytes``, plus one
    layer's ``layer_bytes`` again while that layer is recomputed in backward."""
    whole("layers", layers)
    real("layer_bytes", layer_bytes, at_least=0)
    real("input_bytes", input_bytes, at_least=0)
    return layers * input_bytes + layer_bytes if full else layers * layer_bytes


class Transformer(NamedTuple):
    """A GPT-style transformer's shape, for its activations: layers, hidden size, heads, sequence length."""
    layers: int
    hidden: int
    heads: int
    sequence: int


class Option(NamedTuple):
    name: str
    tensor_parallel: int
    zero_stage: int
    model_states_gb: float
    activations_gb: float
    total_gb: float
    fits: bool
    pipeline_parallel: int = 1
    micro_batch: int = 1
    accumulation: int = 1  # micro-batches per step on each data-parallel replica (as far as known)
    recompute: str = "none"


def _name(t: int, p: int, stage: int) -> str:
    data = "DDP" if stage == 0 else f"ZeRO-{stage}"
    model = [f"tensor parallel {t}"] * (t > 1) + [f"pipeline {p}"] * (p > 1)
    if not model:
        return data
    return " × ".join(model) + ("" if stage == 0 else f" × {data}")


def layout(params: float, *, gpus: int, gpu_memory_gb: float, tensor_parallel: int = 1, pipeline_parallel: int = 1,
           zero_stage: int = 0, precision: str | dict = "apex", transformer: Transformer | None = None,
           micro_batch: int = 1, accumulation: int | None = None, flash_attention: bool = True,
           sequence_parallel: bool = True, recompute: str = "none", activation_bytes: float = 0.0) -> Option:
    """Per-GPU memory of one layout: ``tensor_parallel`` × ``pipeline_parallel`` × the data-parallel rest of
    ``gpus``, ZeRO ``zero_stage`` over that rest. Activations from ``transformer`` (the module's assumptions;
    ``accumulation`` None counts p micro-batches in flight), else ``activation_bytes``: one replica's
    without model parallelism, divided by t (sequence parallelism assumed)."""
    real("params", params, above=0)
    whole("gpus", gpus)
    real("gpu_memory_gb", gpu_memory_gb, above=0)
    t, p = whole("tensor_parallel", tensor_parallel), whole("pipeline_parallel", pipeline_parallel)
    if gpus % (t * p):
        raise ValueError(f"tensor_parallel × pipeline_parallel must divide gpus ({gpus}), got {t} × {p}")
    whole("micro_batch", micro_batch)
    real("activation_bytes", activation_bytes, at_least=0)
    per_param = PRECISIONS[precision] if isinstance(precision, str) and precision in PRECISIONS else precision
    if not isinstance(per_param, dict):
        raise ValueError(f"precision must be one of {tuple(PRECISIONS)} or a dict of bytes, got {precision!r}")
    states = model_state_bytes(params / (t * p), gpus // (t * p), zero_stage, **per_param)["total"]
    if transformer is not None:
        in_flight = p if accumulation is None else min(whole("accumulation", accumulation), p)
        layers = transformer.layers / p * in_flight  # 1F1B's first stage: min(m, p) micro-batches of L/p layers
        activations = transformer_activation_bytes(
            layers=1, sequence=transformer.sequence, micro_batch=micro_batch, hidden=transformer.hidden,
            heads=transformer.heads, tensor_parallel=t, sequence_parallel=sequence_parallel,
            flash_attention=flash_attention, recompute=recompute)
        if recompute == "full":  # the inputs of every layer held, one layer's activations on top
            one = transformer_activation_bytes(layers=1, sequence=transformer.sequence, micro_batch=micro_batch,
                                               hidden=transformer.hidden, heads=transformer.heads, tensor_parallel=t,
                                               sequence_parallel=sequence_parallel, flash_attention=flash_attention)
            activations = (activations - one) * layers + one
        else:
            activations *= layers
    else:
        activations = activation_bytes / t
    total = (states + activations) / GB
    return Option(_name(t, p, zero_stage), t, zero_stage, states / GB, activations / GB, total,
                  total <= gpu_memory_gb, p, micro_batch, accumulation or 1, recompute)


def options(params: float, *, gpus: int, gpu_memory_gb: float, activation_bytes: float = 0.0,
            transformer: Transformer | None = None, micro_batch: int = 1, global_batch: int | None = None,
            precision: str | dict = "apex", flash_attention: bool = True, sequence_parallel: bool = True,
            gpus_per_node: int = 8) -> list[Option]:
    """Every layout and remedy, in the preferred order (the module's docstring). With ``transformer``, each is
    tried at ``micro_batch`` and at smaller ones down to 1 (with gradient accumulation), and with selective and
    full recomputation; with ``global_batch`` (sequences per step), layouts whose data-parallel degree times
    the micro-batch cannot divide it are left out. Without, ``activation_bytes`` as in ``layout``."""
    whole("gpus", gpus)
    whole("micro_batch", micro_batch)
    if global_batch is not None:
        whole("global_batch", global_batch)
    whole("gpus_per_node", gpus_per_node)
    splits = [(t, 1) for t in (1, 2, 4, 8) if t <= gpus_per_node]
    depth = transformer.layers if transformer is not None else 1
    splits += [(gpus_per_node, p) for p in (2, 4, 8, 16, 32, 64, 128) if p <= depth]
    micro = [micro_batch // 2**k for k in range(micro_batch.bit_length()) if micro_batch % 2**k == 0]
    if transformer is None:
        micro = [micro_batch]
    remedies = ("none",) if transformer is None else ("none",) + ("selective",) * (not flash_attention) + ("full",)
    found = []
    for t, p in splits:
        if gpus % (t * p):
            continue
        data = gpus // (t * p)
        for stages in ((0, 1, 2), (3,)):
            for recompute in remedies:
                for b in micro:
                    if global_batch is not None and global_batch % (data * b):
                        continue
                    m = None if global_batch is None else global_batch // (data * b)
                    for stage in stages:
                        found.append(layout(params, gpus=gpus, gpu_memory_gb=gpu_memory_gb, tensor_parallel=t,
                                            pipeline_parallel=p, zero_stage=stage, precision=precision,
                                            transformer=transformer, micro_batch=b, accumulation=m,
                                            flash_attention=flash_attention, sequence_parallel=sequence_parallel,
                                            recompute=recompute, activation_bytes=activation_bytes))
                        if m is None:  # the micro-batch asked for, as micro_batch // b smaller ones
                            found[-1] = found[-1]._replace(accumulation=micro_batch // b)
    return found


def recommend(params: float, **kwargs) -> Option | None:
    """The first option, in the preferred order, whose model states and activations fit; None if none does.
    Takes ``options``' arguments."""
    return next((o for o in options(params, **kwargs) if o.fits), None)
