"""Count what this rank sends through ``torch.distributed``: ``with bytes_sent() as sent: ...``.

Used in lesson 04 (the all-reduces written from point-to-point messages), lesson 05 (DDP's communication
hooks through ``data_parallel.compression``), lesson 11 (DDP, ZeRO-1 and FSDP2 through ``beyond.zero_memory``,
ZeRO-1 by hand in ``beyond.zero_one``) and the exercises of lessons 04 and 08.

What is counted, for each call this rank makes inside the block: the bytes of the tensors it hands to the
call as its own contribution, not what the algorithm then puts on the wire (lesson 04 works that out for
a ring):

- all-reduce and reduce: the whole tensor, on every rank;
- all-gather and gather: this rank's input, its shard;
- reduce-scatter and all-to-all: the whole input, the chunks for every rank (its own included);
- broadcast and scatter: on the root, what it hands out (all of it); on the other ranks, 0 bytes;
- send: the tensor. A receive hands nothing in and is not listed; nor is a barrier, which carries no data.

How it sees them: whoever calls, Python (``dist.all_reduce``, a DDP hook) or C++ (DDP's reducer), every
collective reaches its process group through torch's dispatcher as an operator (``c10d::allreduce_``,
``c10d::_allgather_base_``, ``c10d::send``, ...; DTensor's as ``_c10d_functional::all_reduce``, ...). A
``TorchDispatchMode`` sees each one go by, on the thread that entered the block and on the threads autograd
runs its backward on (autograd carries the mode along). Nothing of torch is replaced.

The one path no mode sees: a callback chained on an asynchronous collective (``work.get_future().then``)
runs where the collective completes, on one of gloo's threads, outside the block; PowerSGD sends its second
and third all-reduces from such callbacks. So inside the block each collective is waited for before its
call returns: a callback chained on it then runs at once, on this thread, where the mode sees it. The
results are the same. What counting costs is the overlap of communication with computation; and a program
whose ranks keep a collective pending while they exchange point-to-point messages in different orders
would wait forever (nothing in the course does). Sends stay asynchronous: ranks that all send before they
receive need that. Not seen at all: calls from any other thread (one you start yourself, say), and
torch.compile's batched point-to-point operator ``_c10d_functional::batch_p2p_ops``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _resolve_process_group
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["bytes_sent", "Sent"]

# c10d::<operator> -> (kind, the argument that holds what this rank hands in). Operators that take their
# outputs first take the inputs second.
_C10D = {
    "allreduce_": ("all_reduce", 0), "allreduce_coalesced_": ("all_reduce", 0), "reduce_": ("reduce", 0),
    "allgather_": ("all_gather", 1), "_allgather_base_": ("all_gather", 1), "allgather_coalesced_": ("all_gather", 1),
    "allgather_into_tensor_coalesced_": ("all_gather", 1), "gather_": ("gather", 1),
    "reduce_scatter_": ("reduce_scatter", 1), "_reduce_scatter_base_": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1), "alltoall_": ("all_to_all", 1),
    "alltoall_base_": ("all_to_all", 1), "broadcast_": ("broadcast", 0), "scatter_": ("scatter", 1),
    "send": ("send", 0),
}
# _c10d_functional::<operator> -> kind; each takes what this rank hands in first.
_FUNCTIONAL = {
    "all_reduce": "all_reduce", "all_reduce_": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "all_reduce_coalesced_": "all_reduce", "all_gather_into_tensor": "all_gather",
    "all_gather_into_tensor_out": "all_gather", "all_gather_into_tensor_coalesced": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter", "reduce_scatter_tensor_out": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "broadcast_": "broadcast", "isend": "send",
}


@dataclass
class Sent:
    """What this rank sent inside one ``with bytes_sent() as sent:`` block."""

    calls: list[tuple[str, int]] = field(default_factory=list)
    """One (kind, bytes) per call, in the order they were made: ("all_reduce", 6928), ("send", 400), ..."""

    @property
    def bytes(self) -> int:
        """Every byte counted in the block."""
        return sum(nbytes for _, nbytes in self.calls)

    def by_kind(self) -> dict[str, int]:
        """Bytes per kind of call, kinds in the order first called: {"all_reduce": 6928, "broadcast": 4096}."""
        totals: dict[str, int] = {}
        for kind, nbytes in self.calls:
            totals[kind] = totals.get(kind, 0) + nbytes
        return totals


@contextmanager
def bytes_sent() -> Iterator[Sent]:
    """Inside the block, count what this rank hands to every collective and send (see the module docstring
    for what counts, per kind). Blocks may nest: each counts everything inside it."""
    sent = Sent()
    with _Counting(sent):
        yield sent


class _Counting(TorchDispatchMode):
    def __init__(self, sent: Sent) -> None:
        super().__init__()
        self.sent = sent

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(issubclass(t, DTensor) for t in types):
            # DTensor first turns the call into operators on its local tensors, collectives among them, which
            # then come back here (called from here, they would run with this mode switched off).
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        counted = _handed_in(func, args)
        if counted is not None:
            self.sent.calls.append(counted)
            if func.namespace == "c10d" and counted[0] != "send":
                # done before the caller can chain a callback on it, which then runs here, counted (see above)
                (out[-1] if isinstance(out, tuple) else out).wait()
        return out


def _handed_in(func: torch._ops.OpOverload, args: tuple) -> tuple[str, int] | None:
    """(kind, bytes this rank hands in) for a collective or a send; None for any other operator."""
    opname = func.overloadpacket.__name__
    if func.namespace == "c10d" and opname in _C10D:
        kind, position = _C10D[opname]
    elif func.namespace == "_c10d_functional" and opname in _FUNCTIONAL:
        kind, position = _FUNCTIONAL[opname], 0
    else:
        return None
    if kind == "broadcast":  # the root's tensor goes out; the other ranks only receive into theirs
        group, root = (args[1], args[2]) if func.namespace == "c10d" else (args[2], args[1])
        if _rank_in(group) != root:
            return kind, 0
    return kind, _nbytes(args[position])


def _rank_in(group: object) -> int:
    """This rank's number in the group an operator names: a boxed process group, or a group's name (what
    functional collectives pass; torch has no public way from the name to the group)."""
    return (_resolve_process_group(group) if isinstance(group, str) else dist.ProcessGroup.unbox(group)).rank()


def _nbytes(tensors: torch.Tensor | list) -> int:
    """Bytes of a tensor, or of every tensor in a (nested) list of them."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_nbytes(t) for t in tensors)
