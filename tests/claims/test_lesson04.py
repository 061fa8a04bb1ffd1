"""Lesson 04's checks catch the mistakes they guard against: the from-scratch all-reduces equal
``dist.all_reduce``, and a ring with one line wrong fails the same comparison; the α-β model's fit checks
fail on timings that the model does not describe.

The broken rings are ``ring_all_reduce``'s own source with one line changed (``changed``), so they follow
the real one wherever it goes.
"""



import numpy as np
import pytest
import torch
import torch.distributed as dist

from claims.broken import changed
from dpedu import launch
from dpedu.data_parallel.collectives import naive_all_reduce, ring_all_reduce, sharded_server_all_reduce
from dpedu.data_parallel.cost_model import fit_alpha_beta, ring_time

SIZES = (1, 2, 3, 5, 1000, 1001)  # cell 16's


BROKEN_RINGS = {
    # From its second step on (so on 3 ranks and more), each rank sends a chunk it has not added into, and
    # adds what arrives into the chunk that came with it: the partial sums never travel on.
    "wrong chunk at step 2": changed(
        ring_all_reduce, ("chunks[(rank - step) % world], chunks[(rank - step - 1) % world]",
        "chunks[(rank + step) % world], chunks[(rank + step - 1) % world]")),
    # The reduce-scatter only: rank r holds the sum of one chunk, and partial sums elsewhere.
    "no all-gather": changed(ring_all_reduce, ("for step in range(world - 1):  # all-gather",
                             "for step in range(0):  # all-gather")),
}


def largest_error(all_reduce):
    """Cell 16's comparison with ``dist.all_reduce`` (in ``check_and_count``), for one all-reduce: the largest
    difference over the cell's sizes, each a tensor drawn from the cell's seeds."""
    rank = dist.get_rank()
    largest = 0.0
    for size in SIZES:
        mine = torch.randn(size, generator=torch.Generator().manual_seed(1000 * size + rank))
        expected = mine.clone()
        dist.all_reduce(expected)
        assert all_reduce(mine) is mine  # in place
        largest = max(largest, (mine - expected).abs().max().item())
    return largest


def every_all_reduce():
    subjects = {"naive": naive_all_reduce, "sharded server": sharded_server_all_reduce, "ring": ring_all_reduce,
                **BROKEN_RINGS}
    return {name: largest_error(all_reduce) for name, all_reduce in subjects.items()}


@pytest.mark.parametrize("p", [3, 4])
def test_a_ring_with_one_line_wrong_fails_the_comparison_with_dist_all_reduce(p):
    """Backs 04 cell 16: the naive, sharded-server and ring all-reduces equal dist.all_reduce within 1e-5 for
    every size, and a ring that sends the wrong chunk at its second step, or skips the all-gather, fails that
    bound."""
    ranks = launch(every_all_reduce, p)
    for name in ("naive", "sharded server", "ring"):
        assert max(errors[name] for errors in ranks) < 1e-5, name  # cell 16's check
    for name in BROKEN_RINGS:
        error = max(errors[name] for errors in ranks)
        assert not error < 1e-5, (name, error)


FIT_SIZES = [4**k * 2**12 for k in range(8)]  # cell 19's: 4 KB to 64 MB
HELD_OUT = [2**19, 8 * 2**20]


def factor(predicted, measured):  # cell 19's
    return max(predicted / measured, measured / predicted)


def fit_checks(times, fit=fit_alpha_beta):
    """Cell 19's checks on ``times`` (seconds for FIT_SIZES + HELD_OUT, 2 ranks) with α and β from ``fit``:
    every size within a factor of 2 of the model, both terms positive, and latency 15 % to 85 % of the
    prediction at 512 KB."""
    seconds = times[:len(FIT_SIZES)]
    alpha, beta = fit(FIT_SIZES, seconds, world_size=2)
    if not (alpha > 0 and beta > 0):
        return False
    misses = [factor(ring_time(size, alpha, beta, 2), t) for size, t in zip(FIT_SIZES + HELD_OUT, times, strict=True)]
    latency_share = 2 * alpha / ring_time(HELD_OUT[0], alpha, beta, 2)
    return max(misses) < 2 and 0.15 < latency_share < 0.85


def one_term_fits_miss(seconds):
    """Cell 20's check: the best fit with latency only, and with bandwidth only, each miss some size by over
    a factor of 10."""
    one_term = {"latency only": np.ones(len(FIT_SIZES)), "bandwidth only": np.array(FIT_SIZES, dtype=float)}
    for term in one_term.values():
        ratio = term / np.array(seconds)
        scale = ratio.sum() / (ratio**2).sum()
        if not max(factor(scale * x, t) for x, t in zip(term, seconds, strict=True)) > 10:
            return False
    return True


def timings(alpha, beta, model=ring_time):
    """Times for FIT_SIZES + HELD_OUT from ``model``, each bent by up to ±30 % as a shared machine does."""
    wobble = 1 + 0.3 * np.sin(np.arange(len(FIT_SIZES + HELD_OUT)) * 2.1)
    return [model(n, alpha, beta, 2) * w for n, w in zip(FIT_SIZES + HELD_OUT, wobble, strict=True)]


def test_the_alpha_beta_checks_fail_on_timings_the_model_does_not_describe():
    """Backs 04 cells 19 and 20: timings an α-β ring makes (α 90 µs, β 0.38 ns per byte, as measured in the
    lesson; bent by up to 30 %) pass the fit checks and the both-terms check; timings that grow as the square
    root of the size, or as its square, fail the fit, and timings with no latency term fail the both-terms
    check (a bandwidth-only fit is then as good)."""
    alpha_beta = timings(90e-6, 0.38e-9)
    assert fit_checks(alpha_beta) and one_term_fits_miss(alpha_beta[:len(FIT_SIZES)])
    for grows in (0.5, 2.0):
        not_alpha_beta = timings(90e-6, 0.38e-9, lambda n, alpha, beta, p, grows=grows: alpha * (n / 2**19) ** grows)
        assert not fit_checks(not_alpha_beta), grows
    bandwidth_only = timings(0.0, 0.38e-9)
    assert not one_term_fits_miss(bandwidth_only[:len(FIT_SIZES)])


def test_a_fit_that_miscounts_the_ring_steps_fails_the_fit_check():
    """Backs 04 cell 19: a fit_alpha_beta that counts p - 1 ring steps where ring_time counts 2(p - 1) fits
    α and β twice too large, and its predictions miss the α-β ring's own timings by over a factor of 2."""
    miscounted = changed(fit_alpha_beta, ("steps = 2 * (world_size - 1)", "steps = world_size - 1"))
    alpha_beta = timings(90e-6, 0.38e-9)
    assert fit_checks(alpha_beta) and not fit_checks(alpha_beta, fit=miscounted)
