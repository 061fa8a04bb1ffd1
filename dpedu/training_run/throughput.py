"""Does data parallelism make lesson 13's training faster? Measured (lesson 13b), and predicted at scale (lesson 09).

Measured inside ranks started by ``dpedu.launch`` (every function here but the last two runs on every rank):
- ``training_throughput``: samples per second of the real step (``step.train_step`` on the ``gpt.GPT`` of
  ``dpedu.scripts.train_addition``, wrapped in DDP), warm-up steps excluded, on the CPU (gloo) or on one GPU
  per rank (nccl);
- ``matmul_seconds``: the time of a fixed amount of matmul work per rank, to see ranks × threads compete
  for cores (oversubscription);
- ``controlled_steps``: a step whose compute is a sleep of a chosen duration (a process that sleeps uses no
  core: lesson 12's technique, its pipeline's timed stages), followed by a real all-reduce of the gradients'
  size, timed alone, so that what communication costs beside compute is measured without ranks competing for
  the cores.

Lesson 13b's checks of these measurements are functions here too (``round_ratio``, ``oversubscription_slows``,
``within_the_cores``, ``faster_not_twice``, ``no_faster_than``, ``flat``), so that the lesson asserts them and
``tests/claims`` shows each one failing on a broken measurement.

Predicted (plain arithmetic, any α-β model of an all-reduce's time can feed it): ``exposed_communication``,
the part of the gradients' all-reduces that overlapping buckets with backward does not hide, and
``scaling_efficiency``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu._validate import real, whole
from dpedu.training_run.addition import VOCABULARY, addition_splits, sequence_length
from dpedu.training_run.gpt import GPT
from dpedu.training_run.step import resolve_precision, train_step

__all__ = ["training_throughput", "matmul_seconds", "controlled_steps", "round_ratio", "oversubscription_slows",
           "within_the_cores", "faster_not_twice", "no_faster_than", "flat", "exposed_communication",
           "scaling_efficiency"]


def _device() -> torch.device:
    """This rank's device: its GPU when the group moves CUDA tensors through nccl, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if "nccl" in str(dist.get_backend()) \
        else torch.device("cpu")


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # GPU work is asynchronous: wait for it before reading the clock


def training_throughput(per_rank_batch: int, *, steps: int = 20, warmup: int = 5, digits: int = 2,
                        seed: int = 0) -> dict[str, float]:
    """On every rank: ``warmup`` untimed steps, then ``steps`` timed ones, of the training script's model and
    step (float32 on CPUs, float16 + GradScaler on GPUs), ``per_rank_batch`` examples per rank per step.

    Returns (the same on every rank, rank 0's clock) ``step_seconds``, the median time of one step (a step
    ends with the all-reduce, so all ranks finish it together), ``samples_per_second`` = world size ×
    ``per_rank_batch`` / ``step_seconds``, and ``parameters``. The median steps over a busy moment of a
    shared machine that a mean would include.
    """
    whole("per_rank_batch", per_rank_batch)
    whole("steps", steps)
    whole("warmup", warmup, 0)
    rank, world, device = dist.get_rank(), dist.get_world_size(), _device()
    precision = resolve_precision("auto", device)
    tokens = addition_splits(digits, train=2048, heldout=1, seed=seed).train
    torch.manual_seed(seed)
    model = GPT(len(VOCABULARY), sequence_length(digits) - 1).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "float16")
    seconds = []
    for step in range(warmup + steps):
        first = (step * world + rank) * per_rank_batch  # this rank's rows of the step, cycling through the data
        batch = tokens[torch.arange(first, first + per_rank_batch) % len(tokens)]
        _synchronize(device)
        start = time.perf_counter()
        train_step(ddp, [batch], optimizer, scaler, digits=digits, clip=1.0, precision=precision)
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
    step_seconds = torch.tensor(statistics.median(seconds[warmup:]), dtype=torch.float64)
    dist.broadcast(step_seconds, src=0)  # CPU tensor: gloo, also beside nccl
    return {"step_seconds": step_seconds.item(), "samples_per_second": world * per_rank_batch / step_seconds.item(),
            "parameters": model.parameter_count()}


def matmul_seconds(size: int = 256, *, repeats: int = 8, steps: int = 9) -> float:
    """On every rank: the median time of one step of ``repeats`` (``size`` × ``size``) matmuls on every rank,
    with the threads each rank has (``dpedu.launch(..., threads_per_rank=t)``). A step runs from a barrier to
    the next, so it ends when the slowest rank is done: ranks that took turns on the cores (one descheduled
    while the other ran with all of them) are counted as taking turns. The first step is a warm-up."""
    whole("size", size)
    whole("repeats", repeats)
    whole("steps", steps, 2)
    a = torch.randn(size, size, generator=torch.Generator().manual_seed(dist.get_rank()))
    seconds = []
    for _ in range(steps):
        dist.barrier()
        start = time.perf_counter()
        b = a
        for _ in range(repeats):
            b = torch.tanh(b @ a)
        dist.barrier()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[1:])


def controlled_steps(compute_seconds: Sequence[float], elements: int, *, steps: int = 7) -> list[float]:
    """On every rank, for each duration in ``compute_seconds``: steps made of a sleep of that duration (the
    compute, of controlled length) then a real ``all_reduce`` of ``elements`` float32 values (the gradients).

    Returns, per duration, this rank's fastest all-reduce, timed alone: a barrier after the sleep brings the
    ranks together first, so the time holds no wait for a partner still asleep or just waking. The fastest, as
    lesson 04 fits the α-β model to the fastest all-reduces: what disturbs one (another program on a core)
    only adds time. Durations take turns step by step; a barrier starts every step.
    """
    durations = [real("compute_seconds", s, at_least=0) for s in compute_seconds]
    whole("elements", elements)
    whole("steps", steps)
    gradients = torch.ones(elements)
    dist.all_reduce(gradients)  # the first all-reduce sets up the connections: not timed
    timed: list[list[float]] = [[] for _ in durations]
    for _ in range(steps):
        for index, duration in enumerate(durations):
            dist.barrier()
            time.sleep(duration)  # forward and backward, of controlled length; uses no core
            dist.barrier()  # every rank awake and here: what follows is the all-reduce alone
            start = time.perf_counter()
            dist.all_reduce(gradients)
            timed[index].append(time.perf_counter() - start)
    return [min(ts) for ts in timed]


# Lesson 13b's checks of these measurements. Each says what it asserts and why that bound; tests/claims feeds
# each a broken measurement and requires it to fail.

def round_ratio(base: Sequence[float], compared: Sequence[float]) -> float:
    """The median over rounds of each round's ``compared`` over its ``base``: lesson 13b's oversubscribed time over
    the fitting one (its cell 11), more ranks' samples/s over fewer's (its cell 15). A slow spell the gate cannot see
    (another program, a cloud host slowing its CPUs) moves the ratios of the rounds it falls on, and their median
    only if it lasts through most of them (3 of 5 rounds: about 6 s of lesson 13b's throughput cell on 2 cores)."""
    if len(base) != len(compared) or not base:
        raise ValueError("base and compared must hold one value per round, as many of each")
    return statistics.median(other / first for first, other in zip(base, compared, strict=True))


def oversubscription_slows(time_ratio: float, *, at_least: float) -> bool:
    """Did the oversubscribed ranks take at least ``at_least`` times the fitting ranks' time for the same work
    (``time_ratio``, from ``round_ratio``)? Lesson 13b asserts 0.9 on any machine (oversubscribing never made it
    faster: 1.8x to 5x measured on 2 idle cores, more with one core taken) and 1.3 where two cores were free."""
    return time_ratio >= at_least


def within_the_cores(efficiency: float, ranks: int, usable: int, *, noise: float = 1.2) -> bool:
    """Is a measured scaling efficiency at most what ``usable`` cores allow (``min(ranks, usable) / ranks``),
    plus 20 % for noise? On free cores, more means a timing went wrong; load that slows one process's runs more
    than the ranks' can raise it (1.83 measured on 2 cores), so lesson 13b asserts it where the cores were free."""
    return efficiency <= min(ranks, usable) / ranks * noise


def faster_not_twice(speedup: float) -> bool:
    """Lesson 13b's claim of 2 ranks on 2 free cores: ``speedup`` (their samples/s over one process's, from
    ``round_ratio``) more than 1.1, less than 2."""
    return 1.1 < speedup < 2


def no_faster_than(ratio: float, *, margin: float = 1.15) -> bool:
    """More ranks than cores do not beat fewer: ``ratio`` (the more ranks' samples/s over the fewer's, from
    ``round_ratio``) at most ``margin``."""
    return ratio <= margin


def flat(seconds: Sequence[float], *, within: float = 3.0) -> bool:
    """Are these times flat: the largest less than ``within`` times the smallest? Lesson 13b asserts it of the
    same all-reduce timed after sleeps of different lengths: its cost does not depend on the batch. Not within
    2x: a core that slept longer can wake slower (0.18 to 0.38 ms measured once), while an all-reduce timed with
    its partner's wait grows with the sleep (15x to 17x over lesson 13b's lengths, measured)."""
    return max(seconds) < within * min(seconds)


def exposed_communication(bucket_seconds: Sequence[float], backward_seconds: float) -> float:
    """Seconds the step waits for communication after backward: DDP's overlap of buckets with backward, modelled.

    ``bucket_seconds[i]`` is bucket i's all-reduce time, in the order buckets fill. Backward fills them
    evenly (bucket i of k is ready at (i + 1)/k of ``backward_seconds``), and each all-reduce starts when its
    bucket is ready and the one before it has ended (one after the other on one link). The last bucket is
    ready only when backward ends, so its all-reduce is never hidden; with one bucket nothing is.
    """
    times = [real("bucket_seconds", t, at_least=0) for t in bucket_seconds]
    if not times:
        raise ValueError("bucket_seconds must hold at least one bucket's time")
    backward = real("backward_seconds", backward_seconds, at_least=0)
    done = 0.0
    for i, seconds in enumerate(times):
        done = max(done, (i + 1) / len(times) * backward) + seconds
    return done - backward


def scaling_efficiency(compute_seconds: float, backward_seconds: float, bucket_seconds: Sequence[float]) -> float:
    """Throughput per rank against one process: compute / (compute + exposed communication), at most 1.

    Weak scaling: every rank computes ``compute_seconds`` per step (forward and backward of its own batch,
    backward taking ``backward_seconds`` of it), as one process would alone; only the communication is added.
    """
    compute = real("compute_seconds", compute_seconds, above=0)
    if backward_seconds > compute:
        raise ValueError(f"backward_seconds ({backward_seconds}) is part of compute_seconds ({compute}): at most it")
    return compute / (compute + exposed_communication(bucket_seconds, backward_seconds))
