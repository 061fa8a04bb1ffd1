"""exercises.results: every check run in the kernel, with the question asked, its last verdict and its tries, for a
last cell."""

import importlib
import inspect
import pkgutil

import pytest

from dpedu import exercises
from dpedu.exercises import lesson03, lesson04, lesson13, results


@pytest.fixture(autouse=True)
def no_checks_run_yet(monkeypatch):
    monkeypatch.setattr(exercises, "_verdicts", {})


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


@pytest.mark.parametrize("check", list(checks()), ids=lambda check: f"{check.__module__[-8:]}.{check.__name__}")
def test_every_check_takes_its_answer_through_a_parameter_results_leaves_out_of_the_question(check):
    # otherwise every answer tried would be listed as a question of its own, each with one try
    assert set(inspect.signature(check).parameters) & exercises.ANSWER_PARAMETERS


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
