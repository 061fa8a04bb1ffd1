import pytest

from dpedu.exercises import lesson02


def test_checks_accept_right_and_reject_wrong_answers():
    assert lesson02.ring_bytes_per_worker(4, 4096, 2 * 3 / 4 * 4096)
    assert not lesson02.ring_bytes_per_worker(4, 4096, 2 * 4096)
    assert lesson02.shard_weights([200, 56], [200 / 256, 56 / 256])
    assert not lesson02.shard_weights([200, 56], [0.5, 0.5])
    assert lesson02.summed_loss_factor(8, 8)
    assert not lesson02.summed_loss_factor(8, 1 / 8)


@pytest.mark.parametrize("call", [lambda: lesson02.ring_bytes_per_worker(0, 4096, 1.0),
                                  lambda: lesson02.shard_weights([200, 0], [1.0, 0.0]),
                                  lambda: lesson02.shard_weights([200, 56], [1.0]),
                                  lambda: lesson02.summed_loss_factor(-1, 1.0)])
def test_bad_arguments(call):
    with pytest.raises(ValueError):
        call()
