"""One training loop written twice: by hand with DDP, and with Hugging Face ``accelerate`` (lesson 14).

Both run inside a launched rank (``dpedu.launch``, ``torchrun`` or ``accelerate launch``) and train lesson 01's
digits network with the same settings: micro-batches accumulated under ``no_sync``, the averaged gradient
clipped, SGD with momentum. Each returns a ``Record`` of what it did, so that the lesson can assert where the two
agree (the parameters), where they split the work differently (who divides the loss, who skips the
all-reduce, which examples each rank reads) and what ``accelerate`` adds (``gather_for_metrics``).
``same_run`` and ``one_all_reduce_per_update`` are the lesson's checks that two runs are one.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import islice

import torch
import torch._dynamo  # noqa: F401 - before any process group: dpedu/data_parallel/digits_ddp.py says why
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.nn.utils import parameters_to_vector
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dpedu import datasets, models
from dpedu._validate import real, whole


@dataclass(frozen=True)
class Settings:
    """One run's settings; ``extra_division`` divides the loss by ``accumulate`` in the accelerate loop too.

    ``optimizer``: ``"sgd"`` (with ``momentum``) or ``"adam"``; neither decays the weights."""

    micro_batch: int = 16
    accumulate: int = 2
    steps: int = 20
    lr: float = 0.05
    momentum: float = 0.9
    clip: float | None = 0.8  # exceeded on some steps only: a clip on every step hides the gradient's scale
    extra_division: bool = False
    optimizer: str = "sgd"
    eval_batch: int = 64

    def __post_init__(self) -> None:
        for name in ("micro_batch", "accumulate", "steps", "eval_batch"):
            whole(name, getattr(self, name))
        real("lr", self.lr, above=0)
        real("momentum", self.momentum, at_least=0, at_most=1)
        if self.clip is not None:
            real("clip", self.clip, above=0)
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.optimizer!r}")

    def make_optimizer(self, parameters) -> torch.optim.Optimizer:
        if self.optimizer == "adam":
            return torch.optim.Adam(parameters, lr=self.lr)
        return torch.optim.SGD(parameters, lr=self.lr, momentum=self.momentum)


@dataclass
class Record:
    """What one rank saw: the final parameters, the counts the lesson asserts, the examples it read."""

    parameters: torch.Tensor = field(default_factory=lambda: torch.empty(0))
    all_reduces: int = 0  # DDP's gradient all-reduces (one per bucket; this model has one bucket)
    optimizer_steps: int = 0  # times the parameters were updated, whatever the loop called
    clipped_steps: int = 0  # optimizer steps whose averaged gradient was longer than the clip
    losses: list[float] = field(default_factory=list)  # this rank's mean loss per optimizer step, undivided
    indices: list[list[int]] = field(default_factory=list)  # the examples of each of this rank's micro-batches
    evaluated: dict[str, int] = field(default_factory=dict)  # held-out predictions gathered, by how
    process_index: int = 0  # this rank's place among the processes (the Accelerator's, in an accelerate run)


def digits_with_indices() -> tuple[TensorDataset, TensorDataset]:
    """Lesson 01's digits as (features, label, index) training and held-out sets: 1,438 and 359 examples."""
    data = datasets.digits()
    return (TensorDataset(data.X_train, data.y_train, torch.arange(len(data.X_train))),
            TensorDataset(data.X_test, data.y_test, torch.arange(len(data.X_test))))


def _counted(record: Record, model: DDP | torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    def counting_allreduce(state, bucket):
        record.all_reduces += 1
        return allreduce_hook(state, bucket)  # what DDP does without a hook: divide by the world size, sum

    if isinstance(model, DDP):  # one process alone: prepare leaves the model as it is, and nothing is all-reduced
        model.register_comm_hook(None, counting_allreduce)
    optimizer.register_step_post_hook(lambda *_: setattr(record, "optimizer_steps", record.optimizer_steps + 1))


def _note(record: Record, index: torch.Tensor, loss: float, settings: Settings) -> None:
    """Record a micro-batch's examples, and its (undivided) loss into the mean of its optimizer step."""
    if len(record.indices) % settings.accumulate == 0:
        record.losses.append(0.0)
    record.indices.append(index.tolist())
    record.losses[-1] += loss / settings.accumulate


def _check_fits(settings: Settings, examples: int, ranks: int) -> None:
    # Both loops stop inside the first epoch: accelerate also synchronises at the end of its loader.
    needed = settings.steps * settings.accumulate * settings.micro_batch * ranks
    if needed > examples:
        raise ValueError(f"steps x accumulate x micro_batch x ranks = {needed} examples, more than the "
                         f"{examples} of one epoch: lower steps or micro_batch")


def train_by_hand(settings: Settings) -> Record:
    """Lesson 03's loop: DistributedSampler, no_sync on all micro-batches but the last, loss / accumulate."""
    train, _ = digits_with_indices()
    _check_fits(settings, len(train), dist.get_world_size())
    record = Record()
    model = DDP(models.mlp(64, 32, 10, seed=0))
    optimizer = settings.make_optimizer(model.parameters())
    _counted(record, model, optimizer)
    micro_batches = iter(DataLoader(train, batch_size=settings.micro_batch,
                                    sampler=DistributedSampler(train, shuffle=False)))
    for _ in range(settings.steps):
        for k in range(settings.accumulate):
            x, y, index = next(micro_batches)
            with model.no_sync() if k < settings.accumulate - 1 else nullcontext():
                loss = F.cross_entropy(model(x), y)
                (loss / settings.accumulate).backward()
            _note(record, index, loss.item(), settings)
        if settings.clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
            record.clipped_steps += int(norm > settings.clip)
        optimizer.step()
        optimizer.zero_grad()
    record.parameters = parameters_to_vector(model.module.parameters()).detach()
    return record


def train_with_accelerate(settings: Settings, cpu: bool = True) -> Record:
    """The same run through ``accelerate``: ``prepare`` wraps, shards and counts; the loop only trains.

    ``cpu=True`` (the lesson's ranks): gloo on the CPU; ``False``: each process's own GPU, where there are GPUs (one
    per process: two processes on one GPU would both take it, and DDP then asks for a second one)."""
    from accelerate import Accelerator  # inside the rank: an Accelerator must not exist in the launching kernel

    accelerator = Accelerator(cpu=cpu, gradient_accumulation_steps=settings.accumulate)
    _check_joined(accelerator)
    train, held_out = digits_with_indices()
    _check_fits(settings, len(train), accelerator.num_processes)  # 1 where it runs alone: no process group
    record = Record(process_index=accelerator.process_index)
    model = models.mlp(64, 32, 10, seed=0)
    optimizer = settings.make_optimizer(model.parameters())
    loader = DataLoader(train, batch_size=settings.micro_batch)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    _counted(record, model, optimizer.optimizer)
    for x, y, index in islice(loader, settings.steps * settings.accumulate):
        with accelerator.accumulate(model):
            loss = F.cross_entropy(model(x), y)
            accelerator.backward(loss / settings.accumulate if settings.extra_division else loss)
            if accelerator.sync_gradients and settings.clip is not None:
                norm = accelerator.clip_grad_norm_(model.parameters(), settings.clip)
                record.clipped_steps += int(norm > settings.clip)
            optimizer.step()  # a no-op on the micro-batches that only accumulate
            optimizer.zero_grad()
        _note(record, index, loss.item(), settings)
    record.parameters = parameters_to_vector(accelerator.unwrap_model(model).parameters()).detach().cpu()
    record.evaluated = _evaluate(accelerator, model, held_out, settings.eval_batch)
    return record


def same_run(first: list[Record], second: list[Record], within: float = 1e-6) -> bool:
    """Lesson 14's test that two launches are one run: within each, every rank's parameters are the same, bit
    for bit; between the two, they agree within ``within``."""
    replicas = all(torch.equal(run[0].parameters, record.parameters) for run in (first, second) for record in run)
    return replicas and (first[0].parameters - second[0].parameters).abs().max().item() <= within


def one_all_reduce_per_update(run: list[Record], settings: Settings) -> bool:
    """Lesson 14's count: on every rank, one gradient all-reduce and one parameter update per optimizer step."""
    return all(record.all_reduces == record.optimizer_steps == settings.steps for record in run)


def _check_joined(accelerator) -> None:
    # Since accelerate 1.13 a plain Accelerator() on a machine without GPUs does not join the launched ranks
    # (it reports one process and each trains alone): cpu=True is what makes it use gloo there.
    if dist.is_initialized() and accelerator.num_processes != dist.get_world_size():
        raise RuntimeError(f"the Accelerator sees {accelerator.num_processes} process(es) of the "
                           f"{dist.get_world_size()} launched: on a machine without GPUs, pass cpu=True")


def _evaluate(accelerator, model, held_out: TensorDataset, batch: int) -> dict[str, int]:
    """Held-out predictions gathered two ways: ``gather`` keeps the padding, ``gather_for_metrics`` drops it."""
    loader = accelerator.prepare(DataLoader(held_out, batch_size=batch))
    model.eval()
    gathered, for_metrics, correct = 0, 0, 0
    with torch.no_grad():
        for x, y, _ in loader:
            right = (model(x).argmax(1) == y).long()
            gathered += len(accelerator.gather(right))
            metric = accelerator.gather_for_metrics(right)
            for_metrics, correct = for_metrics + len(metric), correct + int(metric.sum())
    return {"gather": gathered, "gather_for_metrics": for_metrics, "correct": correct}
