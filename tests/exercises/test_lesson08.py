import numpy as np
import pytest
import torch

from dpedu.exercises import lesson08


def test_allreduce_count_check_counts_two_per_layer():
    assert lesson08.allreduces_per_step(3, 6)
    assert not lesson08.allreduces_per_step(3, 3)


def test_seed_check_tells_the_sampler_from_dropout():
    assert lesson08.must_share_seed("sampler", True) and not lesson08.must_share_seed("sampler", False)
    assert lesson08.must_share_seed("dropout", False) and not lesson08.must_share_seed("dropout", True)


def test_unbiased_count_check_runs_sync_batchnorm():
    assert lesson08.unbiased_count([3, 1], 5, 20)
    assert not lesson08.unbiased_count([3, 1], 5, 15)  # one rank's count
    assert not lesson08.unbiased_count([3, 1], 5, 4)  # the samples alone


def test_unbiased_count_check_compares_whole_numbers_even_for_large_counts():
    assert lesson08.unbiased_count([64, 64], 64, 8192)
    assert not lesson08.unbiased_count([64, 64], 64, 8000)  # n/(n - 1) differs from the truth's by 3e-6


def test_unbiased_count_check_calls_what_is_not_a_count_wrong_before_launching(monkeypatch, capsys):
    monkeypatch.setattr(lesson08, "launch", lambda *args, **kwargs: pytest.fail("launched for a hopeless answer"))
    for answer in (1, 20.0, np.float32(20.5)):
        assert not lesson08.unbiased_count([3, 1], 5, answer)
    assert "whole number" in capsys.readouterr().out
    for answer in (True, "20"):  # not a number at all: refused by name, as every check that takes one does
        with pytest.raises(TypeError, match="answer must be a number"):
            lesson08.unbiased_count([3, 1], 5, answer)


def test_unbiased_count_takes_a_count_computed_with_numpy_or_torch():
    assert lesson08.unbiased_count([3, 1], 5, np.int64(20)) and lesson08.unbiased_count([3, 1], 5, torch.tensor(20))


def test_worker_streams_check_counts_the_seeds_real_workers_drew_from():
    """The rule's count on real ranks and workers: 3 ranks x 2 workers give 2, 4 and 6 distinct streams, and a
    count that believes seed + rank + worker_id separates every worker (6) fails."""
    counts = {"seed + worker_id": 2, "seed + rank + worker_id": 4, "seed + rank * num_workers + worker_id": 6}
    for rule, count in counts.items():
        assert lesson08.distinct_worker_streams(rule, 3, 2, count)
    assert not lesson08.distinct_worker_streams("seed + rank + worker_id", 3, 2, 6)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson08.allreduces_per_step(0, 0), ValueError, "norm_layers"),
    (lambda: lesson08.allreduces_per_step(100, 0), ValueError, "norm_layers must be an int from 1 to 8"),
    (lambda: lesson08.must_share_seed("init", True), ValueError, "what"),
    (lambda: lesson08.must_share_seed("sampler", "yes"), TypeError, "answer"),
    (lambda: lesson08.unbiased_count([3], 5, 15), ValueError, "batch_sizes"),
    (lambda: lesson08.unbiased_count([3, 0], 5, 15), ValueError, "batch_sizes"),
    (lambda: lesson08.unbiased_count([3, 1], 0, 15), ValueError, "spatial"),
    (lambda: lesson08.unbiased_count("3, 1", 5, 4), ValueError, "batch_sizes"),
    (lambda: lesson08.distinct_worker_streams("seed", 2, 2, 2), ValueError, "rule must be one of"),
    (lambda: lesson08.distinct_worker_streams("seed + worker_id", 1, 2, 2), ValueError, "world_size"),
    (lambda: lesson08.distinct_worker_streams("seed + worker_id", 2, 0, 2), ValueError, "num_workers"),
    (lambda: lesson08.distinct_worker_streams("seed + worker_id", 2, 2, "2"), TypeError, "answer"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
