"""dpedu.frameworks.accelerate_loop: the loop by hand and with accelerate train alike, one all-reduce an update;
the script as one plain process and under `accelerate launch --cpu` trains alone. Lesson 14 (part 5) runs the script
under `accelerate launch --multi_gpu` and under torchrun in passes 1, 2 and 3 of CI and asserts the first within 1e-6
of its in-process run and the second within 1e-6 of the first."""

import sys

import pytest
import torch

import dpedu
from dpedu.frameworks.accelerate_loop import (
    Record,
    Settings,
    one_all_reduce_per_update,
    same_run,
    train_by_hand,
    train_with_accelerate,
)

SHORT = Settings(steps=6)


@pytest.fixture(scope="module")
def both():
    return dpedu.launch(train_by_hand, 2, (SHORT,)), dpedu.launch(train_with_accelerate, 2, (SHORT,))


def test_the_two_loops_train_alike(both):
    by_hand, accelerated = both
    assert same_run(by_hand, accelerated) and all(one_all_reduce_per_update(run, SHORT) for run in both)
    assert torch.equal(by_hand[0].parameters, by_hand[1].parameters)
    assert torch.equal(accelerated[0].parameters, accelerated[1].parameters)
    assert (by_hand[0].parameters - accelerated[0].parameters).abs().max() <= 1e-6
    start = torch.nn.utils.parameters_to_vector(dpedu.models.mlp(64, 32, 10, seed=0).parameters())
    assert (by_hand[0].parameters - start).abs().max() > 1e-2  # it did train


def test_one_all_reduce_and_one_update_per_step(both):
    for record in (*both[0], *both[1]):
        assert record.all_reduces == SHORT.steps and record.optimizer_steps == SHORT.steps


def test_each_loop_reads_the_same_examples_per_step_dealt_differently(both):
    by_hand, accelerated = both
    m = SHORT.micro_batch
    assert by_hand[0].indices[0] == list(range(0, 2 * m, 2)) and by_hand[1].indices[0] == list(range(1, 2 * m, 2))
    assert accelerated[0].indices[0] == list(range(m)) and accelerated[1].indices[0] == list(range(m, 2 * m))
    for run in both:
        assert len(run[0].indices) == SHORT.steps * SHORT.accumulate
        assert [sorted(a + b) for a, b in zip(run[0].indices, run[1].indices, strict=True)] == [
            list(range(2 * m * i, 2 * m * (i + 1))) for i in range(SHORT.steps * SHORT.accumulate)]


def test_the_clip_fires_on_some_steps_only_and_the_losses_are_recorded_per_step(both):
    for record in (*both[0], *both[1]):
        assert 0 < record.clipped_steps < SHORT.steps and len(record.losses) == SHORT.steps
        assert all(0 < loss < 5 for loss in record.losses)
    assert len({record.clipped_steps for record in (*both[0], *both[1])}) == 1
    global_losses = [[sum(step) / 2 for step in zip(run[0].losses, run[1].losses, strict=True)] for run in both]
    assert max(abs(a - b) for a, b in zip(*global_losses, strict=True)) <= 1e-5  # the same examples per step


def test_gather_keeps_the_padding_gather_for_metrics_drops_it(both):
    evaluated = both[1][0].evaluated
    assert evaluated["gather"] == 384 and evaluated["gather_for_metrics"] == 359
    assert 0 < evaluated["correct"] <= 359


def test_adam_barely_notices_the_loss_divided_twice():
    settings = {"steps": 6, "clip": None, "optimizer": "adam", "lr": 0.01}
    twice = dpedu.launch(train_with_accelerate, 2, (Settings(**settings, extra_division=True),))[0]
    once = dpedu.launch(train_with_accelerate, 2, (Settings(**settings),))[0]
    assert (twice.parameters - once.parameters).abs().max() <= 1e-4


def test_dividing_twice_is_halving_the_learning_rate():
    twice = dpedu.launch(train_with_accelerate, 2, (Settings(steps=6, clip=None, extra_division=True),))[0]
    half = dpedu.launch(train_by_hand, 2, (Settings(steps=6, clip=None, lr=0.025),))[0]
    assert (twice.parameters - half.parameters).abs().max() <= 1e-6


@pytest.mark.parametrize("bad,match", [({"steps": 0}, "steps"), ({"lr": -0.1}, "lr"), ({"momentum": 1.5}, "momentum"),
                                       ({"clip": 0.0}, "clip"), ({"micro_batch": 2.5}, "micro_batch"),
                                       ({"optimizer": "lamb"}, "optimizer")])
def test_settings_name_bad_values(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        Settings(**bad)


def test_a_run_longer_than_an_epoch_is_refused_by_name():
    with pytest.raises(dpedu.RankFailedError, match="lower steps or micro_batch"):
        dpedu.launch(train_by_hand, 2, (Settings(steps=100),))


def test_the_script_runs_as_one_plain_process_and_under_accelerate_launch_cpu_it_trains_alone(tmp_path):
    """Backs lesson 14's part 5: under `accelerate launch --cpu --num_processes 2` the script trains alone (one
    rank's result on the whole data, not two ranks'), as it does started as a plain process (it asks the
    Accelerator, not torch.distributed, which rank it is). HF_HOME: no `accelerate config` of this machine's
    may change the launch."""
    env = {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "DPEDU_QUIET": "1", "HF_HOME": str(tmp_path / "hf")}
    script = ["-m", "dpedu.scripts.train_accelerate", "--steps", str(SHORT.steps)]
    trap = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "2",
            "--mixed_precision", "no", "--dynamo_backend", "no"]
    done = dpedu.run_together([[sys.executable, *script, "--out", str(tmp_path / "alone.pt")],
                               trap + script + ["--out", str(tmp_path / "trap.pt")]], timeout=120, env=env)
    assert all(result.returncode == 0 for result in done), [result.stderr[-2000:] for result in done]
    alone = dpedu.launch(train_by_hand, 1, (SHORT,))[0].parameters  # one rank with the whole data
    for name in ("alone.pt", "trap.pt"):
        assert (torch.load(tmp_path / name) - alone).abs().max() <= 1e-6


def _record(values, all_reduces=3, optimizer_steps=3) -> Record:
    return Record(parameters=torch.tensor(values), all_reduces=all_reduces, optimizer_steps=optimizer_steps)


def test_same_run_needs_identical_replicas_and_agreement_within_the_bound():
    one = [_record([0.0, 1.0]), _record([0.0, 1.0])]
    assert same_run(one, [_record([0.0, 1.0 + 5e-7])] * 2)
    assert not same_run(one, [_record([0.0, 1.0 + 5e-6])] * 2)
    assert not same_run(one, [_record([0.0, 1.0]), _record([0.0, 1.0 + 1e-7])])  # replicas that differ at all
    assert same_run(one, [_record([0.0, 1.01])] * 2, within=0.1)


def test_one_all_reduce_per_update_counts_every_rank():
    settings = Settings(steps=3)
    assert one_all_reduce_per_update([_record([0.0]), _record([0.0])], settings)
    assert not one_all_reduce_per_update([_record([0.0]), _record([0.0], all_reduces=6)], settings)
    assert not one_all_reduce_per_update([_record([0.0], all_reduces=2, optimizer_steps=2)], settings)


def _processes_seen(cpu: bool) -> int:
    from accelerate import Accelerator

    return Accelerator(cpu=cpu).num_processes


@pytest.mark.skipif(torch.cuda.is_available(), reason="the trap is on machines without GPUs")
def test_without_gpus_a_plain_accelerator_does_not_join_the_ranks_and_the_loop_refuses_it():
    # accelerate >= 1.13: only cpu=True chooses gloo on a machine without GPUs; a plain Accelerator() reports one
    # process of the two launched (when a release changes this, the lesson's part 5 and the script's docstring do)
    assert dpedu.launch(_processes_seen, 2, (False,)) == [1, 1]
    assert dpedu.launch(_processes_seen, 2, (True,)) == [2, 2]
    with pytest.raises(dpedu.RankFailedError, match="pass cpu=True"):
        dpedu.launch(train_with_accelerate, 2, (Settings(steps=1), False))
