"""All-reduce from point-to-point messages, three ways, and the bytes each way sends per rank.

Every rank holds a tensor of n elements; all-reduce leaves the sum on every rank. With p ranks:

- ``naive_all_reduce``: everyone sends to rank 0, which adds and sends the sum back to everyone. Rank 0
  sends (p - 1)·n: its link carries more with every rank added (a parameter server on one node).
- ``sharded_server_all_reduce``: rank s serves the s-th of p chunks: it receives that chunk from
  everyone, adds, and sends the sum back. Every rank sends 2(p - 1)/p·n, at once, to p - 1 peers.
- ``ring_all_reduce`` (Patarasuk & Yuan 2009): in p - 1 steps of **reduce-scatter** every
  rank sends one chunk to its right neighbour and adds the chunk arriving from its left one; rank r then
  holds the full sum of chunk r + 1. In p - 1 steps of **all-gather** the finished chunks travel once
  more around the ring, copied instead of added. Every rank sends 2(p - 1)/p·n, whatever p, and only to
  its neighbour: the traffic per rank stays flat as ranks are added, which is why gloo and NCCL (beside
  its trees) use rings.

``dpedu.runtime.traffic.bytes_sent()`` counts what each rank sends (lesson 04 checks these formulas with it).

Used in lesson 04.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["ring_all_reduce", "naive_all_reduce", "sharded_server_all_reduce"]


def _isend(tensor: torch.Tensor, to: int, group: dist.ProcessGroup | None) -> dist.Work:
    return dist.isend(tensor, _global(group, to), group=group)


def _irecv(tensor: torch.Tensor, source: int, group: dist.ProcessGroup | None) -> dist.Work:
    return dist.irecv(tensor, _global(group, source), group=group)


def _wait(requests: list[dist.Work]) -> None:
    for request in requests:
        request.wait()


def _flat(tensor: object, name: str = "tensor") -> torch.Tensor:
    """``tensor`` as a 1-D view (a copy if it is not contiguous: write it back with ``_write_back``)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("these all-reduces need a process group: run them inside dpedu.launch or torchrun")
    return tensor.view(-1) if tensor.is_contiguous() else tensor.flatten()


def _world_and_rank(group: dist.ProcessGroup | None) -> tuple[int, int]:
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world < 0:  # torch answers -1 on a rank outside the group
        raise ValueError(f"this rank (global rank {dist.get_rank()}) is not in group: call it on its ranks only")
    return world, rank


def _write_back(flat: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    if flat.data_ptr() != tensor.data_ptr():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def naive_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` in place over the ranks through rank 0: all send to it, it sends the sum to all."""
    flat = _flat(tensor)
    world, rank = _world_and_rank(group)
    if world == 1 or flat.numel() == 0:
        return tensor
    if rank == 0:
        arriving = [torch.empty_like(flat) for _ in range(world - 1)]
        _wait([_irecv(buffer, source, group) for source, buffer in enumerate(arriving, start=1)])
        for buffer in arriving:
            flat += buffer
        _wait([_isend(flat, to, group) for to in range(1, world)])
    else:
        _isend(flat, 0, group).wait()
        _irecv(flat, 0, group).wait()
    return _write_back(flat, tensor)


def sharded_server_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` in place over the ranks; rank s adds up the s-th chunk and sends it to all."""
    flat = _flat(tensor)
    world, rank = _world_and_rank(group)
    if world == 1 or flat.numel() == 0:
        return tensor
    chunks = flat.tensor_split(world)
    mine, others = chunks[rank], [r for r in range(world) if r != rank]
    arriving = {source: torch.empty_like(mine) for source in others}
    if mine.numel():  # push: chunk s to its server s; receive my chunk from everyone
        _wait([_irecv(arriving[source], source, group) for source in others]
              + [_isend(chunks[to], to, group) for to in others if chunks[to].numel()])
        for source in others:
            mine += arriving[source]
    else:
        _wait([_isend(chunks[to], to, group) for to in others if chunks[to].numel()])
    # pull: my finished chunk to everyone; every other finished chunk from its server
    _wait([_isend(mine, to, group) for to in others if mine.numel()]
          + [_irecv(chunks[source], source, group) for source in others if chunks[source].numel()])
    return _write_back(flat, tensor)


def ring_all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks of ``group`` (default: the whole world) in place and return it.

    Uses ``isend``/``irecv`` only, so any backend that has them can run it (tested here with gloo).
    Any shape and size, fewer elements than ranks included (empty chunks are not sent); with one rank
    the tensor comes back unchanged. Equal to ``dist.all_reduce`` up to float rounding: the sums are
    added in another order.
    """
    flat = _flat(tensor)
    world, rank = _world_and_rank(group)
    if world == 1 or flat.numel() == 0:
        return tensor
    chunks = flat.tensor_split(world)  # views into flat; chunk 0 is the longest
    right, left = (rank + 1) % world, (rank - 1) % world
    incoming = _receive_buffer(chunks[0])
    for step in range(world - 1):  # reduce-scatter: add what arrives
        sending, arriving = chunks[(rank - step) % world], chunks[(rank - step - 1) % world]
        _exchange(sending, right, incoming[:arriving.numel()], left, group)
        arriving += incoming[:arriving.numel()]
    for step in range(world - 1):  # all-gather: the finished chunks go round once more, copied
        sending, arriving = chunks[(rank - step + 1) % world], chunks[(rank - step) % world]
        _exchange(sending, right, arriving, left, group)
    return _write_back(flat, tensor)


def _exchange(send: torch.Tensor, to: int, receive: torch.Tensor, source: int, group) -> None:
    """Send to the right and receive from the left at the same time: with blocking calls, every rank
    would send first and wait for a receiver that is itself sending (lesson 04 shows the deadlock)."""
    _wait(([_irecv(receive, source, group)] if receive.numel() else [])
          + ([_isend(send, to, group)] if send.numel() else []))


_kept: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def _receive_buffer(like: torch.Tensor) -> torch.Tensor:
    """Room for one arriving chunk, kept from call to call. A new buffer of many MB is fresh memory
    from the OS each time, and the first write to each 4 KiB page of it faults: 8,192 faults for the
    32 MiB chunk of a 64 MiB all-reduce on 2 ranks, about a quarter of its time (measured in
    benchmarks/collectives.py)."""
    key = (like.dtype, like.device)
    if key not in _kept or _kept[key].numel() < like.numel():
        _kept[key] = torch.empty(like.numel(), dtype=like.dtype, device=like.device)
    return _kept[key][:like.numel()]


def _global(group: dist.ProcessGroup | None, rank: int) -> int:
    """isend/irecv take ranks of the whole world; translate one of ``group``'s."""
    return rank if group is None else dist.get_global_rank(group, rank)
