import pytest
import torch.distributed as dist

from dpedu.exercises import lesson04
from dpedu.exercises.answers import ring_all_gather, tree_all_reduce  # the model answers


def uses_torch(tensor):
    dist.all_reduce(tensor)
    return tensor


def forgets_to_add(tensor):
    return tensor


def test_a_tree_all_reduce_and_a_ring_all_gather_pass():
    assert lesson04.all_reduce_from_messages(tree_all_reduce)
    assert lesson04.all_gather_from_messages(ring_all_gather)


def test_torch_collectives_wrong_values_and_wrong_shapes_fail(capsys):
    assert not lesson04.all_reduce_from_messages(uses_torch)
    assert "point-to-point messages only" in capsys.readouterr().out
    assert not lesson04.all_reduce_from_messages(forgets_to_add)
    assert "wrong values" in capsys.readouterr().out
    assert not lesson04.all_gather_from_messages(forgets_to_add)
    assert "expected a tensor of shape (2, 1)" in capsys.readouterr().out


def test_number_answers():
    assert lesson04.ring_bytes_per_rank(4000, 4, 6000) and not lesson04.ring_bytes_per_rank(4000, 4, 4000)
    assert lesson04.ring_seconds(1e6, 1e-4, 1e-9, 2, 2e-4 + 1e-3)
    assert not lesson04.ring_seconds(1e6, 1e-4, 1e-9, 2, 1e-4 + 1e-3)  # one step's latency only


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson04.all_reduce_from_messages("tree"), TypeError, "fn"),
    (lambda: lesson04.ring_bytes_per_rank(0, 4, 1), ValueError, "nbytes"),
    (lambda: lesson04.ring_bytes_per_rank(10, 1, 1), ValueError, "world_size"),
    (lambda: lesson04.ring_seconds(10, -1, 1e-9, 2, 1), ValueError, "alpha"),
    (lambda: lesson04.ring_seconds(10, 1e-6, float("nan"), 2, 1), ValueError, "beta"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
