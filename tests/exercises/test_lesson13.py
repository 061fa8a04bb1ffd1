import pytest

from dpedu.exercises import lesson13


def test_micro_batch_check():
    assert lesson13.micro_batch(96, 3, 2, 16) and lesson13.micro_batch(64, 4, 1, 16)
    assert not lesson13.micro_batch(96, 3, 2, 32) and not lesson13.micro_batch(96, 3, 2, 48)
    with pytest.raises(ValueError, match="--global-batch 64 must be a multiple"):
        lesson13.micro_batch(64, 3, 1, 21)


def test_padding_check():
    assert lesson13.padding(1000, 3, 2) and lesson13.padding(1000, 6, 2) and lesson13.padding(1000, 8, 0)
    assert lesson13.padding(1000, 7, 1)  # 143 x 7 = 1001
    assert lesson13.padding(1000, 16, 8)  # 63 x 16 = 1008
    assert not lesson13.padding(1000, 3, 0) and not lesson13.padding(1000, 3, 1)


def test_learning_rate_check():
    assert lesson13.learning_rate_at(50, 3e-3 * 51 / 100) and lesson13.learning_rate_at(99, 3e-3)
    assert lesson13.learning_rate_at(999, 3e-4) and not lesson13.learning_rate_at(50, 1.5e-3)
    assert not lesson13.learning_rate_at(999, 3e-3)


def test_flops_and_mfu_checks():
    right = 6 * 85_000_000 + 12 * 12 * 768 * 1024
    assert lesson13.training_flops(85_000_000, 12, 768, 1024, right)
    assert not lesson13.training_flops(85_000_000, 12, 768, 1024, 6 * 85_000_000)  # attention left out
    assert not lesson13.training_flops(85_000_000, 12, 768, 1024, 2 * 85_000_000 + 4 * 12 * 768 * 1024)  # forward only
    mfu = 1.5e6 * right / (8 * 312e12)
    assert lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, mfu)
    assert not lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, 8 * mfu)  # one device's peak
    assert not lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, 100 * mfu)  # a percentage
    with pytest.raises(ValueError, match="devices"):
        lesson13.model_flops_utilisation(1.5e6, right, 0, 312e12, mfu)
    with pytest.raises(ValueError, match="width"):
        lesson13.training_flops(85_000_000, 12, 0, 1024, right)


@pytest.mark.parametrize("answer", ["16", True, None])
def test_checks_refuse_non_numbers(answer):
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.micro_batch(96, 3, 2, answer)
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.padding(1000, 3, answer)


def test_checks_name_bad_arguments():
    with pytest.raises(ValueError, match="examples"):
        lesson13.padding(0, 3, 0)
    with pytest.raises(ValueError, match="step"):
        lesson13.learning_rate_at(-1, 0.1)
