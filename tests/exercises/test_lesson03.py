import pytest

from dpedu.exercises import lesson03


def test_sampler_check():
    assert lesson03.samples_per_rank(10, 4, False, 3) and lesson03.samples_per_rank(10, 4, True, 2)
    assert not lesson03.samples_per_rank(10, 4, False, 2)


def test_allreduce_count_check_runs_ddp_with_and_without_no_sync():
    assert lesson03.allreduce_calls(3, 2, True, 3) and lesson03.allreduce_calls(3, 2, False, 6)
    assert not lesson03.allreduce_calls(3, 2, True, 6)


def test_summed_loss_check_compares_ddp_with_one_process():
    assert lesson03.summed_loss_lr(2, 0.002, 0.001)
    assert not lesson03.summed_loss_lr(2, 0.002, 0.002)


def test_summed_loss_check_calls_what_is_not_a_learning_rate_wrong_before_running_ddp(monkeypatch, capsys):
    monkeypatch.setattr(lesson03, "launch", lambda *args, **kwargs: pytest.fail("launched for a hopeless answer"))
    for answer in (-0.001, 0.0, float("nan"), "0.001"):
        assert not lesson03.summed_loss_lr(2, 0.002, answer)
    assert "positive number" in capsys.readouterr().out


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson03.samples_per_rank(0, 4, False, 1), ValueError, "dataset_size"),
    (lambda: lesson03.samples_per_rank(10**9, 4, False, 1), ValueError, "dataset_size must be an int from 1 to 100000"),
    (lambda: lesson03.samples_per_rank(10, 4, "no", 1), TypeError, "drop_last"),
    (lambda: lesson03.allreduce_calls(3, 0, True, 1), ValueError, "accumulation"),
    (lambda: lesson03.allreduce_calls(1000, 2, True, 1), ValueError, "steps must be an int from 1 to 50"),
    (lambda: lesson03.allreduce_calls(3, 2, 1, 1), TypeError, "no_sync"),
    (lambda: lesson03.summed_loss_lr(True, 0.1, 0.1), ValueError, "world_size"),
    (lambda: lesson03.summed_loss_lr(64, 0.1, 0.1), ValueError, "world_size must be an int from 1 to 8"),
    (lambda: lesson03.summed_loss_lr(2, -0.1, 0.1), ValueError, "lr"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_checks_that_take_a_count_refuse_what_is_not_a_number_before_any_work():
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson03.samples_per_rank(10, 4, False, "3")
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson03.allreduce_calls(5, 3, True, "5")  # before its two ranks train
