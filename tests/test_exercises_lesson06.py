import pytest

from dpedu.exercises import lesson06


def test_checks():
    assert lesson06.linear_scaling(0.1, 256, 2048, 0.8)
    assert not lesson06.linear_scaling(0.1, 256, 2048, 0.1)
    assert lesson06.steps_at(100, 1000, 250, 500)
    assert not lesson06.steps_at(100, 1000, 250, 400)
    assert lesson06.largest_base_lr(32, 0.0306) and not lesson06.largest_base_lr(32, 0.05)


def test_the_base_lr_check_rejects_the_noise_free_guess_and_unstable_answers():
    assert lesson06.largest_base_lr(32, 0.030764)  # the edge with gradient noise (5 digits)
    assert not lesson06.largest_base_lr(32, 1 / 32)  # 2 / (k * lambda_max): 1.6 % too high, unstable
    assert not lesson06.largest_base_lr(32, 0.03080)  # 0.1 % above the edge: still unstable
    assert not lesson06.largest_base_lr(32, 0.0300)  # safe, but 2.5 % short of the largest


def test_stability_edge_finds_a_known_edge_from_the_stable_side():
    from dpedu.staleness import stability_edge

    edge = stability_edge(lambda x: x * x < 2, 0.0, 2.0)
    assert edge * edge < 2 and abs(edge - 2**0.5) < 1e-12


@pytest.mark.parametrize(("call", "name"), [(lambda: lesson06.linear_scaling(-0.1, 256, 512, 1.0), "lr"),
                                            (lambda: lesson06.steps_at(100, 0, 250, 1.0), "critical_batch"),
                                            (lambda: lesson06.largest_base_lr(0, 1.0), "k")])
def test_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call()
