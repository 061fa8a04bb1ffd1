"""dpedu.training_run.gradient_norms: the hook leaves DDP's arithmetic alone and records each rank's squared
gradient norm before the all-reduce and the averaged one after it, also under no_sync accumulation; ``unscaled``
divides by a GradScaler's scale squared and gives None for a step whose gradients overflowed."""

import math

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu import launch
from dpedu.training_run.addition import VOCABULARY, addition_splits
from dpedu.training_run.gpt import GPT
from dpedu.training_run.gradient_norms import GradientNorms, recording_allreduce_hook
from dpedu.training_run.step import answer_loss


def backward(hooked: bool, accumulate: int = 1) -> dict:
    """On each of 2 ranks: one forward-backward of the GPT on this rank's 24 examples (in ``accumulate``
    micro-batches under no_sync), with DDP's default all-reduce or the recording hook."""
    rank = dist.get_rank()
    tokens = addition_splits(2, train=48, heldout=1, seed=0).train[rank::2]
    torch.manual_seed(0)
    model = GPT(len(VOCABULARY), 8)
    own = torch.autograd.grad(answer_loss(model(tokens[:, :-1]), tokens, 2), list(model.parameters()))
    ddp, norms = DDP(model, bucket_cap_mb=0.1), GradientNorms()  # several buckets
    if hooked:
        ddp.register_comm_hook(norms, recording_allreduce_hook)
    micro = tokens.split(24 // accumulate)
    for k, batch in enumerate(micro):
        context = ddp.no_sync() if k < len(micro) - 1 else torch.enable_grad()
        with context:
            (answer_loss(ddp(batch[:, :-1]), batch, 2) / len(micro)).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    return {"grads": grads, "local": float(norms.local), "averaged": float(norms.averaged),
            "own_sq": sum(g.double().pow(2).sum().item() for g in own),
            "final_sq": sum(g.double().pow(2).sum().item() for g in grads)}


def test_the_hook_changes_nothing_and_records_both_norms():
    plain = launch(backward, 2, (False,), timeout=60)
    hooked = launch(backward, 2, (True,), timeout=60)
    for p, h in zip(plain, hooked, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(p["grads"], h["grads"], strict=True))  # DDP's arithmetic
    for rank in hooked:
        assert abs(rank["local"] - rank["own_sq"]) < 1e-6 * rank["own_sq"]  # this rank's gradient, before
        assert abs(rank["averaged"] - rank["final_sq"]) < 1e-9 * rank["final_sq"]  # the averaged one, after
    assert hooked[0]["local"] != hooked[1]["local"] and hooked[0]["averaged"] == hooked[1]["averaged"]
    # the average of two different gradients is shorter than at least one of them
    assert hooked[0]["averaged"] < max(r["local"] for r in hooked)


def test_under_no_sync_it_sees_the_accumulated_gradient_once():
    whole, accumulated = launch(backward, 2, (True, 1), timeout=60), launch(backward, 2, (True, 3), timeout=60)
    for one, three in zip(whole, accumulated, strict=True):
        assert abs(one["local"] - three["local"]) < 1e-5 * one["local"]
        assert abs(one["averaged"] - three["averaged"]) < 1e-5 * one["averaged"]


def test_unscaled_divides_by_the_scale_squared_and_gives_none_for_an_overflowed_step():
    scale = 2.0**16  # float16's first GradScaler scale
    norms = GradientNorms(local=torch.tensor(3.0 * scale**2, dtype=torch.float64),
                          averaged=torch.tensor(2.0 * scale**2, dtype=torch.float64))
    local, averaged = norms.unscaled(scale)
    assert (local.item(), averaged) == (3.0, 2.0) and local.dtype == torch.float64
    assert [float(value) for value in norms.unscaled()] == [3.0 * scale**2, 2.0 * scale**2]  # no scaler: scale 1
    for overflowed in (math.inf, math.nan):  # an inf on one rank reaches the average as inf, or as nan (inf - inf)
        norms.averaged = torch.tensor(overflowed, dtype=torch.float64)
        assert norms.unscaled(scale) is None
