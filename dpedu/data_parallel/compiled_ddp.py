"""torch.compile with DDP: which order compiles, and how DDP's graph is cut so that its all-reduces still
overlap backward.

A compiled model runs its whole backward as one graph, so every gradient would appear at its end, and
DDP could not start a bucket's all-reduce while the rest of backward runs (lesson 05). Dynamo's
``DDPOptimizer`` (on while ``torch._dynamo.config.optimize_ddp`` is True) therefore cuts the graph
where it *predicts* DDP's buckets to end: it counts parameter sizes in reverse graph order, a module's
parameters at once, and cuts once a bucket has reached the cap. Each graph's backward hands its
gradients to DDP before the next graph's backward starts.

DDP does not use that prediction: after its first step it rebuilds its buckets from the order the
gradients arrived (torch's Note [DDPOptimizer] in ``torch/_dynamo/backends/distributed.py`` names the
mismatch). The model here is 4 layers of a 1 MiB weight and a 2 KiB bias, with ``bucket_cap_mb=1``:
DDPOptimizer makes one graph per layer, and a compiled graph's backward hands out the weight's gradient
before the bias's, so DDP's rebuilt buckets are ``[w3] [b3 w2] [b2 w1] [b1 w0] [b0]``: 5 for 4 graphs.

``compiled_step`` counts the graphs a backend receives and logs, in the last backward, when each graph's
backward begins and ends and which parameters each all-reduced bucket holds; ``last_backward`` writes
that log in one line. ``step_seconds`` times the first (compiling) step and the next ones, compiled or not.

Used in lesson 05.
"""

from __future__ import annotations

import logging
import statistics
import time
import warnings

import torch
import torch._dynamo
import torch.distributed as dist
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from dpedu._validate import whole

__all__ = ["ORDERS", "compiled_model", "compiled_step", "last_backward", "step_seconds", "layers"]

ORDERS = ("compile(DDP(model))", "DDP(compile(model))")


def _as_traced(graph: torch.fx.GraphModule):
    """The graph run as traced, in AOTAutograd's calling convention: one list of arguments ("boxed")."""
    def run(args: list):
        return graph(*args)
    run._boxed_call = True
    return run


def _fresh_dynamo(optimize_ddp: bool) -> None:
    """Compile afresh in this rank, under this setting. Two of Dynamo's messages go unprinted, since they
    say nothing about DDP and change with the machine: that it ignores the ``record_function`` inside
    DDP's forward (a log line stamped with the time) and, on Python 3.13.0, that its guards run slower there."""
    torch._dynamo.reset()
    torch._dynamo.config.optimize_ddp = optimize_ddp
    torch._logging.set_logs(dynamo=logging.ERROR)
    warnings.filterwarnings("ignore", message="Guards may run slower", category=RuntimeWarning)


def layers(seed: int = 0) -> nn.Sequential:
    """4 × (Linear(512, 512), Tanh): per layer a 1 MiB float32 weight and a 2 KiB bias."""
    torch.manual_seed(seed)
    return nn.Sequential(*[module for _ in range(4) for module in (nn.Linear(512, 512), nn.Tanh())])


def compiled_model(order: str, model: nn.Module, backend) -> tuple[nn.Module, DistributedDataParallel]:
    """``model`` under DDP (``bucket_cap_mb=1``: a bucket closes once it reaches 1 MiB) and
    ``torch.compile(..., backend=backend)``, in ``order``; and the DDP module (for its hooks)."""
    if order == ORDERS[0]:  # the order torch's DDP notes give
        ddp = DistributedDataParallel(model, bucket_cap_mb=1)
        return torch.compile(ddp, backend=backend), ddp
    ddp = DistributedDataParallel(torch.compile(model, backend=backend), bucket_cap_mb=1)
    return ddp, ddp


def compiled_step(order: str, *, optimize_ddp: bool = True, steps: int = 2) -> dict:
    """Inside ranks: ``steps`` steps of ``layers()`` compiled in ``order`` by a backend that runs each graph as
    traced (no code generated); the last step logged. Returns ``graphs`` (operators in each graph the backend
    received, in order) and ``events``, in the order they happened in the last backward: ("backward begins",
    i) and ("backward done", i) around graph i's backward, ("all_reduce", bytes) when DDP handed a bucket to
    its all-reduce; ``buckets``, the parameters each all-reduced bucket held, in the same order ("w3" is the
    weight of layer 3, counted from 0; "b3" its bias); and every parameter's ``grads``."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if not isinstance(optimize_ddp, bool):
        raise TypeError(f"optimize_ddp must be True or False, got {optimize_ddp!r}")
    whole("steps", steps)
    _fresh_dynamo(optimize_ddp)
    graphs, events, buckets = [], [], []

    def recording(gm: torch.fx.GraphModule, example_inputs) -> object:
        index = len(graphs)
        graphs.append(sum(node.op in ("call_function", "call_module", "call_method") for node in gm.graph.nodes))

        def backward_compiler(bw: torch.fx.GraphModule, inputs):
            run = _as_traced(bw)

            def noted(args):  # this graph's backward, begun and done
                events.append(("backward begins", index))
                grads = run(args)
                events.append(("backward done", index))
                return grads
            noted._boxed_call = True
            return noted
        return aot_autograd(fw_compiler=lambda fw, inputs: _as_traced(fw),
                            bw_compiler=backward_compiler)(gm, example_inputs)

    def noting_all_reduce(state, bucket):  # DDP's own all-reduce, noted when DDP hands the bucket over
        events.append(("all_reduce", bucket.buffer().numel() * bucket.buffer().element_size()))
        buckets.append([names[id(p)] for p in bucket.parameters()])
        return allreduce_hook(state, bucket)

    model = layers()
    layer_of = {name: f"{name.split('.')[1][0]}{int(name.split('.')[0]) // 2}" for name, _ in model.named_parameters()}
    names = {id(p): layer_of[name] for name, p in model.named_parameters()}  # 0.weight -> w0, 2.bias -> b1
    wrapped, ddp = compiled_model(order, model, recording)
    ddp.register_comm_hook(None, noting_all_reduce)
    generator = torch.Generator().manual_seed(dist.get_rank())
    for _ in range(steps):  # DDP builds its buckets anew after the first step: log the last
        events.clear()
        buckets.clear()
        x, y = torch.randn(64, 512, generator=generator), torch.randn(64, 512, generator=generator)
        model.zero_grad()
        nn.functional.mse_loss(wrapped(x), y).backward()
    return {"graphs": graphs, "events": list(events), "buckets": [list(b) for b in buckets],
            "grads": [p.grad.clone() for p in model.parameters()]}


def last_backward(run: dict) -> str:
    """A ``compiled_step`` run's last backward in one line: "B3" is graph 3's backward (begun and done),
    "R[b3 w2]" a bucket holding those parameters handed to its all-reduce, in the order they happened."""
    buckets = iter(run["buckets"])
    return " ".join(f"R[{' '.join(next(buckets))}]" if kind == "all_reduce" else f"B{i}"
                    for kind, i in run["events"] if kind != "backward begins")


def step_seconds(backend: str, *, steps: int = 6) -> dict:
    """Inside ranks: ``steps`` SGD steps of ``layers()`` under DDP, eager (``backend="eager"``) or as
    ``DDP(compile(model, backend=backend))``: "aot_eager" traces forward and backward and runs the graphs
    as traced; "inductor", torch's default, writes and compiles C++ (it needs a C++ compiler). Returns the
    first step's seconds (compiling), the median of the others, and the trained parameters."""
    if backend not in ("eager", "aot_eager", "inductor"):
        raise ValueError(f"backend must be 'eager', 'aot_eager' or 'inductor', got {backend!r}")
    whole("steps", steps, minimum=2)
    _fresh_dynamo(True)
    model = layers()
    wrapped = DistributedDataParallel(model if backend == "eager" else torch.compile(model, backend=backend),
                                      bucket_cap_mb=1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    generator = torch.Generator().manual_seed(dist.get_rank())
    seconds = []
    for _ in range(steps):
        x, y = torch.randn(64, 512, generator=generator), torch.randn(64, 512, generator=generator)
        start = time.perf_counter()
        optimizer.zero_grad()
        nn.functional.mse_loss(wrapped(x), y).backward()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return {"first": seconds[0], "later": statistics.median(seconds[1:]),
            "params": [p.detach().clone() for p in model.parameters()]}
