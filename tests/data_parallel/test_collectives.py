"""The three all-reduces of lesson 04 against dist.all_reduce: every size, every world, in place; and the
bytes each rank sends against the formulas."""

import pytest
import torch
import torch.distributed as dist

from dpedu import launch
from dpedu.data_parallel.collectives import naive_all_reduce, ring_all_reduce, sharded_server_all_reduce
from dpedu.runtime.traffic import bytes_sent

ALL_REDUCES = (naive_all_reduce, sharded_server_all_reduce, ring_all_reduce)
SIZES = (1, 2, 3, 5, 1000, 1001)  # fewer elements than ranks, and sizes that do not divide evenly


def against_reference(sizes, dtype):
    results = []
    for reduce in ALL_REDUCES:
        for size in sizes:
            generator = torch.Generator().manual_seed(1000 * size + dist.get_rank())
            mine = torch.randn(size, generator=generator, dtype=dtype)
            expected = mine.clone()
            dist.all_reduce(expected)
            returned = reduce(mine)
            results.append((reduce.__name__, size, returned is mine,
                            torch.allclose(mine, expected, rtol=1e-5, atol=1e-6)))
    return results


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_each_equals_all_reduce_for_every_size_in_place(world_size):
    for rank_results in launch(against_reference, world_size, args=(SIZES, torch.float32)):
        assert [(name, size, True, True) for name, size, *_ in rank_results] == rank_results


def test_the_ring_sums_a_large_tensor_exactly():
    def large():
        mine = torch.full((3 * 2**18 + 7,), float(dist.get_rank() + 1))  # 3 MB, not a multiple of 3 elements
        return torch.equal(ring_all_reduce(mine), torch.full_like(mine, 6.0))  # small integers add exactly

    assert launch(large, 3) == [True] * 3


def shaped_and_strided(reduce):
    rank = dist.get_rank()
    matrix = torch.arange(12.0).reshape(3, 4) * (rank + 1)
    reduce(matrix.t())  # not contiguous: summed through a copy, written back in place
    return matrix


@pytest.mark.parametrize("reduce", ALL_REDUCES, ids=lambda f: f.__name__)
def test_any_shape_and_a_non_contiguous_tensor_are_summed_in_place(reduce):
    results = launch(shaped_and_strided, 3, args=(reduce,))
    assert all(torch.equal(r, torch.arange(12.0).reshape(3, 4) * 6) for r in results)


def bytes_per_rank(elements):
    counts = {}
    for reduce in ALL_REDUCES:
        with bytes_sent() as sent:
            reduce(torch.ones(elements))
        counts[reduce.__name__] = sent.bytes
    return counts


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_bytes_sent_match_the_formulas(world_size):
    n, p = 4 * 1200, world_size  # bytes of 1200 float32, which every p here divides
    counts = launch(bytes_per_rank, world_size, args=(1200,))
    assert counts[0]["naive_all_reduce"] == (p - 1) * n  # the root sends the sum to everyone
    assert all(c["naive_all_reduce"] == n for c in counts[1:])
    for name in ("sharded_server_all_reduce", "ring_all_reduce"):
        assert all(c[name] == 2 * (p - 1) * n // p for c in counts)


def test_bad_input_is_refused_by_name():
    for reduce in ALL_REDUCES:
        with pytest.raises(TypeError, match="tensor must be a torch.Tensor"):
            reduce([1.0, 2.0])
        with pytest.raises(RuntimeError, match="need a process group"):
            reduce(torch.ones(3))


def in_a_subgroup():
    # Barriers on the whole group at both ends: rank 0 was once still connecting to the others (gloo's full mesh of
    # the default group, torch 2.15) when outsider rank 2 had returned and closed its connections, which failed
    # rank 0; and no rank may leave, nor rank 0 take its store away, while another is still in new_group.
    dist.barrier()
    group = dist.new_group([1, 3])
    mine = torch.full((5,), float(dist.get_rank()))
    if dist.get_rank() not in (1, 3):
        try:
            ring_all_reduce(mine, group)
            outcome = "no error"
        except ValueError as error:
            outcome = str(error)
    else:
        outcome = [reduce(mine.clone(), group).tolist() for reduce in ALL_REDUCES]
    dist.barrier()
    return outcome


def test_a_subgroup_sums_its_own_ranks_and_an_outsider_is_told():
    outcomes = launch(in_a_subgroup, 4)
    assert outcomes[1] == outcomes[3] == [[4.0] * 5] * 3
    assert all("not in group" in outcomes[r] for r in (0, 2))


def test_the_rings_receive_buffer_is_kept_between_calls_and_never_mixes_sizes_or_dtypes():
    from dpedu.data_parallel import collectives

    def calls():
        correct = []
        for size, dtype in ((1001, torch.float32), (5, torch.float32), (3000, torch.float64), (2, torch.float64),
                            (1001, torch.float32)):
            mine = torch.arange(size, dtype=dtype) * (dist.get_rank() + 1)
            correct.append(torch.equal(ring_all_reduce(mine), torch.arange(size, dtype=dtype) * 3))
        kept = collectives._kept[(torch.float32, torch.device("cpu"))].data_ptr()
        ring_all_reduce(torch.ones(1001))
        return correct, kept == collectives._kept[(torch.float32, torch.device("cpu"))].data_ptr()

    assert launch(calls, 2) == [([True] * 5, True)] * 2
