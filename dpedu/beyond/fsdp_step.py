"""FSDP2 in practice: what a rank holds and sends through one step, under the options that trade them.

``fully_shard`` keeps each layer's parameters sharded and all-gathers them just before the layer runs.
Three of its options change what a rank holds at each moment of a step and what it sends:

- ``reshard_after_forward``: True (the default) frees a layer's gathered parameters after its forward
  and all-gathers them again for its backward; False keeps them from forward to backward (ZeRO-2's
  memory during the step, one all-gather per layer instead of two);
- ``mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)``: the
  shards stay float32 (the optimizer's master copy), the gathered parameters are bfloat16 (half the
  bytes held and all-gathered, the forward and backward computed in bfloat16), and the gradients are
  reduce-scattered in float32;
- prefetching: in backward FSDP2 all-gathers the next layer's parameters before the current layer's
  backward runs, by default; in forward only when asked (``set_modules_to_forward_prefetch``).

``traced_step`` trains ``zero_memory.tanh_mlp`` under them, with plain SGD (whose step, unlike Adam's, shows the
scale of the gradient, so that comparing its parameters with DDP's, ``zero_one.train_sgd("ddp")``, would catch a
gradient summed over the ranks instead of averaged), and notes, at each layer's forward and
backward and after each phase of the last step, the bytes of parameters gathered in place (the
module's parameters that are plain tensors then, not shards) and how many all-gathers were issued so far.
A prefetched all-gather is counted when issued; its parameters appear in place when the layer runs.

Used in lesson 11b.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy
from torch.distributed.tensor import DTensor

from dpedu._validate import real, whole
from dpedu.beyond.zero_memory import batch, shard_layers, tanh_mlp  # batch: the batches zero_memory.train uses
from dpedu.runtime.traffic import bytes_sent

__all__ = ["traced_step", "gathered_bytes", "BFLOAT16_COMPUTE"]

BFLOAT16_COMPUTE = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def gathered_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s parameters that are gathered in place now: plain tensors, not DTensor shards."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))


def traced_step(*, steps: int, lr: float = 0.1, reshard_after_forward: bool = True,
                mixed_precision: bool = False, forward_prefetch: bool = False) -> dict:
    """Inside ranks: ``steps`` SGD steps of ``tanh_mlp()`` under FSDP2 with these options, each rank on
    the batches of ``zero_memory.train``; the last step traced. Returns ``timeline``: (moment, bytes
    gathered in place, all-gathers issued so far, dtypes gathered) at each layer's forward and backward
    and after forward, backward and the optimizer's step; ``calls``: the step's collectives in order
    (kind, bytes handed in); every step's ``losses``, the trained ``params`` (whole, float32) and the
    gradients' ``grad_dtypes``."""
    whole("steps", steps)
    real("lr", lr, above=0)
    for name, flag in (("reshard_after_forward", reshard_after_forward), ("mixed_precision", mixed_precision),
                       ("forward_prefetch", forward_prefetch)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    model = tanh_mlp()
    options = {"reshard_after_forward": reshard_after_forward}
    if mixed_precision:
        options["mp_policy"] = BFLOAT16_COMPUTE
    shard_layers(model, init_device_mesh("cpu", (dist.get_world_size(),)), **options)
    layers = [layer for layer in model if isinstance(layer, nn.Linear)]
    if forward_prefetch:  # each layer's forward first issues the next layer's all-gather
        for layer, following in zip(layers[:-1], layers[1:], strict=True):
            layer.set_modules_to_forward_prefetch([following])
    timeline, traced, losses = [], {}, []

    def note(moment: str) -> None:
        issued = sum(kind == "all_gather" for kind, _ in traced["sent"].calls)
        dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters() if not isinstance(p, DTensor)})
        timeline.append((moment, gathered_bytes(model), issued, dtypes))

    def note_backward(i: int):  # a hook on the layer's output runs when backward reaches the layer
        def hook(module, args, out) -> None:
            out.register_hook(lambda grad: note(f"backward {i}"))  # after FSDP2's own, registered before
        return hook

    for i, layer in enumerate(layers):  # registered after fully_shard's own hooks, so they run after them
        layer.register_forward_pre_hook(lambda module, args, i=i: note(f"forward {i}"))
        layer.register_forward_hook(note_backward(i))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):  # the first step also sets FSDP2 up: trace the last
        timeline.clear()
        x, y = batch(dist.get_rank(), step)
        optimizer.zero_grad()
        with bytes_sent() as traced["sent"]:
            loss = nn.functional.mse_loss(model(x), y)
            losses.append(loss.item())
            note("after forward")
            loss.backward()
            note("after backward")
            optimizer.step()
            note("after step")
    return {"timeline": timeline, "calls": traced["sent"].calls, "losses": losses,
            "params": [p.full_tensor().detach().clone() for p in model.parameters()],
            "grad_dtypes": sorted({str(p.grad.dtype).removeprefix("torch.") for p in model.parameters()})}
