"""Hogwild!: several processes train one model in shared memory, without locks (Recht et al., 2011).

What is shared is the *parameters*: every worker reads them, computes a gradient in its own memory
(``.grad`` is private to each process), and writes its update straight into the shared tensors,
while the others may be halfway through theirs. The gradients are therefore stale, as in lesson 06's
simulator, and some updates overwrite others; on sparse or easy problems it still converges.

Used in lesson 06.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.multiprocessing  # noqa: F401 - registers the reductions that share tensors between processes
from torch import nn

from dpedu._validate import real, training_problem, whole
from dpedu.runtime.processes import Supervisor, stop_and_reap
from dpedu.runtime.start_methods import choose_start_method, context


def _worker(model: nn.Module, X: torch.Tensor, y: torch.Tensor, loss_fn: Callable, steps: int, batch_size: int,
            lr: float, seed: int) -> None:
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # steps write into the shared parameters
    for _ in range(steps):
        batch = torch.randint(len(X), (batch_size,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(X[batch]), y[batch]).backward()
        optimizer.step()


def train(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor, *, workers: int, steps: int,
          batch_size: int, lr: float, timeout: float = 60.0, seed: int = 0) -> None:
    """Train ``model`` in place with ``workers`` lock-free processes, each making ``steps`` SGD steps.

    Raises ``RuntimeError`` naming the workers that failed, once all have ended, and ``TimeoutError`` if
    any is still running after ``timeout`` seconds. In every case (an error while starting and Ctrl-C
    too) every worker started is stopped and reaped before this returns or raises.
    """
    training_problem(model, loss_fn, X, y)
    for name, value in (("workers", workers), ("steps", steps)):
        whole(name, value)
    whole("batch_size", batch_size, maximum=len(X))
    real("lr", lr, above=0)
    real("timeout", timeout, above=0)
    for p in model.parameters():
        p.grad = None  # gradients stay private to each worker; only the parameters are shared
    model.share_memory()
    ctx = context(choose_start_method()[0])
    processes = [ctx.Process(target=_worker, args=(model, X, y, loss_fn, steps, batch_size, lr, seed + k),
                             name=f"hogwild-worker-{k}") for k in range(workers)]
    with Supervisor(lambda succeeded: stop_and_reap(processes)) as supervisor:
        for p in processes:
            p.start()
        # exitcode reaps a worker that has ended: nothing is left to signal, as a worker leads no group.
        supervisor.wait(lambda: all(p.exitcode is not None for p in processes), timeout,
                        lambda: TimeoutError(f"Hogwild workers still running after timeout={timeout:g} s were stopped"),
                        wake_on=lambda: [p.sentinel for p in processes if p.exitcode is None])
        failed = [k for k, p in enumerate(processes) if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"Hogwild worker(s) {failed} failed; their traceback is on stderr")
