import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from dpedu import RankFailedError, launch
from dpedu.beyond import model_parallel as mp
from dpedu.beyond import pipeline


@pytest.mark.parametrize("kind", pipeline.SCHEDULES)
@pytest.mark.parametrize(("stages", "micro_batches"), [(1, 1), (2, 1), (2, 5), (4, 3), (4, 8), (5, 2)])
def test_every_stage_runs_each_micro_batch_once_forward_before_backward(kind, stages, micro_batches):
    for stage in range(stages):
        ops = pipeline.schedule(kind, stages, micro_batches, stage)
        every = [(what, i) for what in "FB" for i in range(micro_batches)]
        assert sorted(ops) == sorted(every)
        assert [i for what, i in ops if what == "F"] == list(range(micro_batches))
        peak = pipeline.peak_in_flight(ops)  # also refuses a backward before its forward
        assert peak == (micro_batches if kind == "gpipe" else min(micro_batches, stages - stage))


def test_1f1b_is_the_published_order():
    assert pipeline.schedule("1f1b", 4, 6, 1) == [("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3), ("B", 1),
                                                   ("F", 4), ("B", 2), ("F", 5), ("B", 3), ("B", 4), ("B", 5)]


def test_peak_in_flight_refuses_a_backward_before_its_forward():
    with pytest.raises(ValueError, match="before its forward"):
        pipeline.peak_in_flight([("B", 0), ("F", 0)])
    assert pipeline.peak_in_flight([]) == 0


@pytest.mark.parametrize(("p", "m", "bubble"), [(1, 4, 0.0), (2, 1, 0.5), (4, 8, 3 / 11), (4, 16, 3 / 19)])
def test_bubble_fraction(p, m, bubble):
    assert pipeline.bubble_fraction(p, m) == pytest.approx(bubble)


def _step(kind, micro_batches, work_s=0.0):
    stage = mp.stage_of(mp.blocks(8, 4), dist.get_world_size(), dist.get_rank())
    x, y = mp.regression_data(24, 8)
    run = pipeline.run_schedule(stage, kind, x, y, micro_batches, work_s)
    return run, [p.grad for p in stage.parameters()]


@pytest.mark.parametrize("kind", pipeline.SCHEDULES)
@pytest.mark.parametrize(("world_size", "micro_batches"), [(2, 1), (2, 3), (3, 4), (4, 6)])
def test_micro_batched_gradients_equal_the_whole_batch(kind, world_size, micro_batches):
    model = mp.blocks(8, 4)
    x, y = mp.regression_data(24, 8)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    ranks = launch(_step, world_size, args=(kind, micro_batches))
    grads = [g for _, rank_grads in ranks for g in rank_grads]
    for got, want in zip(grads, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert ranks[-1][0]["loss"] == pytest.approx(loss.item(), rel=1e-5)
    assert all(run["loss"] is None for run, _ in ranks[:-1])


def test_1f1b_keeps_fewer_bytes_in_proportion_to_micro_batches_in_flight():
    gpipe = [run["peak_kept_bytes"] for run, _ in launch(_step, 3, args=("gpipe", 6))]
    one_f_one_b = [run["peak_kept_bytes"] for run, _ in launch(_step, 3, args=("1f1b", 6))]
    assert [b * 6 for b in one_f_one_b] == [g * (3 - r) for r, g in enumerate(gpipe)]
    # GPipe keeps every micro-batch: the whole batch's activations, as without micro-batches
    assert gpipe == [run["peak_kept_bytes"] for run, _ in launch(_step, 3, args=("gpipe", 1))]
    assert all(g > 0 for g in gpipe)


def test_measured_idle_share_follows_the_bubble_formula():
    ranks = launch(_step, 2, args=("gpipe", 1, 0.2))
    idle = pipeline.idle_fraction([run["timeline"] for run, _ in ranks])
    assert idle == pytest.approx(0.5, abs=0.1)  # generous: a loaded machine delays the messages


def _steps(kind, micro_batches, work_s, steps):
    stage = mp.stage_of(mp.blocks(8, 4), dist.get_world_size(), dist.get_rank())
    x, y = mp.regression_data(24, 8)
    return [pipeline.run_schedule(stage, kind, x, y, micro_batches, work_s)["timeline"] for _ in range(steps)]


def test_micro_batches_overlap_across_stages():
    # p = 2, m = 4: the formula gives 0.2, one more idle slot per stage 1/3, and stages that took turns
    # (no micro-batch overlapping another stage's) at least 0.5 on any machine. Load only delays the
    # stages' wake-ups (their work is a sleep), which adds idle time: the best of 3 steps counts.
    ranks = launch(_steps, 2, args=("gpipe", 4, 0.4, 3))
    idle = min(pipeline.idle_fraction([rank[k] for rank in ranks]) for k in range(3))
    assert pipeline.bubble_fraction(2, 4) - 0.05 < idle < pipeline.one_more_slot(2, 4), idle


def test_the_bubble_checks():
    formula = [pipeline.bubble_fraction(4, m) for m in (1, 2, 4, 8)]
    assert pipeline.follows_bubble(4, [1, 2, 4, 8], formula)
    assert not pipeline.follows_bubble(4, [1, 2, 4, 8], [pipeline.one_more_slot(4, m) for m in (1, 2, 4, 8)])
    assert not pipeline.follows_bubble(4, [1, 2, 4, 8], [f - 0.06 for f in formula])
    assert pipeline.one_more_slot(2, 4) == pytest.approx(1 / 3)
    assert pipeline.stages_overlap(2, 0.39) and not pipeline.stages_overlap(2, 0.41)
    assert pipeline.relative_gap([(torch.ones(2), 2 * torch.ones(2)), (torch.zeros(1), torch.ones(1))]) == 1.0


def test_idle_fraction_of_a_handmade_timeline():
    assert pipeline.idle_fraction([[("F", 0, 0.0, 1.0)], [("F", 0, 1.0, 2.0)]]) == pytest.approx(0.5)
    assert pipeline.idle_fraction([[("F", 0, 0.0, 1.0)], [("F", 0, 0.0, 1.0)]]) == pytest.approx(0.0)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: pipeline.schedule("zb", 2, 2, 0), ValueError, "kind"),
    (lambda: pipeline.schedule("gpipe", 0, 2, 0), ValueError, "stages"),
    (lambda: pipeline.schedule("gpipe", 2, 0, 0), ValueError, "micro_batches"),
    (lambda: pipeline.schedule("1f1b", 2, 2, 2), ValueError, "stage"),
    (lambda: pipeline.peak_in_flight("F0 B0"), ValueError, "ops"),
    (lambda: pipeline.peak_in_flight([("X", 0)]), ValueError, "ops"),
    (lambda: pipeline.bubble_fraction(2, 0), ValueError, "micro_batches"),
    (lambda: pipeline.idle_fraction([]), ValueError, "timelines"),
    (lambda: pipeline.idle_fraction([[("F", 0, 0.0, 1.0)], []]), ValueError, "timelines"),
    (lambda: pipeline.follows_bubble(2, [1, 2], [0.5]), ValueError, "idle"),
    (lambda: pipeline.stages_overlap(1, 0.0), ValueError, "stages"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_run_schedule_refuses_bad_arguments_by_name():
    def attempts():
        stage = mp.stage_of(mp.blocks(8, 2), 2, dist.get_rank())
        x, y = mp.regression_data(6, 8)
        messages = []
        for args in ((stage, "gpipe", x, y, 4), (stage, "gpipe", x, y[:3], 2), (stage, "gpipe", x, y, 2, -1.0),
                     (stage, "gpipe", x.tolist(), y, 2), (stage, "gpipe", x, "y", 2), (stage, "pipedream", x, y, 2),
                     (list(stage), "gpipe", x, y, 2)):
            try:
                pipeline.run_schedule(*args)
                messages.append("")
            except (TypeError, ValueError) as error:
                messages.append(str(error))
        return messages

    messages = launch(attempts, 2)[0]
    names = ["micro_batches", "micro_batches", "work_s", "x must", "y must", "kind", "stage must"]
    for message, name in zip(messages, names, strict=True):
        assert name in message


def test_run_schedule_refuses_a_stage_that_changes_the_shape_before_sending():
    def narrowing():
        x, y = mp.regression_data(6, 8)
        return pipeline.run_schedule(nn.Linear(8, 4), "gpipe", x, y, 2)

    with pytest.raises(RankFailedError, match=r"stage \(rank 0\) must return its input's shape \(3, 8\), got \(3, 4\)"):
        launch(narrowing, 2)
