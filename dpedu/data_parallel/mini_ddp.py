"""DistributedDataParallel from scratch, in two versions (lesson 05; Li et al. 2020, arXiv:2006.15704).

``average_gradients`` is the first idea: after ``loss.backward()``, all-reduce every parameter's
gradient, one message each, while nothing else happens. ``MiniDDP`` is what torch DDP does instead:

- at construction, every rank takes rank 0's parameters and buffers (one broadcast each);
- the gradients live in a few flat **buckets**, formed once, here: parameters in reverse registration
  order (roughly the order backward produces them), a new bucket whenever the next one would take the
  bucket past ``bucket_cap_mb`` (a bucket holds at most the cap, unless one parameter alone is larger).
  torch DDP forms its buckets differently (torch 2.13, ``find_unused_parameters=False``; lesson 05
  measures it): its first backward all-reduces every gradient as one bucket and records the order in
  which they arrived; before the second forward it rebuilds the buckets in that order, closing a bucket
  once it *reaches* the cap (so it can exceed the cap by up to one tensor), the first one once it
  reaches 1 MiB (``dist._DEFAULT_FIRST_BUCKET_BYTES``) if ``bucket_cap_mb`` is left at its default;
- each parameter's ``.grad`` is a view into its bucket, so nothing is copied out after the all-reduce
  (a fresh ``.grad``, after ``zero_grad()``'s default ``set_to_none=True``, is copied in once, as
  torch DDP copies every gradient into its buckets);
- a hook on every parameter (``register_post_accumulate_grad_hook``) counts the gradients that are
  ready; a bucket whose gradients are all ready starts its all-reduce **asynchronously**, and backward
  goes on computing the earlier layers' gradients while the bucket travels (``overlap=False`` holds
  every all-reduce back to the end of backward instead, to measure what the overlap buys);
- buckets start in index order on every rank, since collectives must be called in the same order
  everywhere; a callback queued on the autograd engine waits for all of them before ``backward()``
  returns, so the averaged gradients are there with no extra call, exactly as with torch DDP.
"""

from __future__ import annotations

import itertools
import math
import time

import torch
import torch.distributed as dist
from torch import nn

__all__ = ["average_gradients", "MiniDDP"]


def average_gradients(module: nn.Module) -> None:
    """Replace every parameter's ``.grad`` by its average over the ranks: one blocking all-reduce each."""
    world = dist.get_world_size()
    for parameter in module.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= world


class _Bucket:
    """Parameters whose gradients are views into one flat tensor, all-reduced as one message."""

    def __init__(self, parameters: list[nn.Parameter]):
        self.parameters = parameters
        self.flat = torch.zeros(sum(p.numel() for p in parameters), dtype=parameters[0].dtype,
                                device=parameters[0].device)
        offsets = [0, *itertools.accumulate(p.numel() for p in parameters)]
        self.views = [self.flat[start:end].view_as(p)
                      for p, start, end in zip(parameters, offsets, offsets[1:], strict=False)]
        self.ready: set[int] = set()  # indices into self.parameters, this backward
        self.done: torch.futures.Future | None = None  # the all-reduce in flight, and its time stamp
        self.times: dict[str, float] = {}  # "ready", "launched", "done": perf_counter seconds, last backward


class MiniDDP(nn.Module):
    """Wraps ``module``; after ``loss.backward()`` every gradient holds its average over the ranks.

    Parameters with ``requires_grad=False`` are left out. A parameter that got no gradient on this rank
    in a backward adds its ``.grad`` as it is (zero if None) to the average; unlike torch DDP with
    ``find_unused_parameters=True``, one unused on every rank ends with a zero ``.grad``, not None.
    ``bucket_times`` holds, per bucket, when its gradients were all ready, when its all-reduce started
    and when it ended in the last backward (perf_counter seconds), for the lesson's timeline.
    """

    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0, *, overlap: bool = True):
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        if (isinstance(bucket_cap_mb, bool) or not isinstance(bucket_cap_mb, (int, float))
                or not math.isfinite(bucket_cap_mb) or bucket_cap_mb <= 0):
            raise ValueError(f"bucket_cap_mb must be a finite number > 0, got {bucket_cap_mb!r}")
        if not isinstance(overlap, bool):
            raise TypeError(f"overlap must be True or False, got {overlap!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("MiniDDP needs a process group: create it inside dpedu.launch or torchrun")
        if getattr(module, "_wrapped_by_mini_ddp", False):  # its hooks would average every gradient twice
            raise ValueError("module is already wrapped by a MiniDDP: wrap it once")
        super().__init__()
        module._wrapped_by_mini_ddp = True
        self.module, self.overlap, self.world_size = module, overlap, dist.get_world_size()
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor, src=0)
        self.buckets = _buckets([p for p in module.parameters() if p.requires_grad], bucket_cap_mb * 2**20)
        self._next_bucket, self._finishing = 0, False
        for index, bucket in enumerate(self.buckets):
            for position, parameter in enumerate(bucket.parameters):
                parameter.register_post_accumulate_grad_hook(
                    lambda parameter, index=index, position=position: self._gradient_ready(index, position))

    def forward(self, *args, **kwargs):
        if self._finishing:  # the last backward never reached its end (it raised): start clean
            self._reset()
        return self.module(*args, **kwargs)

    def _reset(self) -> None:
        for bucket in self.buckets:
            if bucket.done is not None and not bucket.done.done():
                bucket.done.wait()  # an all-reduce still writing into the bucket: let it finish first
            bucket.done, bucket.ready = None, set()
        self._next_bucket, self._finishing = 0, False

    @property
    def bucket_times(self) -> list[dict[str, float]]:
        """Per bucket, in the last backward: "ready", "launched", "done" (perf_counter seconds)."""
        return [dict(bucket.times) for bucket in self.buckets]

    def _gradient_ready(self, index: int, position: int) -> None:
        if not self._finishing:  # first gradient of this backward: have the engine call _finish at its end
            self._finishing = True
            for bucket in self.buckets:
                bucket.times = {}
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        bucket = self.buckets[index]
        parameter, view = bucket.parameters[position], bucket.views[position]
        if parameter.grad is not view:  # a fresh .grad (after zero_grad(set_to_none=True)): move it in
            view.copy_(parameter.grad)
            parameter.grad = view
        bucket.ready.add(position)
        if len(bucket.ready) == len(bucket.parameters):
            bucket.times["ready"] = time.perf_counter()
            if self.overlap:
                self._launch_ready_buckets()

    def _launch_ready_buckets(self) -> None:
        """Start the all-reduce of every ready bucket, in index order, and stop at the first one not ready."""
        while (self._next_bucket < len(self.buckets)
               and len(self.buckets[self._next_bucket].ready) == len(self.buckets[self._next_bucket].parameters)):
            self._launch(self.buckets[self._next_bucket])
            self._next_bucket += 1

    def _launch(self, bucket: _Bucket) -> None:
        bucket.flat.div_(self.world_size)  # average = sum of (gradient / world size)
        bucket.times["launched"] = time.perf_counter()
        work = dist.all_reduce(bucket.flat, async_op=True)
        bucket.done = work.get_future().then(lambda _: bucket.times.__setitem__("done", time.perf_counter()))

    def _finish(self) -> None:
        """End of backward: complete the buckets some gradient never came to, start what is left, wait."""
        for bucket in self.buckets[self._next_bucket:]:
            for position, (parameter, view) in enumerate(zip(bucket.parameters, bucket.views, strict=True)):
                if position not in bucket.ready:  # no gradient this backward: what .grad holds, or zero
                    if parameter.grad is None:
                        view.zero_()
                    elif parameter.grad is not view:
                        view.copy_(parameter.grad)
                    parameter.grad = view
                    bucket.ready.add(position)
            bucket.times.setdefault("ready", time.perf_counter())
        self._launch_ready_buckets()
        for bucket in self.buckets:
            bucket.done.wait()
        self._reset()


def _buckets(parameters: list[nn.Parameter], cap_bytes: float) -> list[_Bucket]:
    """Group the parameters, last registered first, into buckets of at most ``cap_bytes`` (a parameter
    larger than the cap gets a bucket of its own); a bucket holds one dtype and device."""
    groups: list[list[nn.Parameter]] = []
    size = 0.0
    for parameter in reversed(parameters):
        nbytes = parameter.numel() * parameter.element_size()
        if (not groups or size + nbytes > cap_bytes or parameter.dtype != groups[-1][0].dtype
                or parameter.device != groups[-1][0].device):
            groups.append([])
            size = 0.0
        groups[-1].append(parameter)
        size += nbytes
    return [_Bucket(group) for group in groups]
