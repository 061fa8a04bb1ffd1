"""All-reduce from point-to-point messages: the ring (Thakur, Rabenseifner & Gropp 2005).

Split the tensor into p chunks. In p - 1 steps of **reduce-scatter**, every rank sends one chunk to
its right neighbour and adds the chunk arriving from its left one; afterwards rank r holds the full
sum of chunk r + 1. In p - 1 steps of **all-gather** the finished chunks travel once more around the
ring, copied instead of added. Every rank sends 2(p - 1)/p of the tensor, whatever p: the traffic
per rank stays flat as ranks are added, which is why NCCL and gloo use rings.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["ring_all_reduce"]


def ring_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks of ``group`` (default: the whole world) in place and return it.

    Uses ``isend``/``irecv`` only, so any backend that has them works (gloo, nccl for GPU tensors).
    Any shape and size, fewer elements than ranks included (empty chunks are not sent); with one rank
    the tensor comes back unchanged. Equal to ``dist.all_reduce`` up to float rounding: the sums are
    added in another order.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("ring_all_reduce needs a process group: run it inside dpedu.launch or torchrun")
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1 or tensor.numel() == 0:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.flatten()  # flatten copies
    chunks = list(flat.tensor_split(world))  # views into flat
    right, left = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    for step in range(world - 1):  # reduce-scatter: add what arrives
        sending, arriving = (rank - step) % world, (rank - step - 1) % world
        incoming = torch.empty_like(chunks[arriving])
        _exchange(chunks[sending], right, incoming, left, group)
        chunks[arriving] += incoming
    for step in range(world - 1):  # all-gather: the finished chunks go round once more, copied
        sending, arriving = (rank - step + 1) % world, (rank - step) % world
        _exchange(chunks[sending], right, chunks[arriving], left, group)
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _exchange(send: torch.Tensor, to: int, receive: torch.Tensor, source: int, group) -> None:
    """Send to the right and receive from the left at the same time: with blocking calls, every rank
    would send first and wait for a receiver that is itself sending (lesson 04 shows the deadlock)."""
    requests = []
    if send.numel():
        requests.append(dist.isend(send, to, group=group))
    if receive.numel():
        requests.append(dist.irecv(receive, source, group=group))
    for request in requests:
        request.wait()


def _global(group: dist.ProcessGroup | None, rank: int) -> int:
    """isend/irecv take ranks of the whole world; translate one of ``group``'s."""
    return rank if group is None else dist.get_global_rank(group, rank)
