"""dpedu.training_run.batches: the same global batches for any number of ranks and micro-batches, and a
mid-epoch start that yields exactly the rest of the epoch."""

import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from dpedu.training_run.batches import epoch_batches, micro_batch_size, steps_per_epoch

TOKENS = torch.arange(103).unsqueeze(1).repeat(1, 3)  # row i holds i: batches show which examples they hold


def global_batches(world: int, accumulate: int, epoch: int, first_step: int = 0, global_batch: int = 12):
    """Each step's examples over all ranks, from ranks built without a process group (explicit rank, world)."""
    micro = micro_batch_size(global_batch, world, accumulate)
    ranks = [list(epoch_batches(TOKENS, DistributedSampler(TOKENS, num_replicas=world, rank=r, seed=5), epoch,
                                micro_batch=micro, accumulate=accumulate, first_step=first_step))
             for r in range(world)]
    assert all(len(step) == accumulate and all(len(b) == micro for b in step) for rank in ranks for step in rank)
    return [sorted(torch.cat([b[:, 0] for rank in ranks for b in rank[s]]).tolist()) for s in range(len(ranks[0]))]


@pytest.mark.parametrize(("world", "accumulate"), [(2, 1), (3, 2), (4, 3), (1, 4)])
def test_every_step_sees_the_same_examples_on_any_number_of_ranks(world, accumulate):
    one = global_batches(1, 1, epoch=2)
    assert len(one) == steps_per_epoch(103, 12) == 8  # 96 examples used, 7 left out, no padding reached
    assert global_batches(world, accumulate, epoch=2) == one
    assert all(len(set(step)) == 12 for step in one) and len({i for step in one for i in step}) == 96


def test_set_epoch_reshuffles_and_a_mid_epoch_start_yields_the_rest_of_the_epoch():
    assert global_batches(2, 1, epoch=0) != global_batches(2, 1, epoch=1)
    assert global_batches(2, 2, epoch=1, first_step=5) == global_batches(1, 1, epoch=1)[5:]
    assert global_batches(2, 1, epoch=1, first_step=8) == []


def test_a_global_batch_that_does_not_split_is_refused_naming_the_argument():
    assert micro_batch_size(64, 4, 2) == 8
    with pytest.raises(ValueError, match="--global-batch 64 must be a multiple of ranks x --accumulate = 3 x 1"):
        micro_batch_size(64, 3, 1)
    with pytest.raises(ValueError, match="--global-batch 200 is larger than the 103 training examples"):
        steps_per_epoch(103, 200)


def test_loading_an_epoch_leaves_the_global_random_state_alone():
    """Else a run resumed mid-epoch, which starts a new loader where the other did not, would draw other dropout."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    global_batches(2, 1, epoch=0, first_step=3)
    assert torch.equal(torch.get_rng_state(), before)
