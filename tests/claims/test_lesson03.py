"""Lesson 03's equalities catch the mistakes they guard against: DDP on N ranks of batch b equals one process
of batch N·b, DDP averages, and the replicas stay identical without any optimizer-state sync; gradients
that are not all-reduced, or summed instead of averaged, fail the same comparisons.

The broken subjects are ``digits_ddp.train`` itself, the loop the lesson runs, with a communication hook
(its ``comm_hook`` option) that breaks DDP's all-reduce one way each.
"""

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from dpedu import launch
from dpedu.data_parallel import digits_ddp
from dpedu.models import largest_difference

# Communication hooks take no annotations: DDP checks them.


def no_all_reduce(state, bucket):
    """Every rank keeps its own gradient: nothing is communicated, the replicas train apart."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def sum_not_mean(state, bucket):
    """The all-reduce without the division by the world size: the sum of the ranks' gradients."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda done: done.value()[0])


def rank_1_keeps_its_own(state, bucket):
    """Rank 1 takes part in DDP's all-reduce but steps with its own gradient (rank 0 gets the true mean)."""
    own = bucket.buffer().clone()
    return allreduce_hook(state, bucket).then(lambda done: own if dist.get_rank() == 1 else done.value())


BROKEN = {"no all-reduce": no_all_reduce, "sum, not mean": sum_not_mean, "rank 1 keeps its own": rank_1_keeps_its_own}


def each_hook(**settings):
    """In each rank: ``digits_ddp.train`` with DDP's own all-reduce (``None``) and with each broken hook."""
    hooks = {"DDP": None, **BROKEN}
    return {name: digits_ddp.train(comm_hook=hook, **settings)["model"] for name, hook in hooks.items()}


def test_ddp_with_a_broken_all_reduce_fails_the_single_process_comparison():
    """Backs 03 cell 20: 2 ranks x 32 examples agree with 1 process x 64 within 1e-6 (rank 0's parameters
    after 10 steps), and DDP whose gradients are not all-reduced, are summed instead of averaged, or are
    averaged but ignored on rank 1 (whose next gradients then pull rank 0 away too) fails that bound."""
    reference = digits_ddp.train(steps=10, batch_size=64, lr=0.1, ddp=False)  # cell 20's reference
    states = launch(lambda: each_hook(steps=10, batch_size=32, lr=0.1), 2)
    assert largest_difference(states[0]["DDP"], reference["model"]) < 1e-6  # cell 20's check
    for name in BROKEN:
        difference = largest_difference(states[0][name], reference["model"])
        assert not difference < 1e-6, (name, difference)


def test_ddp_that_sums_fails_the_half_learning_rate_comparison():
    """Backs 03 cell 22: with a summed loss, DDP on 2 ranks at lr 0.002 agrees with one process at lr 0.001
    within 1e-6 (DDP averages), and DDP that sums the ranks' gradients instead fails that bound."""
    lr = 0.002
    states = launch(lambda: {name: digits_ddp.train(steps=10, batch_size=32, lr=lr, reduction="sum",
                                                    comm_hook=hook)["model"]
                             for name, hook in (("DDP", None), ("sum, not mean", sum_not_mean))}, 2)
    single_half_lr = digits_ddp.train(steps=10, batch_size=64, lr=lr / 2, ddp=False, reduction="sum")["model"]
    assert largest_difference(states[0]["DDP"], single_half_lr) < 1e-6  # cell 22's check
    assert not largest_difference(states[0]["sum, not mean"], single_half_lr) < 1e-6


def adam_on_every_rank(hook):
    """Cell 29's run, with ``hook`` as DDP's all-reduce: 20 Adam steps, then the cell's two comparisons."""
    state = digits_ddp.train(steps=20, batch_size=32, lr=0.01, optimizer="adam", comm_hook=hook)
    return state, digits_ddp.same_parameters_on_every_rank(state)


def identical_moments(state0, state1):
    """Cell 29's comparison of the two ranks' Adam moments."""
    adam0, adam1 = state0["optimizer"]["state"], state1["optimizer"]["state"]
    return all(torch.equal(adam0[i][m], adam1[i][m]) for i in adam0 for m in ("exp_avg", "exp_avg_sq"))


def test_replicas_that_skip_the_all_reduce_fail_the_identical_replicas_check():
    """Backs 03 cell 29: after 20 Adam steps under DDP both ranks hold bit-identical parameters and Adam
    moments, and replicas whose gradients are not all-reduced, or not used on one rank, fail both checks."""
    runs = launch(lambda: {name: adam_on_every_rank(hook) for name, hook in
                           (("DDP", None), ("no all-reduce", no_all_reduce),
                            ("rank 1 keeps its own", rank_1_keeps_its_own))}, 2)
    for name in ("DDP", "no all-reduce", "rank 1 keeps its own"):
        (state0, same0), (state1, same1) = runs[0][name], runs[1][name]
        passes = same0 and same1 and identical_moments(state0, state1)  # cell 29's check
        assert passes == (name == "DDP"), (name, same0, same1)
