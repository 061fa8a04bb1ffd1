"""ddp_timing: what each version all-reduces per step (counted), and the step times' shape."""

import pytest

from dpedu import launch
from dpedu.data_parallel.ddp_timing import VERSIONS, all_reduce_sizes, step_times, timing_model

PARAMETER_BYTES = [p.numel() * 4 for p in timing_model().parameters()]  # float32, in registration order


def sizes(bucket_cap_mb):
    return all_reduce_sizes(VERSIONS, steps=3, bucket_cap_mb=bucket_cap_mb, batch_size=2)


@pytest.fixture(scope="module")
def five_mb_and_default():
    return launch(sizes, 2, args=(5.0,), timeout=120)[0], launch(sizes, 2, args=(None,), timeout=120)[0]


def test_per_parameter_all_reduces_each_parameter_and_minddp_its_static_buckets(five_mb_and_default):
    counted, default = five_mb_and_default
    assert counted["per parameter"] == [PARAMETER_BYTES] * 3
    mib = 2**20
    # reverse registration order, a hard cap of 5 MiB: 40 + 40960 + 4096 + 4 MiB + 4096 bytes, then pairs
    static = [4243496, 4 * mib + 4096, 4 * mib + 4096, 4 * mib + 4096, mib]
    assert counted["buckets, no overlap"] == counted["buckets + overlap"] == [static] * 3
    assert default["buckets + overlap"] == [[sum(PARAMETER_BYTES)]] * 3  # 25 MiB hold the whole model


def test_torch_ddp_all_reduces_one_bucket_then_rebuilds_closing_buckets_once_they_reach_the_cap(
        five_mb_and_default):
    counted, default = five_mb_and_default
    total = sum(PARAMETER_BYTES)
    assert counted["torch DDP"][0] == default["torch DDP"][0] == [total]
    assert counted["torch DDP"][1:] == [[8437800, 8396800, 1052672]] * 2  # over the 5 MiB cap: closed once reached
    assert default["torch DDP"][1:] == [[4239400, total - 4239400]] * 2  # the default's 1 MiB first bucket


def three_steps():
    return step_times(("per parameter", "torch DDP"), steps=3, batch_size=2, warmup=1)


def test_step_times_returns_every_timed_step_and_its_median():
    result = launch(three_steps, 2, timeout=120)[0]
    for timed in result.values():
        assert len(timed["seconds"]) == 3 and timed["median"] == sorted(timed["seconds"])[1]


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="versions"):
        all_reduce_sizes("torch DDP")
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        all_reduce_sizes(bucket_cap_mb=0)
