"""The α-β fit recovers the α and β it was made from, and refuses what it cannot fit."""

import math

import pytest

from dpedu.data_parallel.cost_model import fit_alpha_beta, ring_time


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
