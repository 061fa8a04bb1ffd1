import math

import pytest

from dpedu.exercises import lesson05


def test_checks_accept_the_right_answers():
    assert lesson05.largest_lr(3, 4.0, 2 * math.sin(math.pi / 14) / 4)
    assert lesson05.sync_round_time(4, 1 + 1 / 2 + 1 / 3 + 1 / 4)
    assert lesson05.mean_staleness(16, 15)


def test_checks_reject_wrong_answers():
    assert not lesson05.largest_lr(3, 4.0, 2 / 4)
    assert not lesson05.sync_round_time(4, 1.0)
    assert not lesson05.mean_staleness(16, 16)


@pytest.mark.parametrize("call", [lambda: lesson05.largest_lr(-1, 1.0, 1.0), lambda: lesson05.largest_lr(1, 0.0, 1.0),
                                  lambda: lesson05.sync_round_time(0, 1.0), lambda: lesson05.mean_staleness(2.5, 1.0)])
def test_bad_arguments_are_refused(call):
    with pytest.raises(ValueError):
        call()
