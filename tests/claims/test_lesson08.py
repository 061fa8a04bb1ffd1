"""Lesson 08's "SyncBatchNorm equals full-batch BatchNorm" and "per-replica BatchNorm does not" catch what they
guard against: a SyncBatchNorm whose forward or backward all-reduce is skipped, or that divides the summed
statistics by this rank's count instead of the global one (sums, not means), fails the comparison the notebook
makes (``sync_batchnorm.largest_gap`` within 1e-5; ``equivalence.gradient_gap`` below 1e-5), while the correct
one passes; and per-replica BatchNorm on a rank that holds the whole batch fails "off by over 1e-3".

A broken subject is the course's own code with one line changed (``_broken``: the source edited and run again),
put in place inside the ranks only, so that each test breaks exactly what the lesson shows.
"""


import pytest

from claims.broken import changed, replaced
from dpedu import launch
from dpedu.data_parallel import equivalence, sync_batchnorm

BATCHES = [5, 1, 2]  # the notebook's uneven batches (cell 16)
FORWARD = "totals = _all_reduce(torch.cat([x64.sum(dims), (x64 * x64).sum(dims), count]))"
BACKWARD = "totals = _all_reduce(sums.clone())"
BROKEN = {
    "skips the forward all-reduce": [(FORWARD, FORWARD.replace("_all_reduce(", "(", 1))],
    "skips the backward all-reduce": [(BACKWARD, "totals = sums.clone()")],
    "sums, not means": [("n = totals[-1].item()", "n = count.item()")],  # global sums over this rank's count
}


def _with(mistake, run):
    """``run()`` with SyncBatchNorm's autograd function broken by ``mistake`` (None: as the course has it)."""
    function = sync_batchnorm._SyncBatchNormFunction
    function = changed(function, *BROKEN[mistake]) if mistake else function
    with replaced(sync_batchnorm, "_SyncBatchNormFunction", function):
        return run()


def _worst_gap(mistake):
    """The notebook's check of cell 16 on SyncBatchNorm (broken by ``mistake``): the largest gap over its keys."""
    reference = equivalence.batchnorm_step(BATCHES, "plain")  # this process: the whole batch of 8
    ranks = launch(lambda: _with(mistake, lambda: equivalence.batchnorm_step(BATCHES, "dpedu")), len(BATCHES))
    return {key: sync_batchnorm.largest_gap(ranks, reference, key) for key in reference}


@pytest.mark.parametrize("mistake", sorted(BROKEN))
def test_a_sync_batchnorm_that_skips_an_all_reduce_or_sums_fails_the_comparison(mistake):
    """Backs 08a cell 16: dpedu.SyncBatchNorm on 3 ranks of 5, 1 and 2 images equals nn.BatchNorm2d on the whole
    batch (every key within 1e-5, relative), and the same layer with its forward or backward all-reduce skipped,
    or dividing the global sums by this rank's count, fails that check."""
    assert max(_worst_gap(None).values()) < 1e-5
    gaps = _worst_gap(mistake)
    assert not all(gap < 1e-5 for gap in gaps.values()), gaps
    if mistake == "skips the backward all-reduce":  # the forward is right: only the input gradient is off
        assert gaps["output"] < 1e-5 and not gaps["input grad"] < 1e-5, gaps


def test_per_replica_batchnorm_on_the_whole_batch_fails_the_check_that_it_differs():
    """Backs 08a cell 16: per-replica nn.BatchNorm2d is off by over 1e-3 (relative) on every key; on one rank that
    holds the whole batch of 8 it is full-batch BatchNorm, and that check fails on every key."""
    reference = equivalence.batchnorm_step(BATCHES, "plain")
    ranks = launch(lambda: equivalence.batchnorm_step([sum(BATCHES)], "plain"), 1)
    assert not any(sync_batchnorm.largest_gap(ranks, reference, key) > 1e-3 for key in reference)


@pytest.mark.parametrize("mistake", [None, "skips the forward all-reduce", "sums, not means"])
def test_a_broken_sync_batchnorm_fails_the_gradient_gap_check(mistake):
    """Backs 08a cell 9: on 2 ranks dpedu.SyncBatchNorm's gradient gap from one process is below 1e-5 at every
    per-rank batch, and a SyncBatchNorm that skips its forward all-reduce, or sums, fails that check."""
    gaps = launch(lambda: _with(mistake, lambda: equivalence.gradient_gap([1, 8], "sync")), 2)[0]
    assert (max(gaps) < 1e-5) == (mistake is None), gaps
