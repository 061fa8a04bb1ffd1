"""Four ways to average gradients, timed on the same model (lessons 05a and 05b, ``benchmarks/collectives.py``).

``step_times`` runs inside every rank of a ``dpedu.launch``: it builds one model per version and
trains them in turn, one step each round, so that a busy moment of a shared machine slows every
version alike. It returns each version's median seconds per step and the measured timeline of its
last step (when backward ran, when each all-reduce started and ended) for the lesson's figure.
``all_reduce_sizes`` says what each version all-reduces in each step, counted where torch hands the
tensors to the process group: the one measurement that compares torch DDP's buckets with MiniDDP's.
``close_once_reached`` is torch DDP's rule for the buckets it rebuilds after its first step, which those counts
must match (lesson 05a shows it; 05b applies it to DDP's settings and to ``torch.compile``).

The lesson's checks, shared with the tests that make each of them fail on a broken subject:
``agree_within`` (the versions' tensors equal within a tolerance), ``speed_claims`` (the per-round ratios
against ``SPEED_CLAIMS``'s two tiers of bounds) and ``during_backward`` (buckets launched during backward).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from dpedu._validate import real, whole
from dpedu.data_parallel.mini_ddp import MiniDDP, average_gradients
from dpedu.runtime.traffic import bytes_sent

VERSIONS = ("per parameter", "buckets, no overlap", "buckets + overlap", "torch DDP")
# (claim, version, reference, "below" or "above" the bound, the bound asserted on any machine, the bound
# asserted where two cores were free); each on the median of the per-round ratios version / reference
SPEED_CLAIMS = (
    ("MiniDDP with buckets and overlap keeps up with torch DDP", "buckets + overlap", "torch DDP", "below", 2.0, 1.25),
    ("per-parameter all-reduces take longer than buckets", "per parameter", "buckets, no overlap", "above", 0.8, 1.0),
)


def timing_model(seed: int = 0) -> nn.Sequential:
    """An MLP of 4.5 M parameters (18 MB of float32 gradients) in six linear layers."""
    torch.manual_seed(seed)
    widths = (256, 1024, 1024, 1024, 1024, 1024)
    layers: list[nn.Module] = []
    for width_in, width_out in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(width_in, width_out), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(widths[-1], 10))


def timing_batch(batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs and labels this rank trains the timing model on: its own, drawn from a seed of its rank."""
    generator = torch.Generator().manual_seed(dist.get_rank())
    return torch.randn(batch_size, 256, generator=generator), torch.randint(0, 10, (batch_size,), generator=generator)


def _check_versions(versions: Sequence[str]) -> None:
    if isinstance(versions, str) or not set(versions) <= set(VERSIONS) or not versions:
        raise ValueError(f"versions must be a list of some of {VERSIONS}, got {versions!r}")


def _wrap(version: str, model: nn.Module, bucket_cap_mb: float | None) -> nn.Module:
    """``model`` wrapped as ``version``; ``bucket_cap_mb=None`` leaves each wrapper its own default."""
    if version == "torch DDP":
        return DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    if version == "per parameter":
        for tensor in model.state_dict().values():
            dist.broadcast(tensor, src=0)
        return model
    cap = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    return MiniDDP(model, overlap=version == "buckets + overlap", **cap)


def step_times(versions: Sequence[str] = VERSIONS, *, steps: int = 10, batch_size: int = 64,
               bucket_cap_mb: float = 5.0, warmup: int = 2) -> dict[str, dict]:
    """For each of ``versions`` (from ``VERSIONS``): ``median`` seconds per SGD step on this rank, and the
    timeline of its last step in seconds from the step's start: ``backward`` (start, time the last gradient
    was ready), ``returned`` (when ``loss.backward()`` returned: MiniDDP waits for its buckets first) and
    ``communication`` [(start, end), ...] (buckets in order; for "per parameter", the loop of all-reduces
    after backward; for torch DDP, empty: its buckets travel inside torch's C++ reducer); and ``seconds``,
    every timed step's seconds, round by round (the versions took their steps in turn)."""
    _check_versions(versions)
    whole("steps", steps)
    whole("batch_size", batch_size)
    whole("warmup", warmup, minimum=0)
    real("bucket_cap_mb", bucket_cap_mb, above=0)
    X, y = timing_batch(batch_size)
    runs = {}
    for version in versions:
        model = timing_model()
        wrapped = _wrap(version, model, bucket_cap_mb)
        runs[version] = (model, wrapped, torch.optim.SGD(wrapped.parameters(), lr=1e-3), [])
    results = {}
    for _ in range(warmup + steps):
        for version, (model, wrapped, optimizer, seconds) in runs.items():
            dist.barrier()  # every step starts together: a step's time is not its wait for the slower rank
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = F.cross_entropy(wrapped(X), y)
            backward_start = time.perf_counter()
            loss.backward()
            backward_end = time.perf_counter()
            if version == "per parameter":
                average_gradients(model)
            optimizer.step()
            seconds.append(time.perf_counter() - start)
            computed, communication = backward_end, []
            if version == "per parameter":
                communication = [(backward_end - start, seconds[-1])]
            elif isinstance(wrapped, MiniDDP):
                communication = [(t["launched"] - start, t["done"] - start) for t in wrapped.bucket_times]
                computed = max(t["ready"] for t in wrapped.bucket_times)
            results[version] = {"backward": (backward_start - start, computed - start),
                                "returned": backward_end - start, "communication": communication}
    for version, (*_, seconds) in runs.items():
        results[version]["median"] = statistics.median(seconds[warmup:])
        results[version]["seconds"] = seconds[warmup:]
    return results


def all_reduce_sizes(versions: Sequence[str] = VERSIONS, *, steps: int = 3, bucket_cap_mb: float | None = 5.0,
                     batch_size: int = 8) -> dict[str, list[list[int]]]:
    """For each of ``versions``, on the timing model: per training step, the bytes of every all-reduce this
    rank started, in order (counted with ``bytes_sent``, which sees torch DDP's C++ reducer too; counting
    waits for each all-reduce, so nothing here is timed). Other collectives (DDP's broadcasts) are left out.
    ``bucket_cap_mb=None`` leaves each wrapper its default (torch DDP's differs from an explicit 25)."""
    _check_versions(versions)
    whole("steps", steps)
    whole("batch_size", batch_size)
    if bucket_cap_mb is not None:
        real("bucket_cap_mb", bucket_cap_mb, above=0)
    X, y = timing_batch(batch_size)
    sizes: dict[str, list[list[int]]] = {}
    for version in versions:
        model = timing_model()
        wrapped = _wrap(version, model, bucket_cap_mb)
        sizes[version] = []
        for _ in range(steps):
            model.zero_grad()
            with bytes_sent() as sent:
                F.cross_entropy(wrapped(X), y).backward()
                if version == "per parameter":
                    average_gradients(model)
            sizes[version].append([nbytes for kind, nbytes in sent.calls if kind == "all_reduce"])
    return sizes


def agree_within(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], tolerance: float = 1e-6) -> bool:
    """Whether every tensor of ``a`` equals its partner in ``b`` (as many, same shapes) within ``tolerance``:
    the largest absolute difference at most ``tolerance``. Lesson 05 compares each way of averaging so."""
    real("tolerance", tolerance, at_least=0)
    a, b = list(a), list(b)
    return len(a) == len(b) and all(x.shape == y.shape and (x - y).abs().max().item() <= tolerance
                                    for x, y in zip(a, b, strict=True))


def per_round(timed: Mapping[str, dict], version: str, reference: str = "torch DDP") -> float:
    """The median over ``step_times``'s rounds of ``version``'s step time over ``reference``'s: the two took
    their steps in the same round, so a busy moment of the machine slows both."""
    for name, value in (("version", version), ("reference", reference)):
        if value not in timed:
            raise ValueError(f"{name} must be one of the versions timed, {sorted(timed)}, got {value!r}")
    return statistics.median(a / b for a, b in zip(timed[version]["seconds"], timed[reference]["seconds"],
                                                   strict=True))


def speed_claims(timed: Mapping[str, dict]) -> list[dict]:
    """Each of ``SPEED_CLAIMS`` judged on ``step_times``'s rounds: ``claim``, ``seen`` (the per-round ratio, in
    words), ``always`` and ``idle`` (whether it holds against the loose bound, which no plausible load breaks,
    and against the tight one, which an idle machine shows), and both bounds in words."""
    judged = []
    for claim, version, reference, side, loose, tight in SPEED_CLAIMS:
        ratio = per_round(timed, version, reference)
        words = "under" if side == "below" else "over"
        judged.append({"claim": claim, "seen": f'"{version}" took {ratio:.2f}x the time of "{reference}"',
                       "always": ratio < loose if side == "below" else ratio > loose,
                       "idle": ratio < tight if side == "below" else ratio > tight,
                       "always_expected": f'"{version}" {words} {loose}x the time of "{reference}"',
                       "idle_expected": f'"{version}" {words} {tight}x the time of "{reference}"'})
    return judged


def during_backward(result: Mapping) -> tuple[int, int]:
    """From one version's ``step_times`` timeline: how many buckets were launched, and how many had also
    finished, before the last gradient was computed."""
    computed = result["backward"][1]
    return (sum(launched < computed for launched, _ in result["communication"]),
            sum(done < computed for _, done in result["communication"]))


def close_once_reached(sizes: Sequence[int], first_limit: int, limit: int) -> list[int]:
    """torch DDP's rule for the buckets it rebuilds after its first step: gradients go into a bucket, in the
    order they arrive, until the bucket has reached its limit (``first_limit`` for the first bucket, ``limit``
    for every other), and the next one opens; the bytes of each bucket. A bucket can end over its limit."""
    buckets = [0]
    for size in sizes:
        if buckets[-1] >= (first_limit if len(buckets) == 1 else limit):
            buckets.append(0)
        buckets[-1] += size
    return buckets
