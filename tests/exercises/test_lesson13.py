import numpy as np
import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, get_worker_info

from dpedu import launch
from dpedu.exercises import lesson13
from dpedu.training_run.data_loading import ExampleStream


def test_micro_batch_check():
    assert lesson13.micro_batch(96, 3, 2, 16) and lesson13.micro_batch(64, 4, 1, 16)
    assert not lesson13.micro_batch(96, 3, 2, 32) and not lesson13.micro_batch(96, 3, 2, 48)
    with pytest.raises(ValueError, match="--global-batch 64 must be a multiple"):
        lesson13.micro_batch(64, 3, 1, 21)


def test_padding_check():
    assert lesson13.padding(1000, 3, 2) and lesson13.padding(1000, 6, 2) and lesson13.padding(1000, 8, 0)
    assert lesson13.padding(1000, 7, 1)  # 143 x 7 = 1001
    assert lesson13.padding(1000, 16, 8)  # 63 x 16 = 1008
    assert not lesson13.padding(1000, 3, 0) and not lesson13.padding(1000, 3, 1)


def test_learning_rate_check():
    assert lesson13.learning_rate_at(50, 3e-3 * 51 / 100) and lesson13.learning_rate_at(99, 3e-3)
    assert lesson13.learning_rate_at(999, 3e-4) and not lesson13.learning_rate_at(50, 1.5e-3)
    assert not lesson13.learning_rate_at(999, 3e-3)


def test_flops_and_mfu_checks():
    right = 6 * 85_000_000 + 12 * 12 * 768 * 1024
    assert lesson13.training_flops(85_000_000, 12, 768, 1024, right)
    assert not lesson13.training_flops(85_000_000, 12, 768, 1024, 6 * 85_000_000)  # attention left out
    assert not lesson13.training_flops(85_000_000, 12, 768, 1024, 2 * 85_000_000 + 4 * 12 * 768 * 1024)  # forward only
    mfu = 1.5e6 * right / (8 * 312e12)
    assert lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, mfu)
    assert not lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, 8 * mfu)  # one device's peak
    assert not lesson13.model_flops_utilisation(1.5e6, right, 8, 312e12, 100 * mfu)  # a percentage
    with pytest.raises(ValueError, match="devices"):
        lesson13.model_flops_utilisation(1.5e6, right, 0, 312e12, mfu)
    with pytest.raises(ValueError, match="width"):
        lesson13.training_flops(85_000_000, 12, 0, 1024, right)


@pytest.mark.parametrize("answer", ["16", True, None])
def test_checks_refuse_non_numbers(answer):
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.micro_batch(96, 3, 2, answer)
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.padding(1000, 3, answer)


def test_checks_name_bad_arguments():
    with pytest.raises(ValueError, match="examples"):
        lesson13.padding(0, 3, 0)
    with pytest.raises(ValueError, match="step"):
        lesson13.learning_rate_at(-1, 0.1)


def test_stream_share_check():
    assert lesson13.stream_share(30, 4, 3, 1, 2, [5, 17, 29]) and lesson13.stream_share(30, 4, 3, 0, 0, [0, 12, 24])
    assert lesson13.stream_share(5, 1, 1, 0, 0, (0, 1, 2, 3, 4)) and lesson13.stream_share(3, 4, 1, 3, 0, [])
    assert not lesson13.stream_share(30, 4, 3, 1, 2, [4, 16, 28])  # rank 1 x 3 + 2 counted from 1
    assert not lesson13.stream_share(30, 4, 3, 1, 2, [6, 18])  # worker x ranks + rank: the copies numbered across
    assert not lesson13.stream_share(30, 4, 3, 1, 2, list(range(30)))  # unsharded
    assert not lesson13.stream_share(30, 4, 3, 1, 2, [29, 17, 5])  # a stream yields in order
    assert lesson13.stream_share(30, 4, 3, 1, 2, range(5, 30, 12))
    assert lesson13.stream_share(30, 4, 3, 1, 2, torch.tensor([5, 17, 29]))
    assert lesson13.stream_share(30, 4, 3, 1, 2, np.array([5, 17, 29]))
    assert lesson13.stream_share(30, 4, 3, 1, 2, [torch.tensor(5), np.int64(17), torch.tensor([29])])  # one by one
    assert not lesson13.stream_share(30, 4, 3, 1, 2, [torch.tensor(4), torch.tensor(16), torch.tensor(28)])
    with pytest.raises(TypeError, match="answer must be a list of example indices"):
        lesson13.stream_share(30, 4, 3, 1, 2, [torch.tensor([5, 17]), 29])
    with pytest.raises(ValueError, match="^worker must"):
        lesson13.stream_share(30, 4, 3, 1, 3, [5])
    with pytest.raises(ValueError, match="^rank must"):
        lesson13.stream_share(30, 4, 3, 4, 0, [5])
    for not_a_list in (5, "5, 17, 29", [5.0, 17.0, 29.0], [True, False]):
        with pytest.raises(TypeError, match="list of example indices"):
            lesson13.stream_share(30, 4, 3, 1, 2, not_a_list)


class TaggedStream(ExampleStream):
    """ExampleStream's own examples, each with the id of the worker that yielded it."""

    def __iter__(self):
        worker = get_worker_info().id
        for example in super().__iter__():
            yield example, worker


def shares_of_real_workers(examples: int, workers: int) -> dict[int, list[int]]:
    stream = TaggedStream(examples, rank=dist.get_rank(), world_size=dist.get_world_size())
    shares = {worker: [] for worker in range(workers)}
    for example, worker in DataLoader(stream, batch_size=None, num_workers=workers):
        shares[int(worker)].append(int(example))
    return shares


def test_stream_share_check_agrees_with_real_dataloader_workers():
    """The check runs ExampleStream's __iter__ in this process, as a worker would: what real workers of real ranks
    yield must be what it accepts."""
    for rank, shares in enumerate(launch(shares_of_real_workers, 2, args=(13, 3))):
        for worker, share in shares.items():
            assert lesson13.stream_share(13, 2, 3, rank, worker, share), (rank, worker, share)


def test_communication_share_check():
    assert lesson13.communication_share(0.05, 0.3, 64, 0.3 / 3.5) and lesson13.communication_share(0.05, 0.3, 4, 0.6)
    assert lesson13.communication_share(0.05, 0.3, 4, 0.595)  # within 1 %
    assert not lesson13.communication_share(0.05, 0.3, 4, 60)  # a percentage
    assert not lesson13.communication_share(0.05, 0.3, 4, 0.3 / 0.2)  # over the compute alone
    assert not lesson13.communication_share(0.05, 0.3, 4, 0.4)  # the compute's share
    # computed with NumPy or torch: float32 scalars and one-element tensors are numbers too
    assert lesson13.communication_share(0.05, 0.3, 4, np.float32(0.6)) and lesson13.communication_share(
        0.05, 0.3, 4, torch.tensor(0.6))
    assert not lesson13.communication_share(0.05, 0.3, 4, np.float32(0.4))
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.communication_share(0.05, 0.3, 4, torch.tensor([0.6, 0.6]))
    with pytest.raises(ValueError, match="^all_reduce_ms must"):
        lesson13.communication_share(0.05, 0, 4, 0.6)
    with pytest.raises(ValueError, match="^compute_ms_per_example must"):
        lesson13.communication_share(-0.05, 0.3, 4, 0.6)
    with pytest.raises(ValueError, match="^examples_per_rank must"):
        lesson13.communication_share(0.05, 0.3, 0, 0.6)
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson13.communication_share(0.05, 0.3, 4, "0.6")
