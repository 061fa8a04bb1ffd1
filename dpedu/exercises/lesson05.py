"""Checks for lesson 05's exercises: DDP's buckets, and the bytes its communication hooks send."""

from __future__ import annotations

from collections.abc import Sequence

from dpedu._validate import real, whole
from dpedu.exercises import close, number, verdict


def _bucket_counts(sizes: Sequence[int], cap_bytes: float) -> tuple[int, int]:
    """All-reduces per step under MiniDDP's rule (a new bucket before one would pass the cap) and under torch
    DDP's once it has rebuilt its buckets with the cap set (a new bucket once the last has reached the cap)."""
    mini, filled = 0, None
    for size in sizes:
        if filled is None or filled + size > cap_bytes:
            mini, filled = mini + 1, 0
        filled += size
    torch_ddp, filled = 1, 0
    for size in sizes:
        if filled >= cap_bytes:
            torch_ddp, filled = torch_ddp + 1, 0
        filled += size
    return mini, torch_ddp


def buckets_per_step(sizes: Sequence[int], cap_mb: float, mini: int, torch_ddp: int) -> bool:
    """Gradients of ``sizes`` bytes arrive in this order in backward; with ``bucket_cap_mb=cap_mb``, how many
    all-reduces does ``MiniDDP`` send per step (``mini``), and torch DDP from its second step on (``torch_ddp``)?"""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not sizes:
        raise ValueError(f"sizes must be a non-empty list of gradient sizes in bytes, got {sizes!r}")
    for size in sizes:
        whole("sizes", size)
    real("cap_mb", cap_mb, above=0)
    mini = number(mini)
    torch_ddp = number(torch_ddp)
    right_mini, right_torch = _bucket_counts(sizes, cap_mb * 2**20)
    hints = []
    if mini != right_mini:
        hints.append("MiniDDP opens a new bucket before a gradient would take the current one past the cap")
    if torch_ddp != right_torch:
        hints.append("torch DDP adds gradients until a bucket has reached the cap, then opens the next, so a bucket "
                     "can pass the cap by one tensor")
    return verdict(not hints, "; ".join(hints))


def compressed_ring_bytes(bucket_bytes: int, ranks: int, answer: float) -> bool:
    """Bytes each rank sends when ``fp16_compress_hook`` has a ring of ``ranks`` all-reduce a float32 bucket of
    ``bucket_bytes`` (1 %)?"""
    whole("bucket_bytes", bucket_bytes)
    whole("ranks", ranks, minimum=2)
    answer = number(answer)
    right = 2 * (ranks - 1) / ranks * bucket_bytes / 2
    return verdict(close(answer, right, 0.01),
                   "the hook all-reduces the bucket in float16, half its bytes, and a ring sends 2(p - 1)/p of "
                   "what it all-reduces from every rank")


def powersgd_fewer(rows: int, columns: int, rank: int, answer: float) -> bool:
    """How many times fewer numbers does rank-``rank`` PowerSGD send for one ``rows`` x ``columns`` gradient
    matrix than the matrix itself (1 %)?"""
    whole("rows", rows)
    whole("columns", columns)
    whole("rank", rank)
    answer = number(answer)
    right = rows * columns / (rank * (rows + columns))
    return verdict(close(answer, right, 0.01),
                   "the matrix is rows x columns numbers; P is rows x rank and Q is columns x rank")
