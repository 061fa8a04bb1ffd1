import pytest

from dpedu.exercises import lesson00
from dpedu.exercises.lesson00 import predict, sum_formula


def test_sum_formula_check_accepts_the_right_formula_only(capsys):
    assert sum_formula(lambda n: n * (n + 1) / 2, world_sizes=(1, 3))
    assert not sum_formula(lambda n: n * n, world_sizes=(1, 3))
    assert "on [3] ranks" in capsys.readouterr().out


def test_predictions_are_checked_against_a_real_all_reduce():
    assert predict("PRODUCT", 4, 24.0)
    assert predict("MAX", 3, 3.0)
    assert not predict("MIN", 3, 3.0)


@pytest.mark.parametrize(("op", "size", "name"), [("AVG", 2, "op_name"), ("SUM", 0, "world_size"),
                                                  ("SUM", 9, "world_size")])
def test_bad_predictions_arguments_name_the_argument(op, size, name):
    with pytest.raises(ValueError, match=name):
        predict(op, size, 1.0)


def test_timeout_check_runs_the_hang_and_knows_both_ranks_are_named(capsys):
    assert lesson00.timeout_names([1, 0], sleep=3.0, timeout=1.0)
    assert not lesson00.timeout_names([0], sleep=3.0, timeout=1.0)
    assert "rank 1" in capsys.readouterr().out
    with pytest.raises(TypeError, match="answer"):
        lesson00.timeout_names("0")
    with pytest.raises(ValueError, match="timeout"):
        lesson00.timeout_names([0, 1], timeout=0)


def test_timeout_check_refuses_waits_that_would_look_like_a_hang():
    with pytest.raises(ValueError, match="sleep must be a finite number > 0 and <= 60"):
        lesson00.timeout_names([0, 1], sleep=3600.0, timeout=3600.0)
    with pytest.raises(ValueError, match="timeout must be a finite number > 0 and <= 60"):
        lesson00.timeout_names([0, 1], timeout=float("inf"))


def test_sum_formula_refuses_what_is_not_a_formula():
    with pytest.raises(TypeError, match="formula"):
        sum_formula(3)
    with pytest.raises(ValueError, match="world_sizes"):
        sum_formula(lambda n: n, world_sizes=(0,))
