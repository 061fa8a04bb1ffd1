"""The squared gradient norms that DDP's all-reduce passes by, recorded for free (lesson 13a, part 5).

Each bucket DDP all-reduces holds, before the reduction, this rank's gradient from its own b examples and,
after it, the mean over ranks: the gradient of the global batch B = ranks x b. Their squared norms are the
two batch sizes of lesson 07's two-batch estimate of the gradient noise scale (McCandlish et al. 2018,
App. A: E|G_b|^2 = |G|^2 + tr(Sigma)/b), so a communication hook that looks at both, and changes nothing,
measures the noise scale of a DDP run as it trains. The estimate itself is lesson 07's
``dpedu.sgd.noise_scale.two_batch_noise_scale``: this module records, and holds lesson 13a's check of that
estimate against the exact value from per-example gradients (``close_to_exact``).

Under ``no_sync`` accumulation the hook runs in the last micro-batch's backward, on the accumulated gradient
of all of the rank's micro-batches: b is the rank's examples per step. Clipping comes after the all-reduce and
is not seen. With a ``GradScaler`` the buckets hold the gradients times the loss scale, before ``unscale_``:
``GradientNorms.unscaled(scale)`` divides both norms by the scale squared. A float16 step whose gradients
overflowed has inf or nan norms, and GradScaler skips that step (it checks the same averaged gradient, so every
rank skips it); ``unscaled`` returns ``None`` for it, and ``dpedu.scripts.train_addition`` leaves such steps out
of its record and lists them, as ``two_batch_noise_scale`` takes finite norms only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

__all__ = ["GradientNorms", "recording_allreduce_hook", "close_to_exact"]


@dataclass
class GradientNorms:
    """What the hook saw in the last backward, summed over buckets: ``local``, this rank's squared gradient
    norm before the all-reduce, and ``averaged``, the squared norm of the averaged gradient (the same on every
    rank). Both are float64 tensors on the gradients' device (no GPU synchronisation in the hook; ``float()``
    them after the step). ``reset()`` before each step."""

    process_group: dist.ProcessGroup | None = None
    local: torch.Tensor | float = 0.0
    averaged: torch.Tensor | float = 0.0

    def reset(self) -> None:
        self.local = self.averaged = 0.0

    def unscaled(self, scale: float = 1.0) -> tuple[torch.Tensor, float] | None:
        """After the step: this rank's and the averaged squared norm of the true gradient, the recorded ones
        divided by ``scale`` squared (the GradScaler's scale during this backward; 1.0 without one). ``None``
        when the averaged gradient was not finite: a float16 overflow, a step GradScaler skipped, the same on
        every rank. Waits for the averaged norm (on a GPU, one synchronisation); ``local`` stays a tensor."""
        averaged = float(self.averaged) / scale**2
        if not math.isfinite(averaged):  # an inf or nan on any rank reaches the average: every rank sees it
            return None
        return torch.as_tensor(self.local, dtype=torch.float64) / scale**2, averaged


def recording_allreduce_hook(state: GradientNorms, bucket):  # no annotations: DDP inspects them as strings
    """DDP's default all-reduce (``allreduce_hook``: divide by the world size, sum), the same arithmetic, with
    the bucket's squared norm recorded before and after. Register with ``ddp.register_comm_hook(state, hook)``."""
    state.local = state.local + bucket.buffer().double().pow(2).sum()
    reduced = allreduce_hook(state.process_group, bucket)

    def record(future: torch.futures.Future) -> torch.Tensor:
        averaged = future.value()
        state.averaged = state.averaged + averaged.double().pow(2).sum()
        return averaged

    return reduced.then(record)


def close_to_exact(estimate: float, exact: float, *, within: float = 0.25) -> bool:
    """Lesson 13's check of the hook's noise-scale estimate at a fixed model: finite and within ``within``
    (relative) of the exact B_simple from per-example gradients at that model. 25 %: each of |G|^2 and tr Sigma
    is estimated without bias, their ratio is not quite, over 20 steps; a wrong factor (a missing 1/B, norms
    read at the wrong batch size) is off by 2 or more at b = 32, B = 64."""
    return math.isfinite(estimate) and abs(estimate / exact - 1) < within
