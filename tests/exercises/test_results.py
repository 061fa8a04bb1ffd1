"""exercises.results: every question a check was asked in the kernel, with its last verdict and its tries, for a
last cell; a lesson's own demonstrations (not_recorded) left out."""

import importlib
import inspect
import pkgutil

import numpy as np
import pytest

from dpedu import exercises
from dpedu.exercises import lesson03, lesson04, lesson05, lesson06, lesson12, lesson13, not_recorded, results


@pytest.fixture(autouse=True)
def no_checks_run_yet(monkeypatch):
    monkeypatch.setattr(exercises, "_verdicts", {})
    monkeypatch.setattr(exercises, "_printed", {})


def test_each_question_is_listed_once_in_the_order_first_run_with_its_last_verdict_and_tries(capsys):
    assert not lesson03.samples_per_rank(10, 4, False, 2)  # 3: padded up to 12
    assert lesson04.ring_bytes_per_rank(1000, 4, 1500)  # 2(p - 1)/p of the bytes
    assert lesson03.samples_per_rank(10, 4, False, 3)
    assert not lesson03.samples_per_rank(10, 4, True, 3)  # another question: 2 with drop_last
    capsys.readouterr()
    assert results() == {"lesson03.samples_per_rank(dataset_size=10, world_size=4, drop_last=False)": True,
                         "lesson04.ring_bytes_per_rank(nbytes=1000, world_size=4)": True,
                         "lesson03.samples_per_rank(dataset_size=10, world_size=4, drop_last=True)": False}
    assert capsys.readouterr().out.splitlines() == [
        "correct  lesson03.samples_per_rank(dataset_size=10, world_size=4, drop_last=False) (2 tries)",
        "correct  lesson04.ring_bytes_per_rank(nbytes=1000, world_size=4) (1 try)",
        "not yet  lesson03.samples_per_rank(dataset_size=10, world_size=4, drop_last=True) (1 try)"]


def test_a_setting_left_at_its_default_is_not_part_of_the_question_and_one_changed_is():
    lesson13.learning_rate_at(5, 1e-4)
    lesson13.learning_rate_at(5, 1e-4, warmup=100)  # the default, given: the same question
    lesson13.learning_rate_at(5, 1e-4, warmup=10)
    assert list(results()) == ["lesson13.learning_rate_at(step=5)", "lesson13.learning_rate_at(step=5, warmup=10)"]


def checks():
    """Every exercise check: the public functions of the lessonNN modules that return a verdict."""
    for info in pkgutil.iter_modules(exercises.__path__):
        if info.name.startswith("lesson"):
            module = importlib.import_module(f"{exercises.__name__}.{info.name}")
            yield from (function for name, function in vars(module).items()
                        if inspect.isfunction(function) and function.__module__ == module.__name__
                        and not name.startswith("_")
                        and inspect.signature(function).return_annotation in (bool, "bool"))


# The answer parameters of the checks that do not take theirs as ``answer``.
ANSWERS = {"lesson00.sum_formula": {"formula"}, "lesson00.predict": {"prediction"},
           "lesson04.all_reduce_from_messages": {"fn"}, "lesson04.all_gather_from_messages": {"fn"},
           "lesson05.buckets_per_step": {"mini", "torch_ddp"}, "lesson09.rank_and_size": {"my_function"},
           "lesson12.layout_without_zero3": {"tensor_parallel", "pipeline_parallel", "zero_stage"}}


@pytest.mark.parametrize("check", list(checks()), ids=lambda check: f"{check.__module__[-8:]}.{check.__name__}")
def test_results_leaves_out_of_each_checks_question_exactly_its_answer_parameters(check):
    # an answer left in would list every answer tried as a question of its own, each with one try; a question
    # parameter taken for an answer would merge two questions into one
    name = f"{check.__module__.rsplit('.', 1)[1]}.{check.__name__}"
    assert set(inspect.signature(check).parameters) & exercises.ANSWER_PARAMETERS == ANSWERS.get(name, {"answer"})


def test_one_question_written_two_ways_is_one_question():
    lesson06.largest_lr(3, 4.0, 0.1)
    lesson06.largest_lr(3, 4, 0.2)
    lesson06.largest_lr(3, np.float64(4.0), 0.3)
    lesson05.buckets_per_step((2**20, 2**20), 5, 1, 1)
    lesson05.buckets_per_step([2**20, 2**20], 5.0, 1, 1)
    assert list(results()) == ["lesson06.largest_lr(staleness=3, curvature=4)",
                               "lesson05.buckets_per_step(sizes=[1048576, 1048576], cap_mb=5)"]


def test_a_long_argument_is_shortened_in_print_and_the_arguments_after_it_stay(capsys):
    lesson05.buckets_per_step([2**20] * 40, 5, 1, 1)
    lesson05.buckets_per_step([2**20] * 40, 25, 1, 1)
    capsys.readouterr()
    assert len(results()) == 2
    assert [line.split("(", 1)[1] for line in capsys.readouterr().out.splitlines()] == [
        "sizes=[1048576, 1048576, 1048576, 1048576, ...], cap_mb=5) (1 try)",
        "sizes=[1048576, 1048576, 1048576, 1048576, ...], cap_mb=25) (1 try)"]


def test_checks_run_not_recorded_say_what_they_say_and_are_left_out_even_after_an_exception(capsys):
    with not_recorded():
        assert not lesson03.samples_per_rank(10, 4, True, 10)
        assert not lesson03.samples_per_rank(10, 4, False, 10)
    with pytest.raises(TypeError), not_recorded():
        lesson03.samples_per_rank(10, 4, "no", 3)
    assert "Not yet" in capsys.readouterr().out
    assert lesson03.samples_per_rank(10, 4, False, 3)
    capsys.readouterr()
    assert results() == {"lesson03.samples_per_rank(dataset_size=10, world_size=4, drop_last=False)": True}
    assert capsys.readouterr().out.endswith("(1 try)\n")


def test_a_check_through_a_helper_is_named_by_the_check_the_learner_called():
    def all_reduce(tensor):
        return tensor  # sums nothing: wrong on any world size but 1
    lesson04.all_reduce_from_messages(all_reduce)
    assert list(results()) == ["lesson04.all_reduce_from_messages()"]


def test_before_any_check_it_says_so(capsys):
    assert results() == {}
    assert "No exercise check has run" in capsys.readouterr().out


def test_without_the_answer_left_out_each_try_would_count_as_a_question_of_its_own(monkeypatch):
    monkeypatch.setattr(exercises, "ANSWER_PARAMETERS", frozenset())  # the mistake the test above guards against
    lesson13.learning_rate_at(5, 1e-4)
    lesson13.learning_rate_at(5, 2e-4)
    assert len(results()) == 2


def test_results_lists_group_questions_with_different_tensor_parallel_sizes_apart(capsys):
    """The size is part of the question, not of the answer: two sizes are two lines of the hand-in."""
    lesson12.group_ranks(4, 2, 3, "data", [1, 3])
    lesson12.group_ranks(4, 4, 3, "data", [3])
    results()
    printed = capsys.readouterr().out
    assert "tensor_parallel_size=2" in printed and "tensor_parallel_size=4" in printed
