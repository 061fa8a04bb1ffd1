"""dpedu.training_run.step: accumulated micro-batches under no_sync are one all-reduce per step and the same
update as one big batch; the replicas stay identical."""

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu import launch
from dpedu.training_run import replicas
from dpedu.training_run.addition import VOCABULARY, addition_splits
from dpedu.training_run.gpt import GPT
from dpedu.training_run.step import train_step


def one_step(accumulate: int) -> tuple[int, float, list[torch.Tensor], bool]:
    """On each of 2 ranks: one step on this rank's 24 examples in ``accumulate`` micro-batches."""
    rank = torch.distributed.get_rank()
    tokens = addition_splits(2, train=48, heldout=1, seed=0).train[rank::2]
    torch.manual_seed(0)
    model = GPT(len(VOCABULARY), 8)
    ddp = DDP(model)
    calls = []

    def counting_hook(state, bucket):
        calls.append(bucket.index())
        return allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, counting_hook)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    loss = train_step(ddp, list(tokens.split(24 // accumulate)), optimizer, scaler, digits=2, clip=1e9,
                      precision="float32")
    buckets = len(set(calls))
    return len(calls) // buckets, replicas.global_mean(loss).item(), [p.detach() for p in model.parameters()], \
        replicas.replicas_identical(model)


def test_accumulation_under_no_sync_all_reduces_once_and_equals_one_big_batch():
    (all_reduces, loss, whole, same), _ = launch(one_step, 2, (1,), timeout=60)
    (all_reduces_3, loss_3, accumulated, same_3), _ = launch(one_step, 2, (3,), timeout=60)
    assert all_reduces == all_reduces_3 == 1  # per bucket: once per step, not once per micro-batch
    assert same and same_3
    assert abs(loss - loss_3) < 1e-6
    assert max((a - b).abs().max().item() for a, b in zip(whole, accumulated, strict=True)) < 1e-6
