"""Sending fewer bytes per step: DDP communication hooks (lesson 04).

A DDP communication hook gets each gradient bucket and decides what to send. torch ships
``fp16_compress_hook`` (send the bucket in float16: half the bytes) and ``powerSGD_hook`` (send a low-rank
approximation of each gradient matrix, with error feedback; Vogels et al. 2019, arXiv:1905.13727), both of
which run on gloo. Its ``bf16_compress_hook`` is accepted by DDP only from a torch *built* with CUDA 11+ and
NCCL 2.10+ (or XPU and XCCL): DDP checks the hook's *name* against how torch was built, not the group's
backend nor whether a GPU is present. So the CPU-only build (and macOS's) refuses it on a gloo group,
although gloo all-reduces bfloat16 fine, while PyPI's default Linux build accepts it there even without a
GPU. ``bf16_allreduce_hook`` below is the same idea in ten lines, under a name DDP does not check, on
every build.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import torch
import torch.distributed as dist

__all__ = ["bf16_allreduce_hook", "payload_bytes", "Payload"]


def bf16_allreduce_hook(process_group, bucket):  # no annotations: DDP checks them, and here they would be strings
    """All-reduce the bucket in bfloat16 (half of float32's bytes, float32's range), then write the average
    back into the bucket in its own dtype."""
    group = process_group if process_group is not None else dist.group.WORLD
    compressed = bucket.buffer().to(torch.bfloat16).div_(group.size())
    future = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(future):
        return bucket.buffer().copy_(future.value()[0])

    return future.then(decompress)


class Payload:
    """The bytes of every tensor handed to ``dist.all_reduce``, in order, and where each call of a hook
    wrapped by ``counted`` began: what one DDP bucket cost, its follow-up all-reduces included (PowerSGD
    sends Q only once P has arrived, from a callback that runs after the hook has returned)."""

    def __init__(self):
        self.sizes: list[int] = []
        self.call_starts: list[int] = []

    def counted(self, hook):
        def counting_hook(state, bucket):  # no annotations: DDP checks them, and here they would be strings
            self.call_starts.append(len(self.sizes))
            return hook(state, bucket)
        return counting_hook

    def per_call(self) -> list[int]:
        """Bytes all-reduced for each call of the counted hook (DDP calls it once per bucket and step)."""
        bounds = [*self.call_starts, len(self.sizes)]
        return [sum(self.sizes[start:end]) for start, end in zip(bounds, bounds[1:], strict=False)]


@contextmanager
def payload_bytes() -> Iterator[Payload]:
    """Inside the block, record the bytes of every tensor this process hands to ``dist.all_reduce``
    (the hooks' payload; how many bytes then cross the wire is the all-reduce's business: a ring sends
    2(p - 1)/p of it per rank)."""
    payload = Payload()
    real_all_reduce = dist.all_reduce

    def counting(tensor, *args, **kwargs):
        payload.sizes.append(tensor.numel() * tensor.element_size())
        return real_all_reduce(tensor, *args, **kwargs)

    with mock.patch.object(dist, "all_reduce", counting):
        yield payload
