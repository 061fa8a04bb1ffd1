"""dpedu.training_run.throughput: what the step-time measurements return, and the overlap model's arithmetic
(no timing is asserted here: the benchmarks and lesson 13 measure)."""

import pytest

from dpedu import launch
from dpedu.training_run.throughput import (
    controlled_steps,
    exposed_communication,
    scaling_efficiency,
    training_throughput,
)


def test_one_bucket_is_never_hidden_and_early_buckets_are():
    assert exposed_communication([0.3], 1.0) == pytest.approx(0.3)
    # 4 buckets of 0.1 s, ready at 0.25, 0.5, 0.75, 1 s of a 1 s backward: only the last one shows
    assert exposed_communication([0.1] * 4, 1.0) == pytest.approx(0.1)
    # communication slower than backward: they queue; ready at 0.5 -> done 1.5 -> done 2.5
    assert exposed_communication([1.0, 1.0], 1.0) == pytest.approx(1.5)
    assert exposed_communication([0.0, 0.2], 0.0) == pytest.approx(0.2)  # no overlap possible


def test_efficiency_is_compute_over_compute_plus_exposed():
    assert scaling_efficiency(2.0, 1.0, [2.0]) == pytest.approx(0.5)
    assert scaling_efficiency(2.0, 1.0, [0.1] * 4) == pytest.approx(2.0 / 2.1)
    assert scaling_efficiency(1.0, 0.5, [0.0]) == 1.0


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="bucket_seconds must hold at least one"):
        exposed_communication([], 1.0)
    with pytest.raises(ValueError, match="backward_seconds"):
        exposed_communication([0.1], -1.0)
    with pytest.raises(ValueError, match="backward_seconds .* is part of compute_seconds"):
        scaling_efficiency(1.0, 2.0, [0.1])
    with pytest.raises(ValueError, match="compute_seconds must be a finite number > 0"):
        scaling_efficiency(0.0, 0.0, [0.1])


def measure():
    return training_throughput(8, steps=2, warmup=1), controlled_steps([0.02, 0.0], 1000, steps=2)


def test_measurements_agree_across_ranks_and_count_what_they_say():
    (thr0, controlled), (thr1, _) = launch(measure, 2, timeout=60)
    assert thr0 == thr1  # rank 0's clock, broadcast
    assert thr0["parameters"] == 102144
    assert thr0["samples_per_second"] == pytest.approx(2 * 8 / thr0["step_seconds"])
    after_sleep, no_sleep = controlled
    assert 0 < after_sleep < 0.02 and 0 < no_sleep < 0.02  # the all-reduce alone: the sleep is not in it


def test_matmul_steps_need_a_warm_up_and_a_timed_step():
    from dpedu.training_run.throughput import matmul_seconds

    with pytest.raises(ValueError, match="steps must be an int >= 2"):
        matmul_seconds(steps=1)
