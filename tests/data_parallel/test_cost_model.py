"""The α-β fit recovers the α and β it was made from, and refuses what it cannot fit."""

import math

import pytest

from dpedu import launch
from dpedu.data_parallel.cost_model import fit_alpha_beta, ring_time, time_all_reduce


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_the_fit_recovers_alpha_and_beta_of_exact_times(world_size):
    sizes = [2**k for k in range(10, 27, 2)]
    seconds = [ring_time(n, 50e-6, 1e-9, world_size) for n in sizes]
    alpha, beta = fit_alpha_beta(sizes, seconds, world_size)
    assert math.isclose(alpha, 50e-6, rel_tol=1e-9) and math.isclose(beta, 1e-9, rel_tol=1e-9)


def test_latency_and_bandwidth_terms_of_the_ring():
    assert ring_time(0, 1e-5, 1e-9, 4) == pytest.approx(6e-5)  # 2(p - 1) steps of latency
    assert ring_time(4e6, 0, 1e-9, 4) == pytest.approx(6e-3)  # 2(p - 1)/p of the bytes per rank


@pytest.mark.parametrize(("call", "name"), [
    (lambda: fit_alpha_beta([1, 2], [1.0], 2), "same length"),
    (lambda: fit_alpha_beta([1, 2], [1.0, 0.0], 2), "seconds must be positive"),
    (lambda: fit_alpha_beta([1, 2], [1.0, 2.0], 1), "world_size"),
    (lambda: ring_time(-1, 1e-6, 1e-9, 2), "nbytes"),
    (lambda: ring_time(1, float("nan"), 1e-9, 2), "alpha"),
])
def test_bad_input_is_refused_by_name(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def _timed(sizes):
    """Every size timed, by the median and by the fastest call."""
    return time_all_reduce(sizes, repeats=2), time_all_reduce(sizes, repeats=2, statistic=min)


def test_time_all_reduce_gives_one_positive_time_per_size_by_either_statistic():
    sizes = [4, 2**12, 2**21]  # the last one above 1 MB: timed every third round
    for medians, fastest in launch(_timed, 2, args=(sizes,), timeout=60):
        assert len(medians) == len(fastest) == len(sizes)
        assert all(t > 0 for t in [*medians, *fastest])


def test_time_all_reduce_refuses_a_statistic_that_is_not_a_function():
    with pytest.raises(TypeError, match="statistic"):
        time_all_reduce([4], statistic="min")
