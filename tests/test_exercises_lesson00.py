import pytest

from dpedu.exercises import lesson00_predict, lesson00_sum_formula


def test_sum_formula_check_accepts_the_right_formula_only(capsys):
    assert lesson00_sum_formula(lambda n: n * (n + 1) / 2, world_sizes=(1, 3))
    assert not lesson00_sum_formula(lambda n: n * n, world_sizes=(1, 3))
    assert "on [3] ranks" in capsys.readouterr().out


def test_predictions_are_checked_against_a_real_all_reduce():
    assert lesson00_predict("PRODUCT", 4, 24.0)
    assert lesson00_predict("MAX", 3, 3.0)
    assert not lesson00_predict("MIN", 3, 3.0)


@pytest.mark.parametrize(("op", "size", "name"), [("AVG", 2, "op_name"), ("SUM", 0, "world_size"),
                                                  ("SUM", 9, "world_size")])
def test_bad_predictions_arguments_name_the_argument(op, size, name):
    with pytest.raises(ValueError, match=name):
        lesson00_predict(op, size, 1.0)
