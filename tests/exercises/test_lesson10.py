import pytest

from dpedu.exercises import lesson10


def test_steps_per_epoch_counts_the_samplers_padding():
    assert lesson10.steps_per_epoch(64, 2, 22) and lesson10.steps_per_epoch(64, 4, 22)
    assert lesson10.steps_per_epoch(80, 2, 17) and lesson10.steps_per_epoch(80, 4, 18)  # 360 // 20, padded
    assert not lesson10.steps_per_epoch(80, 4, 17)
    with pytest.raises(ValueError, match="workers"):
        lesson10.steps_per_epoch(80, 3, 17)


def test_checkpoint_minutes_follows_youngs_rule_at_llama3s_rate():
    # part 2 of the lesson: 16,384 GPUs fail every 3.1 h; a one-minute write gives 19 minutes
    assert lesson10.checkpoint_minutes(16_384, 1, (2 * 1 * 60 * 54 * 24 / 419) ** 0.5)
    assert not lesson10.checkpoint_minutes(4096, 5, 2 * 5 * 742)  # the square root forgotten
    with pytest.raises(ValueError, match="write_minutes"):
        lesson10.checkpoint_minutes(4096, 0, 1.0)
