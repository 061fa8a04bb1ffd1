"""dpedu.ring_all_reduce against dist.all_reduce: every size, every world, in place."""

import pytest
import torch
import torch.distributed as dist

from dpedu import launch
from dpedu.collectives import ring_all_reduce

SIZES = (1, 2, 3, 5, 1000, 1001)  # fewer elements than ranks, and sizes that do not divide evenly


def ring_and_reference(sizes, dtype):
    results = []
    for size in sizes:
        generator = torch.Generator().manual_seed(1000 * size + dist.get_rank())
        mine = torch.randn(size, generator=generator, dtype=dtype)
        expected = mine.clone()
        dist.all_reduce(expected)
        returned = ring_all_reduce(mine)
        results.append((returned is mine, torch.allclose(mine, expected, rtol=1e-5, atol=1e-6)))
    return results


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_equals_all_reduce_for_every_size_in_place(world_size):
    for rank_results in launch(ring_and_reference, world_size, args=(SIZES, torch.float32)):
        assert rank_results == [(True, True)] * len(SIZES)


def shaped_and_strided():
    rank = dist.get_rank()
    matrix = torch.arange(12.0).reshape(3, 4) * (rank + 1)
    transposed = matrix.t()  # not contiguous: summed through a copy, written back in place
    ring_all_reduce(transposed)
    return matrix


def test_any_shape_and_a_non_contiguous_tensor_are_summed_in_place():
    results = launch(shaped_and_strided, 3)
    assert all(torch.equal(r, torch.arange(12.0).reshape(3, 4) * 6) for r in results)


def test_bad_input_is_refused_by_name():
    with pytest.raises(TypeError, match="tensor must be a torch.Tensor"):
        ring_all_reduce([1.0, 2.0])
    with pytest.raises(RuntimeError, match="needs a process group"):
        ring_all_reduce(torch.ones(3))
