"""The model answers of dpedu.exercises.answers: one for every exercise, and each checked one accepted."""

import json
import re
from pathlib import Path

import pytest
import torch

from dpedu.beyond.pipeline import bubble_fraction
from dpedu.exercises import (
    answers,
    lesson00,
    lesson01,
    lesson02,
    lesson03,
    lesson04,
    lesson05,
    lesson06,
    lesson07,
    lesson08,
    lesson09,
    lesson10,
    lesson11,
    lesson12,
    lesson13,
    lesson14,
)
from dpedu.notebook.course import LESSONS

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _exercise_numbers(notebook: Path) -> list[int]:
    """The numbers of the exercises listed under the notebook's "## Exercises" heading."""
    for cell in json.loads(notebook.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and "## Exercises" in source:
            return [int(n) for n in re.findall(r"^(\d+)\. ", source.split("## Exercises", 1)[1], re.M)]
    return []


NUMBERS = sorted({int(lesson.id[:2]) for lesson in LESSONS})  # 08a and 08b are lesson 08 to the answers


@pytest.mark.parametrize("lesson", NUMBERS)
def test_every_exercise_of_every_lesson_has_an_answer(lesson, capsys):
    # a lesson in two sittings numbers its exercises on from 08a to 08b
    numbers = [n for notebook in sorted(NOTEBOOKS.glob(f"{lesson:02d}*_*.ipynb")) for n in _exercise_numbers(notebook)]
    assert numbers == list(range(1, len(numbers) + 1)) and len(numbers) >= 4
    assert sorted(n for number, n in answers.TEXTS if number == lesson) == numbers
    answers.answer(lesson)
    listing = capsys.readouterr().out
    assert all(f"exercise {n}: " in listing for n in numbers)
    for n in numbers:
        answers.answer(lesson, n)
        kind, text = answers.TEXTS[lesson, n]
        printed = capsys.readouterr().out
        assert kind.split(" + ")[0] in ("computed value", "code", "rubric") and text.strip() in printed
        assert "MEASURED" not in printed and len(text.split()) >= 15


def test_code_answers_are_printed_from_their_source_and_values_belong_to_exercises(capsys):
    assert set(answers.CODE) | set(answers.VALUES) <= set(answers.TEXTS)
    assert all(answers.TEXTS[key][0].startswith("code") for key in answers.CODE)
    answers.answer(9, 2)
    assert "def my_rank_and_size(environ" in capsys.readouterr().out


@pytest.mark.parametrize(("call", "name"), [(lambda: answers.answer(NUMBERS[-1] + 1), "lesson"),
                                            (lambda: answers.answer(3, 6), "exercise"),
                                            (lambda: answers.answer(3, 0), "exercise")])
def test_bad_arguments_are_refused_by_name(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_lesson00_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson00.sum_formula(answers.sum_of_rank_plus_one)
    assert lesson00.predict("PRODUCT", 4, values[0, 2]["PRODUCT"]) and lesson00.predict("MAX", 4, values[0, 2]["MAX"])
    assert lesson00.timeout_names(values[0, 4])


def test_lesson01_and_02_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson01.largest_stable_lr(values[1, 1])
    assert lesson01.minibatch_variance(10, values[1, 2])
    assert lesson01.noise_floor(0.02, 2, values[1, 3])
    assert all(lesson02.ring_bytes_per_worker(k, m, answers.ring_bytes(k, m)) for k, m in ((4, 4096), (8, 9600)))
    assert lesson02.shard_weights([200, 56], values[2, 2])
    assert lesson02.summed_loss_factor(8, values[2, 3])
    assert lesson02.towers_equal_uneven_ghost_batch_norm(values[2, 4])


def test_lesson03_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson03.samples_per_rank(10, 4, False, values[3, 1]["drop_last=False"])
    assert lesson03.samples_per_rank(10, 4, True, values[3, 1]["drop_last=True"])
    assert lesson03.allreduce_calls(5, 3, False, values[3, 2]["no_sync=False"])
    assert lesson03.allreduce_calls(5, 3, True, values[3, 2]["no_sync=True"])
    assert lesson03.summed_loss_lr(4, 0.004, values[3, 3])


def test_lesson04_answers_pass_the_checks():
    assert lesson04.all_reduce_from_messages(answers.tree_all_reduce)
    assert lesson04.all_gather_from_messages(answers.ring_all_gather)
    assert lesson04.ring_bytes_per_rank(100 * 2**20, 8, answers.VALUES[4, 3])
    alpha, beta = 204e-6, 0.63e-9  # the fit the lesson printed; any other works as well
    assert lesson04.ring_seconds(25 * 2**20, alpha, beta, 16, answers.ring_seconds(25 * 2**20, alpha, beta, 16))


def test_lesson05_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson05.buckets_per_step([3 * 2**20] * 4, 5, values[5, 1]["MiniDDP"], values[5, 1]["torch DDP"])
    assert lesson05.compressed_ring_bytes(25 * 2**20, 8, values[5, 3])
    assert lesson05.powersgd_fewer(4096, 4096, 4, values[5, 4])


def test_lesson06_and_07_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson06.largest_lr(3, 4.0, values[6, 1])
    assert lesson06.sync_round_time(4, values[6, 2])
    assert lesson06.mean_staleness(16, values[6, 3])
    assert lesson06.implicit_momentum(2, values[6, 5])
    assert lesson06.local_sgd_bytes(150_000_000, 10_000, 500, values[6, 6])
    assert lesson07.linear_scaling(0.1, 256, 2048, values[7, 1])
    assert lesson07.steps_at(100, 1000, 250, values[7, 2])
    assert lesson07.largest_base_lr(32, values[7, 3])


def test_lesson08_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson08.allreduces_per_step(3, values[8, 1])
    assert all(lesson08.must_share_seed(what, share) for what, share in values[8, 5].items())
    assert lesson08.unbiased_count([3, 1], 5, values[8, 2])
    assert all(lesson08.distinct_worker_streams(rule, 4, 2, count) for rule, count in values[8, 6].items())


def test_lesson08_ghost_batch_norm_normalises_each_chunk_on_its_own():
    x = torch.randn(6, 3, 2, 2, generator=torch.Generator().manual_seed(0))
    plain = torch.nn.BatchNorm2d(3)
    contiguous, interleaved = answers.GhostBatchNorm2d(3, 2), answers.GhostBatchNorm2d(3, 2, interleaved=True)
    assert torch.allclose(contiguous(x), torch.cat([plain(x[:3]), plain(x[3:])]), atol=1e-6)
    assert torch.allclose(interleaved(x)[0::2], plain(x[0::2]), atol=1e-6)
    assert torch.allclose(interleaved(x)[1::2], plain(x[1::2]), atol=1e-6)


def test_lesson09_to_11_answers_pass_the_checks():
    values = answers.VALUES
    assert lesson09.global_rank(8, 2, 3, values[9, 1])
    assert lesson09.rank_and_size(answers.my_rank_and_size)
    assert lesson09.bucket_milliseconds("100 GbE", 64, values[9, 3])
    assert lesson09.gradient_parameters("10 GbE", 8, 1.0, values[9, 4])
    assert lesson09.gradient_parameters("InfiniBand NDR", 8, 1.0, 40 * values[9, 4])  # the second half
    assert lesson09.torchrun_command(values[9, 5])
    eighty, one_batch = values[10, 3].values()
    assert all(lesson10.steps_per_epoch(80, workers, steps) for workers, steps in eighty.items())
    assert all(lesson10.steps_per_epoch(one_batch, workers, 17) for workers in (1, 2, 3, 4))
    assert lesson10.checkpoint_minutes(4096, 5, values[10, 4])
    assert lesson10.name_the_failures(values[10, 5])
    assert lesson11.zero_gigabytes(13e9, 16, 2, values[11, 1])
    assert lesson11.zero_gigabytes(13e9, 16, 2, 61.75, "autocast")  # the second half of the answer's text
    assert all(lesson11.survives_float16(value, survives) for value, survives in values[11, 2].items())
    assert lesson11.hsdp_gigabytes(7.5e9, 8, values[11, 4], "autocast")
    assert lesson11.kept_with_checkpointing(12, 128, 512, values[11, 5])
    assert lesson11.zero_one_slice(1732, 3, values[11, 3])


def test_lesson12_and_13_answers_pass_the_checks():
    values = answers.VALUES
    bubbles = values[12, 1]
    assert lesson12.bubble(4, 8, bubbles[8]) and lesson12.bubble(4, 16, bubbles[16])
    fewest = bubbles["fewest micro-batches under 10 %"]
    assert bubble_fraction(4, fewest) < 0.1 <= bubble_fraction(4, fewest - 1)
    assert all(lesson12.micro_batches_kept(kind, 4, 8, 1, kept) for kind, kept in values[12, 2].items())
    assert lesson12.layout_without_zero3(70e9, 64, 80, *values[12, 5].values())
    assert all(lesson12.group_ranks(8, 4, 6, group, ranks) for group, ranks in values[12, 6].items())
    assert lesson13.micro_batch(96, 3, 2, values[13, 1])
    assert lesson13.padding(1000, 16, values[13, 2])
    assert lesson13.learning_rate_at(50, values[13, 3])
    assert lesson13.training_flops(85_000_000, 12, 768, 1024, values[13, 5]["flops_per_token"])
    assert lesson13.model_flops_utilisation(1.5e6, values[13, 5]["flops_per_token"], 8, 312e12, values[13, 5]["mfu"])
    assert lesson13.stream_share(30, 4, 3, 1, 2, values[13, 6])
    assert all(lesson13.communication_share(0.05, 0.3, batch, share) for batch, share in values[13, 7].items())
    assert lesson14.examples_per_step(8, 4, 3, values[14, 1])
    assert lesson14.gathered(359, 50, 4, values[14, 2]["gather"])
    assert lesson14.twice_divided_lr(0.1, 4, values[14, 3])
