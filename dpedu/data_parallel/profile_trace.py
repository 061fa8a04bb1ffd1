"""torch DDP's overlap seen by ``torch.profiler`` (lesson 05, "A profiler's view of DDP's overlap").

``profile_ddp_steps`` runs inside every rank of a ``dpedu.launch``: it trains lesson 05's timing model
wrapped in torch DDP for a few steps, profiles each step on the CPU, and returns, per step, when each
``gloo:all_reduce`` ran and when each backward op (``autograd::engine::evaluate_function: ...``) ran.
It also writes the Chrome trace of the last step, to be opened in chrome://tracing or
https://ui.perfetto.dev.

``reducer_copies`` counts, the same way, the copies torch's reducer makes between the ``.grad`` tensors
and the buckets, which ``gradient_as_bucket_view`` saves (lesson 05, "DDP's settings").
"""

from __future__ import annotations

import os
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile

from dpedu._validate import real, whole
from dpedu.data_parallel.ddp_timing import timing_batch, timing_model
from dpedu.runtime.stderr import captured_stderr

ALL_REDUCE = "gloo:all_reduce"
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
# torch's reducer names these steps in the profiler: the copy of a gradient into its bucket (dividing it by
# the world size on the way), the copy of an averaged bucket back into a .grad, and a division in place.
REDUCER_EVENTS = {"into the bucket": "torch::distributed::reducer::mul_out",
                  "back into .grad": "torch.distributed.ddp.reducer::copy_bucket_to_grad",
                  "divided in place": "aten::div_"}


def profile_ddp_steps(trace_path: str | os.PathLike[str], *, steps: int = 3, bucket_cap_mb: float = 5.0,
                      batch_size: int = 64) -> list[dict[str, list[tuple[float, float]]]]:
    """Profile ``steps`` torch DDP training steps of ``timing_model()`` with ``bucket_cap_mb`` on this rank.

    Returns one dict per step, in order, with ``"all_reduce"`` and ``"backward"``: the (start, end)
    intervals in milliseconds of that step's ``gloo:all_reduce`` events and of its backward ops, sorted
    by start, measured from the step's earliest profiled event (so every start is >= 0 and every end
    >= its start). The intervals come from this rank's profiler only; nothing in them is compared
    across ranks. Rank 0 (only) writes the last step's Chrome trace to ``trace_path``.
    """
    if not isinstance(trace_path, (str, os.PathLike)):
        raise TypeError(f"trace_path must be a path, got {type(trace_path).__name__}")
    whole("steps", steps)
    real("bucket_cap_mb", bucket_cap_mb, above=0)
    whole("batch_size", batch_size)
    X, y = timing_batch(batch_size)
    model = DistributedDataParallel(timing_model(), bucket_cap_mb=bucket_cap_mb)
    timelines = []
    for step in range(steps):
        model.zero_grad()
        # the profiler's C++ side logs every start and stop on file descriptor 2: kept out of sight
        with captured_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            F.cross_entropy(model(X), y).backward()
        events = prof.events()
        origin = min(event.time_range.start for event in events)

        def intervals(keep, events=events, origin=origin) -> list[tuple[float, float]]:
            return sorted(((event.time_range.start - origin) / 1e3, (event.time_range.end - origin) / 1e3)
                          for event in events if keep(event.name))

        timelines.append({"all_reduce": intervals(lambda name: name == ALL_REDUCE),
                          "backward": intervals(lambda name: name.startswith(BACKWARD_PREFIX))})
        if step == steps - 1 and dist.get_rank() == 0:
            prof.export_chrome_trace(os.fspath(trace_path))
    return timelines


def reducer_copies(*, gradient_as_bucket_view: bool, set_to_none: bool = True, steps: int = 3) -> dict[str, int]:
    """On this rank, train ``timing_model()`` in torch DDP for ``steps`` steps, zeroing gradients with
    ``zero_grad(set_to_none=set_to_none)``, and count in the last step's forward and backward how often
    each of ``REDUCER_EVENTS`` happened (``"parameters"``: how many the model has). The counts are exact:
    they do not depend on timing."""
    if not isinstance(gradient_as_bucket_view, bool) or not isinstance(set_to_none, bool):
        raise TypeError(f"gradient_as_bucket_view and set_to_none must be True or False, got "
                        f"{gradient_as_bucket_view!r} and {set_to_none!r}")
    whole("steps", steps)
    X, y = timing_batch(8)
    model = DistributedDataParallel(timing_model(), gradient_as_bucket_view=gradient_as_bucket_view)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=set_to_none)
        with captured_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            F.cross_entropy(model(X), y).backward()
        optimizer.step()
    names = Counter(event.name for event in prof.events())
    return {"parameters": len(list(model.parameters())),
            **{what: names[event] for what, event in REDUCER_EVENTS.items()}}
