import pytest

from dpedu.exercises import lesson02


def test_checks_accept_right_and_reject_wrong_answers():
    assert lesson02.ring_bytes_per_worker(4, 4096, 6144)  # 2 × 3 steps × 1024 bytes
    assert not lesson02.ring_bytes_per_worker(4, 4096, 2 * 4096)
    assert lesson02.shard_weights([200, 56], [200 / 256, 56 / 256])
    assert not lesson02.shard_weights([200, 56], [0.5, 0.5])
    assert lesson02.summed_loss_factor(8, 8)
    assert not lesson02.summed_loss_factor(8, 1 / 8)
    assert not lesson02.summed_loss_factor(8, "8")


@pytest.mark.parametrize(("call", "name"), [(lambda: lesson02.ring_bytes_per_worker(0, 4096, 1.0), "workers"),
                                            (lambda: lesson02.ring_bytes_per_worker(4, 0, 1.0), "gradient_bytes"),
                                            (lambda: lesson02.shard_weights([200, 0], [1.0, 0.0]), "sizes"),
                                            (lambda: lesson02.shard_weights([200, 56], [1.0]), "answer"),
                                            (lambda: lesson02.shard_weights([200, 56], [1.0, None]), "answer"),
                                            (lambda: lesson02.shard_weights([], []), "sizes must list"),
                                            (lambda: lesson02.shard_weights([1000, 439], [0.5, 0.5]),
                                             "sizes must list shards of 1 to 1438"),
                                            (lambda: lesson02.summed_loss_factor(45, 45.0), "workers"),
                                            (lambda: lesson02.summed_loss_factor(-1, 1.0), "workers")])
def test_bad_arguments_name_themselves(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_shard_weights_accepts_rounded_weights_at_its_stated_relative_tolerance():
    assert lesson02.shard_weights([200, 56], [0.78, 0.22])  # 0.78125 and 0.21875, rounded
    assert not lesson02.shard_weights([200, 56], [0.78, 0.22], rtol=1e-4)
    with pytest.raises(ValueError, match="rtol"):
        lesson02.shard_weights([200, 56], [0.78, 0.22], rtol=0)
    with pytest.raises(ValueError, match="answer"):
        lesson02.shard_weights([200, 56], "ab")


def test_every_check_draws_from_real_digits_examples_only():
    from dpedu.datasets import digits

    assert lesson02.DIGITS_TRAIN == len(digits().X_train)
    assert lesson02.summed_loss_factor(lesson02.DIGITS_TRAIN // 32, lesson02.DIGITS_TRAIN // 32)
    with pytest.raises(TypeError, match="sizes must be a list"):
        lesson02.shard_weights(256, [1.0])


def test_uneven_ghost_batch_norm_check_runs_the_experiment(capsys):
    assert lesson02.towers_equal_uneven_ghost_batch_norm(False)  # 63, 63, 62, 62: a plain mean is off
    assert not lesson02.towers_equal_uneven_ghost_batch_norm(True)
    assert "[63, 63, 62, 62]" in capsys.readouterr().out
    assert lesson02.towers_equal_uneven_ghost_batch_norm(True, examples=256)  # equal chunks: equal
    with pytest.raises(TypeError, match="answer"):
        lesson02.towers_equal_uneven_ghost_batch_norm("no")
    with pytest.raises(ValueError, match="chunks"):
        lesson02.towers_equal_uneven_ghost_batch_norm(True, chunks=1)
