"""What ``DistributedDataParallel``'s constructor settings do, and what they cost (lesson 05).

Each function runs inside every rank of a ``dpedu.launch``:

- ``unused_parameter_steps``: a model with a layer its forward never uses, trained 3 steps under one
  setting: DDP's error without ``find_unused_parameters`` or ``static_graph``, a ``.grad`` of None with them.
- ``gradient_bytes``: the memory the gradients and the buckets occupy together, counted by address, for
  torch DDP with and without ``gradient_as_bucket_view`` and for MiniDDP.
- ``setting_step_times``: lesson 05's timing model under several settings, trained in turn, one step each
  round (as ``ddp_timing.step_times`` does), with what each setting all-reduces in a step and the
  warnings DDP wrote.

``against_default`` turns those times into per-round ratios against the default, and ``outside`` names the
settings whose median ratio leaves ``STEP_TIME_BOUNDS``: the lesson's check, shared with the test that makes
it fail.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Mapping

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from dpedu._validate import whole
from dpedu.data_parallel.ddp_timing import timing_batch, timing_model
from dpedu.data_parallel.mini_ddp import MiniDDP
from dpedu.runtime.stderr import captured_stderr
from dpedu.runtime.traffic import bytes_sent

SETTINGS = {"find_unused_parameters", "static_graph", "gradient_as_bucket_view", "bucket_cap_mb"}
# Each setting's step time over the default's, as the median of the per-round ratios (the settings take their
# steps in turn, so a busy moment slows them alike), lies within these bounds on any machine. No setting here
# changes what a step computes, and what they change on 2 CPU cores (a graph walk, a copy of the gradients,
# where buckets close) costs a few percent: an idle run gave 0.92-1.03x. On 2 cores oversubscribed several
# times over (two programs spinning, other notebooks running), 10 runs of 12 or 20 rounds gave 0.69-1.37x.
STEP_TIME_BOUNDS = (0.6, 1.67)


class WithUnusedLayer(nn.Module):
    """Two linear layers, of which ``forward`` uses only the first: ``unused`` never gets a gradient.
    Its weights are the same on every rank and every time (seed 0; the caller's random state is left alone)."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            self.used, self.unused = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def _check_settings(name: str, settings: Mapping) -> None:
    if not isinstance(settings, Mapping) or not set(settings) <= SETTINGS:
        raise ValueError(f"{name} must be a dict of some of {sorted(SETTINGS)}, got {settings!r}")


def unused_parameter_steps(settings: Mapping, steps: int = 3) -> dict:
    """Train ``WithUnusedLayer`` in DDP built with ``settings`` for ``steps`` steps (or until it raises).

    Returns ``completed`` (steps that ran), ``all_reduces`` (for each completed step, the bytes of each
    all-reduce it started), ``error`` (the first line of the ``RuntimeError`` that stopped it, DDP's or
    any other, or None) and ``unused_grad_is_none`` (after the last completed step; None if none did).
    """
    _check_settings("settings", settings)
    whole("steps", steps)
    model = DistributedDataParallel(WithUnusedLayer(), **settings)
    all_reduces: list[list[int]] = []
    error = None
    try:
        for _ in range(steps):
            model.zero_grad()
            with bytes_sent() as sent:
                model(torch.ones(2, 8)).sum().backward()
            all_reduces.append([nbytes for kind, nbytes in sent.calls if kind == "all_reduce"])
    except RuntimeError as raised:  # DDP's check runs at the next forward, on every rank that skipped the layer
        error = str(raised).splitlines()[0]
    unused_grad = model.module.unused.weight.grad is None if all_reduces else None
    return {"completed": len(all_reduces), "all_reduces": all_reduces, "error": error,
            "unused_grad_is_none": unused_grad}


def occupied_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of memory the tensors' storages cover, each byte counted once however many tensors share it."""
    spans = sorted({(t.untyped_storage().data_ptr(), t.untyped_storage().data_ptr() + t.untyped_storage().nbytes())
                    for t in tensors})
    total, start, end = 0, None, None
    for span_start, span_end in spans:
        if end is None or span_start > end:  # a new, separate span
            total += 0 if end is None else end - start
            start, end = span_start, span_end
        else:
            end = max(end, span_end)
    return total + (0 if end is None else end - start)


def gradient_bytes(wrapper: str, *, gradient_as_bucket_view: bool = False, bucket_cap_mb: float = 5.0) -> dict:
    """After two training steps of the timing model wrapped in ``wrapper`` ("torch DDP" or "MiniDDP"):
    bytes of the ``.grad`` tensors, of the buckets, and of both together (``together`` equals ``grads``
    when every ``.grad`` is a view into a bucket, and ``grads + buckets`` when they are separate copies).
    torch DDP's buckets are seen through a communication hook (``bucket.buffer()``, the tensor it sends)
    that then hands the bucket to torch's ``allreduce_hook``, the averaging DDP does without a hook.
    """
    if wrapper not in ("torch DDP", "MiniDDP"):
        raise ValueError(f"wrapper must be 'torch DDP' or 'MiniDDP', got {wrapper!r}")
    buffers: list[torch.Tensor] = []
    if wrapper == "MiniDDP":
        if gradient_as_bucket_view:
            raise ValueError("gradient_as_bucket_view is torch DDP's setting: MiniDDP has no such argument")
        model = MiniDDP(timing_model(), bucket_cap_mb=bucket_cap_mb)
    else:
        model = DistributedDataParallel(timing_model(), bucket_cap_mb=bucket_cap_mb,
                                        gradient_as_bucket_view=gradient_as_bucket_view)

        def keep_buffer(state, bucket):  # no annotations: DDP checks them, and here they would be strings
            buffers.append(bucket.buffer())
            return default_hooks.allreduce_hook(state, bucket)  # what DDP does without a hook

        model.register_comm_hook(None, keep_buffer)
    X, y = torch.randn(4, 256), torch.zeros(4, dtype=torch.long)
    for _ in range(2):  # the second step runs with DDP's rebuilt buckets
        buffers.clear()
        model.zero_grad()  # set_to_none=True, as optimizers do by default
        F.cross_entropy(model(X), y).backward()
    if wrapper == "MiniDDP":
        buffers = [bucket.flat for bucket in model.buckets]
    grads = [p.grad for p in model.parameters()]
    return {"grads": occupied_bytes(grads), "buckets": occupied_bytes(buffers),
            "together": occupied_bytes(grads + buffers)}


def setting_step_times(settings: Mapping[str, Mapping], *, steps: int = 10, batch_size: int = 64,
                       warmup: int = 2) -> dict[str, dict | list[str]]:
    """Train the timing model in DDP under each named entry of ``settings`` (DDP constructor arguments).

    Returns ``{"settings": {name: result}, "warnings": [...]}``. Each result has ``median`` seconds per SGD
    step on this rank, ``seconds`` (every timed step, round by round: the settings took their steps in
    turn) and ``all_reduces``, the bytes of each all-reduce of one more step, counted after the timing
    (counting waits for each all-reduce). ``warnings``: what torch's C++ side warned of on this rank while
    the settings were timed, each warning once, without its time stamp.
    """
    if not isinstance(settings, Mapping) or not settings:
        raise ValueError(f"settings must be a non-empty dict of name: DDP arguments, got {settings!r}")
    for name, arguments in settings.items():
        _check_settings(f"settings[{name!r}]", arguments)
    whole("steps", steps)
    whole("batch_size", batch_size)
    whole("warmup", warmup, minimum=0)
    X, y = timing_batch(batch_size)
    runs = {}
    for name, arguments in settings.items():
        model = DistributedDataParallel(timing_model(), **arguments)
        runs[name] = (model, torch.optim.SGD(model.parameters(), lr=1e-3), [])

    def step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(X), y).backward()
        optimizer.step()

    with captured_stderr() as caught:  # DDP warns in C++, on standard error, with a time stamp
        for _ in range(warmup + steps):
            for model, optimizer, seconds in runs.values():
                dist.barrier()  # every step starts together: a step's time is not its wait for the slower rank
                start = time.perf_counter()
                step(model, optimizer)
                seconds.append(time.perf_counter() - start)
    results = {}
    for name, (model, optimizer, seconds) in runs.items():
        with bytes_sent() as sent:
            step(model, optimizer)
        results[name] = {"median": statistics.median(seconds[warmup:]), "seconds": seconds[warmup:],
                         "all_reduces": [nbytes for kind, nbytes in sent.calls if kind == "all_reduce"]}
    return {"settings": results, "warnings": caught.warnings()}


def against_default(settings_timed: Mapping[str, Mapping], default: str = "default") -> dict[str, tuple]:
    """For each setting of ``setting_step_times``'s ``settings`` but ``default``: its step time over the
    default's, round by round (the two took their steps in the same round), as (lower quartile, median,
    upper quartile) of the rounds' ratios."""
    reference = settings_timed[default]["seconds"]
    quartiles = {}
    for name, result in settings_timed.items():
        if name != default:
            ratios = sorted(t / d for t, d in zip(result["seconds"], reference, strict=True))
            quartiles[name] = (ratios[len(ratios) // 4], statistics.median(ratios), ratios[-(len(ratios) // 4) - 1])
    return quartiles


def outside(quartiles: Mapping[str, tuple], bounds: tuple[float, float]) -> list[str]:
    """The settings whose median ratio (from ``against_default``) lies outside ``bounds`` (low, high), each as
    "name (1.40x)"; empty where every one lies within."""
    low, high = bounds
    return [f"{name} ({middle:.2f}x)" for name, (_, middle, _) in quartiles.items() if not low <= middle <= high]
