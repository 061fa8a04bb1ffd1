"""Warmup, then a cosine decay: the learning rate of every optimizer step of lesson 13's run.

The schedule is a function of the optimizer step alone. The step is one update with the *global* batch
(all ranks, all accumulated micro-batches), so the same ``--global-batch`` gives the same learning rate
at every step on 1, 2 or 4 ranks: nothing here depends on the number of ranks. Warmup ramps the rate
linearly from ``peak / warmup`` to ``peak`` over the first ``warmup`` steps (Goyal et al. 2017,
arXiv:1706.02677, warm up large-batch training); then it follows half a cosine down to ``final * peak`` at
the last step (Loshchilov & Hutter 2017, arXiv:1608.03983, without restarts), as nanoGPT does.

Used in lesson 13a and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

import math

from dpedu._validate import real, whole

__all__ = ["learning_rate"]


def learning_rate(step: int, *, peak: float, warmup: int, total: int, final: float = 0.1) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total``.

    Guarantees: ``peak * (step + 1) / warmup`` for ``step < warmup``; ``peak`` at ``step == warmup``; then
    non-increasing, reaching ``final * peak`` at ``step == total - 1`` (``final * peak`` after, too).
    """
    whole("step", step, 0)
    whole("total", total)
    whole("warmup", warmup, 0, total - 1)
    real("peak", peak, above=0)
    real("final", final, at_least=0, at_most=1)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - 1 - warmup))  # 0 at the peak, 1 at the last step
    return peak * (final + (1 - final) * 0.5 * (1 + math.cos(math.pi * progress)))
