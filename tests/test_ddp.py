import pytest

from dpedu import ddp, launch
from dpedu.training import largest_difference


def two_ranks_of_16(**options):
    return ddp.train(4, 16, 0.1, **options)["model"]


def test_two_ranks_equal_one_process_with_the_whole_batch():
    reference = ddp.train(4, 32, 0.1, ddp=False)["model"]
    states = launch(two_ranks_of_16, 2)
    assert largest_difference(states[0], reference) < 1e-6
    assert largest_difference(states[0], states[1]) == 0


def test_accumulation_with_and_without_no_sync_gives_the_same_parameters():
    reference = ddp.train(4, 32, 0.1, ddp=False)["model"]
    for no_sync in (True, False):
        state = launch(lambda no_sync=no_sync: two_ranks_of_16(accumulation=2, no_sync=no_sync), 2)[0]
        assert largest_difference(state, reference) < 1e-6


def test_resuming_from_a_state_continues_the_same_run():
    whole = ddp.train(6, 32, 0.01, ddp=False, optimizer="adam")
    first = ddp.train(3, 32, 0.01, ddp=False, optimizer="adam")
    rest = ddp.train(3, 32, 0.01, ddp=False, optimizer="adam", start_step=3, state=first)
    assert largest_difference(rest["model"], whole["model"]) == 0


@pytest.mark.parametrize(("options", "name"), [({"reduction": "max"}, "reduction"),
                                               ({"optimizer": "lbfgs"}, "optimizer"),
                                               ({"accumulation": 3}, "accumulation")])
def test_bad_options_name_themselves(options, name):
    with pytest.raises(ValueError, match=name):
        ddp.train(1, 32, 0.1, ddp=False, **options)
