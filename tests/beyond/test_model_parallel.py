import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dpedu import RankFailedError, launch
from dpedu.beyond import model_parallel as mp


def _one_step(width, depth, batch):
    stage = mp.stage_of(mp.blocks(width, depth), dist.get_world_size(), dist.get_rank())
    x, y = mp.regression_data(batch, width)
    out = mp.forward_backward(stage, x, y)
    return out, [p.grad for p in stage.parameters()]


def _whole_step(width, depth, batch):
    model = mp.blocks(width, depth)
    x, y = mp.regression_data(batch, width)
    out = model(x)
    F.mse_loss(out, y).backward()
    return out.detach(), [p.grad for p in model.parameters()]


@pytest.mark.parametrize("world_size", [2, 3])
def test_one_step_over_ranks_equals_one_process(world_size):
    out, grads = _whole_step(8, 5, 6)  # 5 blocks over 3 ranks: uneven stages (1, 2, 2)
    ranks = launch(_one_step, world_size, args=(8, 5, 6))
    assert all(rank[0] is None for rank in ranks[:-1])
    torch.testing.assert_close(ranks[-1][0], out, rtol=1e-6, atol=1e-7)
    together = [g for rank in ranks for g in rank[1]]
    assert len(together) == len(grads)
    for got, want in zip(together, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_trained_parameters_equal_one_process_and_keep_their_names():
    alone = mp.train(steps=10, lr=0.5)
    ranks = launch(lambda: mp.train(steps=10, lr=0.5), 2)
    assert sorted(ranks[0]) == ["0.0.bias", "0.0.weight", "1.0.bias", "1.0.weight"]
    together = {**ranks[0], **ranks[1]}
    assert sorted(together) == sorted(alone)
    for name, value in together.items():
        torch.testing.assert_close(value, alone[name], rtol=1e-5, atol=1e-6)


def test_timeline_notes_a_forward_and_a_backward_per_rank_in_order():
    def timed():
        stage = mp.stage_of(mp.blocks(), 2, dist.get_rank())
        timeline = []
        mp.forward_backward(stage, *mp.regression_data(4), timeline)
        return timeline

    for timeline in launch(timed, 2):
        assert [what for what, _, _ in timeline] == ["forward", "backward"]
        assert all(start <= end for _, start, end in timeline)


def test_stages_split_the_blocks_in_order():
    model = mp.blocks(4, 5)
    parts = [mp.stage_of(model, 3, r) for r in range(3)]
    assert [len(p) for p in parts] == [1, 2, 2]
    assert [m for p in parts for m in p] == list(model)


def test_train_refuses_more_ranks_than_blocks():
    with pytest.raises(RankFailedError, match=r"ValueError: depth must be at least the number of ranks \(3\), got 2"):
        launch(lambda: mp.train(steps=1, lr=0.1, depth=2), 3)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: mp.blocks(0), ValueError, "width"),
    (lambda: mp.blocks(4, depth=0), ValueError, "depth"),
    (lambda: mp.stage_of([1, 2], 1, 0), TypeError, "model"),
    (lambda: mp.stage_of(mp.blocks(4, 2), 3, 0), ValueError, "stages"),
    (lambda: mp.stage_of(mp.blocks(4, 2), 2, 2), ValueError, "rank"),
    (lambda: mp.regression_data(0), ValueError, "batch"),
    (lambda: mp.train(steps=0, lr=0.1), ValueError, "steps"),
    (lambda: mp.train(steps=1, lr=-1.0), ValueError, "lr"),
    (lambda: mp.forward_backward([nn.Linear(4, 4)], *mp.regression_data(2, 4)), TypeError, "stage must be"),
    (lambda: mp.forward_backward(mp.blocks(4, 2), [[0.0] * 4], torch.zeros(1, 4)), TypeError, "x must be"),
    (lambda: mp.forward_backward(mp.blocks(4, 2), torch.zeros(1, 4), None), TypeError, "y must be"),
    (lambda: mp.forward_backward(mp.blocks(4, 2), *mp.regression_data(2, 4), timeline=()), TypeError, "timeline"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
