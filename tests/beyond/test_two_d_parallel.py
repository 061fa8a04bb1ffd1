import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpedu import RankFailedError, launch
from dpedu.beyond import model_parallel as mp
from dpedu.beyond import two_d_parallel as tdp


def _groups(t):
    tp, dp = tdp.subgroups(t)
    return dist.get_process_group_ranks(tp), dist.get_process_group_ranks(dp)


def test_subgroups_split_ranks_into_tensor_parallel_rows_and_data_parallel_columns():
    assert launch(_groups, 4, args=(2,)) == [([0, 1], [0, 2]), ([0, 1], [1, 3]), ([2, 3], [0, 2]), ([2, 3], [1, 3])]
    assert launch(_groups, 2, args=(1,)) == [([0], [0, 1]), ([1], [0, 1])]  # t = 1: plain data parallelism


def test_subgroups_refuse_a_tensor_parallel_size_that_does_not_divide_the_ranks():
    with pytest.raises(RankFailedError, match="tensor_parallel must divide the world size 4, got 3"):
        launch(_groups, 4, args=(3,))


def test_megatron_mlp_over_a_group_equals_the_whole_block_with_one_all_reduce_each_way():
    def block(x, A, B):
        log, x = [], x.clone().requires_grad_()
        r, n = dist.get_rank(), dist.get_world_size()
        y = mp.megatron_mlp(x, A.chunk(n, 1)[r], B.chunk(n, 0)[r], log=log)
        y.sum().backward()
        return y.detach(), x.grad, log

    g = torch.Generator().manual_seed(0)
    x, A, B = torch.randn(4, 8, generator=g), torch.randn(8, 32, generator=g), torch.randn(32, 8, generator=g)
    whole_x = x.clone().requires_grad_()
    y = F.gelu(whole_x @ A) @ B
    y.sum().backward()
    for out, grad, log in launch(block, 2, args=(x, A, B)):
        torch.testing.assert_close(out, y.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(grad, whole_x.grad, rtol=1e-5, atol=1e-5)
        assert log == ["forward", "backward"]


def test_data_times_tensor_parallel_training_equals_one_process_on_the_global_batch():
    ranks = launch(lambda: tdp.train_dp_tp(steps=3, lr=0.1), 4)
    A, B = tdp.train_whole_mlp(steps=3, lr=0.1)
    torch.testing.assert_close(torch.cat([ranks[0]["A"], ranks[1]["A"]], 1), A, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.cat([ranks[0]["B"], ranks[1]["B"]], 0), B, rtol=1e-5, atol=1e-6)
    assert all(torch.equal(ranks[r][w], ranks[r + 2][w]) for r in (0, 1) for w in ("A", "B"))
    assert all(r["tp_all_reduces"] == ["forward"] for r in ranks)
    rows = len(tdp.mlp_problem()[0])  # each replica trains on its own half of the global batch
    assert [r["rows"] for r in ranks] == [(0, rows // 2)] * 2 + [(rows // 2, rows)] * 2


def test_the_mesh_api_builds_the_same_groups_and_trains_to_the_same_result():
    ranks = launch(lambda: tdp.train_mesh(steps=3, lr=0.1), 4)
    A, B = tdp.train_whole_mlp(steps=3, lr=0.1)
    assert [(r["tp_ranks"], r["dp_ranks"]) for r in ranks] == launch(_groups, 4, args=(2,))
    for r in ranks:
        torch.testing.assert_close(r["A"], A, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(r["B"], B, rtol=1e-5, atol=1e-6)
        assert r["placements"] == {"0.weight": ("StridedShard(dim=0, split_factor=2)", "Shard(dim=0)"),
                                   "2.weight": ("Shard(dim=0)", "Shard(dim=1)")}
        # in float32: the all-gather hands in this rank's 2 x 256 parameters, the tp all-reduce the block's 8 x 16
        # output, the reduce-scatter the gradients of both tp slices (2 x 512)
        assert r["calls"] == [("all_gather", 2048), ("all_reduce", 512), ("reduce_scatter", 4096)]


def test_train_mesh_refuses_a_tensor_parallel_size_that_does_not_divide_the_ranks():
    with pytest.raises(RankFailedError, match="tensor_parallel must divide"):
        launch(lambda: tdp.train_mesh(steps=1, lr=0.1, tensor_parallel=3), 4)


def _one_process_on_all_batches(steps: int, ranks: int) -> list[torch.Tensor]:
    """What train_split's ranks are compared with: the same SGD in one CPU process on their batches together."""
    model = tdp.TwoDeviceMLP((torch.device("cpu"), torch.device("cpu")))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = (torch.cat(t) for t in zip(*(tdp.split_batch(r) for r in range(ranks)), strict=True))
    for _ in range(steps):
        optimizer.zero_grad()
        F.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def test_ddp_over_a_module_on_two_devices_equals_one_process_on_all_batches():
    ranks = launch(lambda: tdp.train_split(steps=3, lr=0.1), 2)
    reference = _one_process_on_all_batches(steps=3, ranks=2)
    for rank in ranks:
        for got, want in zip(rank, reference, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_the_split_module_trains_in_full_float32_even_under_the_tf32_override(monkeypatch, tf32_override):
    """A GPU's TF32 under TORCH_ALLOW_TF32_CUBLAS_OVERRIDE, emulated in forked gloo ranks (tests/tf32.py), as
    lesson 12 starts them: train_split's own pin keeps the lesson's 1e-6, which TF32 would break."""
    def trained():
        return launch(lambda: tdp.train_split(steps=5, lr=0.1), 2, start_method="fork")[0]

    with monkeypatch.context() as unpinned:
        unpinned.setattr(tdp, "pin_full_float32_precision", lambda: None)
        in_tf32 = trained()
    pinned = trained()
    torch.set_float32_matmul_precision("highest")  # the lesson's reference: one CPU process in float32
    reference = _one_process_on_all_batches(steps=5, ranks=2)

    def gap(result):
        return max((got - want).abs().max().item() for got, want in zip(result, reference, strict=True))

    assert gap(in_tf32) > 1e-6 and gap(pinned) < 1e-6


def test_split_devices_gives_each_rank_two_gpus_of_its_own_or_the_cpu():
    assert tdp.split_devices(1, 2, 4) == (torch.device("cuda:2"), torch.device("cuda:3"))
    assert tdp.split_devices(0, 2, 3) == (torch.device("cpu"), torch.device("cpu"))


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: tdp.split_devices(2, 2, 4), ValueError, "rank"),
    (lambda: tdp.split_devices(0, 0, 4), ValueError, "world_size"),
    (lambda: tdp.split_devices(0, 2, -1), ValueError, "gpus"),
    (lambda: tdp.mlp_problem(width=0), ValueError, "width"),
    (lambda: tdp.train_whole_mlp(steps=0, lr=0.1), ValueError, "steps"),
    (lambda: tdp.train_whole_mlp(steps=1, lr=0), ValueError, "lr"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
