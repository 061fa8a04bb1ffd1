"""Lesson 12's pipeline and tensor-parallel checks catch what they guard against: a pipeline whose stages take
turns (each micro-batch through every stage, forward and backward, before the next one starts) fails both the
always-asserted overlap check and the bubble formula check; a tensor-parallel block missing its all-reduce in
forward or in backward fails the comparison with the unsplit block (``pipeline.relative_gap``, within 1e-5).

A broken subject is the course's own code with one line changed (``_broken``: the source edited and run again),
put in place inside the ranks only, so that each test breaks exactly what the lesson shows.
"""


import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from claims.broken import changed, replaced
from dpedu import launch
from dpedu.beyond import model_parallel, pipeline

MICRO_BATCHES = [1, 2, 4, 8]  # the notebook's
GPIPE = 'return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]'
IN_TURN = 'return [(what, i) for i in range(m) for what in "FB"]'  # F0 B0 F1 B1 ...: one micro-batch at a time
ALL_REDUCE = "    dist.all_reduce(tensor, group=group)\n"


def _timed_in_turn(kind, work_s):
    """The notebook's timed_schedules, with a schedule that runs each micro-batch's forward and backward before
    the next micro-batch's forward: every stage waits for the whole pipeline, micro-batch after micro-batch."""
    stage = model_parallel.stage_of(model_parallel.blocks(), dist.get_world_size(), dist.get_rank())
    x, y = model_parallel.regression_data(32)
    with replaced(pipeline, "schedule", changed(pipeline.schedule, (GPIPE, IN_TURN))):
        return [pipeline.run_schedule(stage, kind, x, y, m, work_s)["timeline"] for m in MICRO_BATCHES]


@pytest.mark.parametrize("p", [2, 4])
def test_a_pipeline_whose_stages_take_turns_fails_the_bubble_checks(p):
    """Backs 12a cell 15: a GPipe run whose stages take turns, one micro-batch at a time, idles (p - 1)/p at every
    m, and fails both the always-asserted check (stages_overlap on the best of 4 and 8 micro-batches) and the
    tight one (follows_bubble), on any machine: load only adds to its idle time."""
    ranks = launch(_timed_in_turn, p, args=("gpipe", 0.05))  # the notebook's 0.25 s, shortened: same shares
    measured = [pipeline.idle_fraction([rank[j] for rank in ranks]) for j in range(len(MICRO_BATCHES))]
    assert min(measured) > (p - 1) / p - 0.02, measured  # the subject is what it says: no overlap at any m
    assert not pipeline.stages_overlap(p, min(measured[2:]))
    assert not pipeline.follows_bubble(p, MICRO_BATCHES, measured)


def _megatron_block(x, A, B, edits):
    """The notebook's megatron_block, over model_parallel._all_reduce changed by ``edits``."""
    r, n = dist.get_rank(), dist.get_world_size()
    with replaced(model_parallel, "_all_reduce", changed(model_parallel._all_reduce, *edits)):
        A_r, B_r = A.chunk(n, dim=1)[r].clone().requires_grad_(), B.chunk(n, dim=0)[r].clone().requires_grad_()
        x, all_reduces = x.clone().requires_grad_(), []
        y = model_parallel.megatron_mlp(x, A_r, B_r, log=all_reduces)
        y.pow(2).sum().backward()
    return y.detach(), x.grad, A_r.grad, B_r.grad, all_reduces


def _gap_from_the_unsplit_block(edits):
    """The notebook's comparison: every rank's output and input gradient, and the ranks' weight-gradient
    slices put together, against one process's unsplit block."""
    generator = torch.Generator().manual_seed(0)
    x, A, B = (torch.randn(*shape, generator=generator) for shape in ((8, 16), (16, 64), (64, 16)))
    ranks = launch(_megatron_block, 4, args=(x, A, B, edits))
    whole_x, whole_A, whole_B = (t.clone().requires_grad_() for t in (x, A, B))
    y = F.gelu(whole_x @ whole_A) @ whole_B
    y.pow(2).sum().backward()
    pairs = [(rank[0], y.detach()) for rank in ranks] + [(rank[1], whole_x.grad) for rank in ranks]
    pairs += [(torch.cat([rank[2] for rank in ranks], 1), whole_A.grad),
              (torch.cat([rank[3] for rank in ranks], 0), whole_B.grad)]
    return pipeline.relative_gap(pairs), [rank[4] for rank in ranks]


@pytest.mark.parametrize("skipped", ["forward", "backward"])
def test_a_tensor_parallel_block_missing_an_all_reduce_fails_the_comparison(skipped):
    """Backs 12a cell 22: Megatron's MLP block split over 4 ranks equals the unsplit block (within 1e-5, relative),
    and the same block with its forward (g) or its backward (f) all-reduce skipped fails that check, though it
    still logs both all-reduces."""
    gap, logs = _gap_from_the_unsplit_block([])
    assert gap < 1e-5 and all(log == ["forward", "backward"] for log in logs)
    only_the_other = f'    if when != "{skipped}":\n    ' + ALL_REDUCE
    gap, logs = _gap_from_the_unsplit_block([(ALL_REDUCE, only_the_other)])
    assert all(log == ["forward", "backward"] for log in logs)
    assert not gap < 1e-5, gap
