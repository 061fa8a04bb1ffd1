"""Sending fewer bytes per step: DDP communication hooks (lesson 05).

A DDP communication hook gets each gradient bucket and decides what to send. torch ships
``fp16_compress_hook`` (send the bucket in float16: half the bytes) and ``powerSGD_hook`` (send a low-rank
approximation of each gradient matrix, with error feedback; Vogels et al. 2019, arXiv:1905.13727), both of
which run on gloo. Its ``bf16_compress_hook`` is accepted by DDP only from a torch *built* with CUDA 11+ and
NCCL 2.10+ (or XPU and XCCL): DDP checks the hook's *name* against how torch was built, not the group's
backend nor whether a GPU is present. So the CPU-only build (and macOS's) refuses it on a gloo group,
although gloo all-reduces bfloat16 fine, while PyPI's default Linux build accepts it there even without a
GPU. ``bf16_allreduce_hook`` below is the same idea in ten lines, under a name DDP does not check, on
every build.

``payload_bytes`` counts what each hook sends per bucket, with ``dpedu.runtime.traffic.bytes_sent``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from dpedu.runtime.traffic import Sent, bytes_sent

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
    """What this rank sent (``sent``, from ``bytes_sent``) and where each call of a hook wrapped by ``counted``
    began: what one DDP bucket cost, follow-up collectives included (PowerSGD sends P, then Q, from callbacks
    chained on its first all-reduce)."""

    def __init__(self, sent: Sent) -> None:
        self.sent = sent
        self.call_starts: list[int] = []

    def counted(self, hook):
        def counting_hook(state, bucket):  # no annotations: DDP checks them, and here they would be strings
            self.call_starts.append(len(self.sent.calls))
            return hook(state, bucket)
        return counting_hook

    def per_call(self) -> list[int]:
        """Bytes sent from each call of the counted hook to the next (DDP calls it once per bucket and step),
        the last one's up to the end of the block. DDP's own calls in between count too: in its second
        forward, rank 0 broadcasts the bucket order it settled on."""
        return [sum(sizes) for sizes in self.per_call_messages()]

    def per_call_messages(self) -> list[list[int]]:
        """``per_call`` message by message: for each call of the counted hook, the bytes of each collective
        it led to, in the order they were made (PowerSGD: the uncompressed tensors, then P, then Q)."""
        bounds = [*self.call_starts, len(self.sent.calls)]
        return [[nbytes for _, nbytes in self.sent.calls[start:end]] for start, end in zip(bounds, bounds[1:],
                                                                                          strict=False)]


@contextmanager
def payload_bytes() -> Iterator[Payload]:
    """Inside the block, count what this rank sends (``bytes_sent``: for an all-reduce, the bytes of the
    tensor it hands in; how many bytes then cross the wire is the all-reduce's business: a ring sends
    2(p - 1)/p of it per rank), to be split by hook call with ``Payload.counted``."""
    with bytes_sent() as sent:
        yield Payload(sent)
