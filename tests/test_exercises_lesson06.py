import pytest

from dpedu.exercises import lesson06


def test_checks():
    assert lesson06.linear_scaling(0.1, 256, 2048, 0.8)
    assert not lesson06.linear_scaling(0.1, 256, 2048, 0.1)
    assert lesson06.steps_at(100, 1000, 250, 500)
    assert not lesson06.steps_at(100, 1000, 250, 400)
    assert lesson06.largest_base_lr(32, 0.0306) and not lesson06.largest_base_lr(32, 0.05)


@pytest.mark.parametrize("call", [lambda: lesson06.linear_scaling(-0.1, 256, 512, 1.0),
                                  lambda: lesson06.steps_at(100, 0, 250, 1.0),
                                  lambda: lesson06.largest_base_lr(0, 1.0)])
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()
