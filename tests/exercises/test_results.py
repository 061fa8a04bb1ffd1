"""exercises.results: every check run in the kernel, with its last verdict and its tries, for a last cell."""

import pytest

from dpedu import exercises
from dpedu.exercises import lesson03, lesson04, results


@pytest.fixture(autouse=True)
def no_checks_run_yet(monkeypatch):
    monkeypatch.setattr(exercises, "_verdicts", {})


def test_each_check_is_listed_once_in_the_order_first_run_with_its_last_verdict_and_tries(capsys):
    assert not lesson03.samples_per_rank(10, 4, False, 2)  # 3: padded up to 12
    assert lesson04.ring_bytes_per_rank(1000, 4, 1500)  # 2(p - 1)/p of the bytes
    assert lesson03.samples_per_rank(10, 4, False, 3)
    assert not lesson03.samples_per_rank(10, 4, True, 3)  # 2 with drop_last
    capsys.readouterr()
    assert results() == {"lesson03.samples_per_rank": False, "lesson04.ring_bytes_per_rank": True}
    assert capsys.readouterr().out.splitlines() == ["not yet  lesson03.samples_per_rank (3 tries)",
                                                    "correct  lesson04.ring_bytes_per_rank (1 try)"]


def test_a_check_through_a_helper_is_named_by_the_check_the_learner_called():
    def all_reduce(tensor):
        return tensor  # sums nothing: wrong on any world size but 1
    lesson04.all_reduce_from_messages(all_reduce)
    assert list(results()) == ["lesson04.all_reduce_from_messages"]


def test_before_any_check_it_says_so(capsys):
    assert results() == {}
    assert "No exercise check has run" in capsys.readouterr().out
