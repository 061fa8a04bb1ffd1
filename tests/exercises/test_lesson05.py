import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import dpedu
from dpedu.exercises import lesson05

MiB = 2**20


def _all_reduces_per_step(cap_mb: float) -> tuple[int, list[int]]:
    """MiniDDP's buckets, and the all-reduces torch DDP sends in each of 3 steps, for four 3 MiB gradients."""
    torch.manual_seed(0)
    layers = [nn.Linear(768, 1024, bias=False), nn.Linear(1024, 768, bias=False)] * 2  # 3 MiB of float32 each
    model = nn.Sequential(*(nn.Linear(layer.in_features, layer.out_features, bias=False) for layer in layers))
    mini = len(dpedu.MiniDDP(model, bucket_cap_mb=cap_mb).buckets)
    ddp, calls = DDP(model, bucket_cap_mb=cap_mb), []

    def counting(state, bucket):
        calls[-1] += 1
        work = dist.all_reduce(bucket.buffer().div_(dist.get_world_size()), async_op=True)
        return work.get_future().then(lambda future: future.value()[0])

    ddp.register_comm_hook(None, counting)
    for _ in range(3):
        calls.append(0)
        ddp(torch.randn(2, 768)).sum().backward()
    return mini, calls


@pytest.mark.parametrize("cap_mb", [5, 7, 2.5])
def test_bucket_counts_are_what_minddp_and_torch_ddp_send(cap_mb):
    mini, calls = dpedu.launch(_all_reduces_per_step, 2, (cap_mb,))[0]
    assert calls[0] == 1 and calls[1] == calls[2]  # torch DDP's first step sends one bucket, then rebuilds
    assert lesson05.buckets_per_step([3 * MiB] * 4, cap_mb, mini, calls[2])
    assert not lesson05.buckets_per_step([3 * MiB] * 4, cap_mb, mini + 1, calls[2])
    assert not lesson05.buckets_per_step([3 * MiB] * 4, cap_mb, mini, calls[2] + 1)


def test_bucket_counts_by_hand():
    assert lesson05.buckets_per_step([3 * MiB] * 4, 5, 4, 2)
    assert lesson05.buckets_per_step([MiB] * 3, 25, 1, 1)
    assert lesson05.buckets_per_step([8 * MiB, MiB], 5, 2, 2)  # one gradient over the cap: a bucket of its own


def test_compressed_ring_bytes():
    assert lesson05.compressed_ring_bytes(25 * MiB, 8, 22_937_600)
    assert not lesson05.compressed_ring_bytes(25 * MiB, 8, 2 * 22_937_600)  # float32: not compressed
    assert not lesson05.compressed_ring_bytes(25 * MiB, 8, 25 * MiB / 2)  # the bucket, not what a ring sends


def test_powersgd_fewer():
    assert lesson05.powersgd_fewer(4096, 4096, 4, 512) and lesson05.powersgd_fewer(64, 32, 1, 2048 / 96)
    assert not lesson05.powersgd_fewer(4096, 4096, 4, 1024) and not lesson05.powersgd_fewer(4096, 4096, 4, 256)


@pytest.mark.parametrize("answer", ["2", True, None])
def test_checks_refuse_non_numbers(answer):
    for check, args in ((lesson05.compressed_ring_bytes, (MiB, 8)), (lesson05.powersgd_fewer, (64, 32, 1)),
                        (lambda *a: lesson05.buckets_per_step([MiB], 5, *a, 1), ())):
        with pytest.raises(TypeError, match="answer must be a number"):
            check(*args, answer)


def test_checks_name_bad_arguments():
    with pytest.raises(ValueError, match="sizes"):
        lesson05.buckets_per_step([], 5, 1, 1)
    with pytest.raises(ValueError, match="cap_mb"):
        lesson05.buckets_per_step([MiB], 0, 1, 1)
    with pytest.raises(ValueError, match="ranks"):
        lesson05.compressed_ring_bytes(MiB, 1, 0)
    with pytest.raises(ValueError, match="rank"):
        lesson05.powersgd_fewer(64, 32, 0, 1)
