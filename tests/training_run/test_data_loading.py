"""dpedu.training_run.data_loading: workers split a rank's loading, not the data across ranks; an IterableDataset
must shard by rank x worker, or every copy of it yields the whole stream."""

import pytest
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from dpedu.training_run.data_loading import ExampleStream, WhoLoads, counts


def stream_counts(examples: int, world: int, workers: int, shard: bool) -> list[int]:
    """How often each example comes out of all ranks' loaders (ranks given explicitly, no process group)."""
    seen = [int(i) for rank in range(world) for i in
            DataLoader(ExampleStream(examples, rank=rank, world_size=world, shard=shard), batch_size=None,
                       num_workers=workers)]
    return counts(seen, examples).tolist()


def test_an_unsharded_stream_repeats_every_example_once_per_rank_and_worker():
    assert stream_counts(10, 2, 2, shard=False) == [4] * 10
    assert stream_counts(10, 3, 0, shard=False) == [3] * 10  # no workers: the rank's process is the one copy


@pytest.mark.parametrize(("world", "workers"), [(1, 0), (2, 2), (3, 1), (1, 2)])
def test_a_stream_sharded_by_rank_and_worker_yields_every_example_once(world, workers):
    assert stream_counts(23, world, workers, shard=True) == [1] * 23


def test_workers_load_only_their_ranks_shard_and_are_seeded_from_the_loaders_generator():
    dataset, loaded = WhoLoads(20), {}
    for rank in range(2):
        sampler = DistributedSampler(dataset, num_replicas=2, rank=rank, seed=3)
        for seed in (7, 7, 8):
            loader = DataLoader(dataset, sampler=sampler, batch_size=2, num_workers=2,
                                generator=torch.Generator().manual_seed(seed))
            items = [tuple(row) for index, worker, worker_seed in loader
                     for row in zip(index.tolist(), worker.tolist(), worker_seed.tolist(), strict=True)]
            assert sorted(i for i, _, _ in items) == sorted(sampler)  # the rank's shard, nothing else
            assert {w for _, w, _ in items} == {0, 1}  # both workers loaded some of it
            seeds = {w: s for _, w, s in items}
            assert seeds[1] == seeds[0] + 1  # base seed + worker id
            loaded.setdefault((rank, seed), []).append(seeds[0])
    assert loaded[0, 7][0] == loaded[0, 7][1] == loaded[1, 7][0] != loaded[0, 8][0]  # the generator decides


def test_in_the_ranks_process_there_is_no_worker():
    assert WhoLoads(3)[2] == (2, -1, -1)


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(ValueError, match="rank must be an int from 0 to 1"):
        ExampleStream(10, rank=2, world_size=2)
    with pytest.raises(ValueError, match="examples must be an int"):
        WhoLoads(0)
    with pytest.raises(TypeError, match="shard must be True or False"):
        ExampleStream(10, rank=0, world_size=1, shard="yes")
