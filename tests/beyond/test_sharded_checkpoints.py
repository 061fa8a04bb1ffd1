import pytest
import torch

from dpedu import launch
from dpedu.beyond import sharded_checkpoints as sc

PSI = 1732


@pytest.mark.parametrize("load_on", [2, 3])  # 3 ranks: the 4-row biases and weights shard unevenly
def test_saved_on_four_ranks_loads_on_fewer_bit_for_bit(tmp_path, load_on):
    saved = launch(sc.save, 4, args=(str(tmp_path),))
    assert sorted(sc.files(str(tmp_path))) == [".metadata"] + [f"__{r}_0.distcp" for r in range(4)]
    assert all(s["local_bytes"] * 4 == s["total_bytes"] == 4 * PSI for s in saved)  # rank 0 alone: a quarter
    loaded = launch(sc.load, load_on, args=(str(tmp_path),))
    fresh = launch(_fresh, load_on)
    for rank in loaded:
        assert sorted(rank) == sorted(saved[0]["params"])
        assert all(torch.equal(rank[name], saved[0]["params"][name]) for name in rank)
        assert not any(torch.equal(fresh[0][name], rank[name]) for name in rank)  # the load changed every tensor


def _fresh():
    return {name: t.full_tensor() for name, t in sc.sharded_model(seed=1).state_dict().items()}


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: sc.save(3), TypeError, "directory"),
    (lambda: sc.load(None), TypeError, "directory"),
    (lambda: sc.files("/nonexistent/dpedu"), ValueError, "directory"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
