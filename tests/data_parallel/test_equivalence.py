import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dpedu import launch
from dpedu.data_parallel import equivalence, sync_batchnorm
from dpedu.models import largest_difference


def test_the_same_seed_builds_the_same_weights_whatever_the_norm():
    parameters = {norm: [p.detach() for p in equivalence.convnet(norm, seed=3).parameters() if p.dim() > 1]
                  for norm in ("batch", "sync", "none")}
    assert largest_difference(parameters["batch"], parameters["sync"]) == 0
    assert largest_difference(parameters["batch"], parameters["none"]) == 0
    assert equivalence.convnet("sync")(torch.randn(5, 64)).shape == (5, 10)


def test_shift_moves_each_image_by_its_offset():
    x = torch.zeros(2, 64)
    x[:, 3 * 8 + 4] = 1.0  # one lit pixel at row 3, column 4
    torch.manual_seed(0)
    moved, offsets = equivalence.shift(x)
    for image, (down, right) in zip(moved.view(-1, 8, 8), offsets.tolist(), strict=True):
        assert image[3 + down, 4 + right] == 1 and image.sum() == 1
    assert not torch.equal(equivalence.shift(torch.randn(50, 64))[1], equivalence.shift(torch.randn(50, 64))[1])
    assert set(equivalence.shift(torch.randn(200, 64))[1].flatten().tolist()) == {-1, 0, 1}


def _train_both(**options):
    return equivalence.train(steps=6, batch_size=8, lr=0.1, **options)


def test_sync_batchnorm_ranks_equal_one_process_and_per_replica_ones_do_not():
    single = equivalence.train(steps=6, batch_size=16, lr=0.1, ddp=False, norm="batch")
    synced = launch(_train_both, 2)
    per_replica = launch(lambda: _train_both(norm="batch"), 2)
    assert largest_difference(synced[0]["model"], single["model"]) < 1e-5
    assert torch.allclose(synced[0]["running"][-1], single["running"][-1], atol=1e-5)
    assert largest_difference(per_replica[0]["model"], single["model"]) > 1e-3
    mean_loss = [(a + b) / 2 for a, b in zip(synced[0]["losses"], synced[1]["losses"], strict=True)]
    assert max(abs(a - b) for a, b in zip(mean_loss, single["losses"], strict=True)) < 1e-5


def test_each_broken_condition_moves_the_result():
    single = equivalence.train(steps=6, batch_size=16, lr=0.1, ddp=False)
    for broken in ({"reduction": "sum"}, {"sampler_seed_per_rank": True}):
        state = launch(lambda broken=broken: _train_both(**broken), 2)[0]["model"]
        assert largest_difference(state, single["model"]) > 1e-3, broken


def _draws(same_random_stream):
    equivalence.seed_random_streams(0, same_random_stream)
    return torch.nn.functional.dropout(torch.ones(4, 32), 0.5), equivalence.shift(torch.zeros(4, 64))[1]


def test_random_streams_differ_per_rank_unless_told_otherwise():
    (mask0, shift0), (mask1, shift1) = launch(_draws, 2, args=(False,))
    assert not torch.equal(mask0, mask1) and not torch.equal(shift0, shift1)
    (mask0, shift0), (mask1, shift1) = launch(_draws, 2, args=(True,))
    assert torch.equal(mask0, mask1) and torch.equal(shift0, shift1)


def test_a_run_repeats_bit_for_bit_from_the_same_seed():
    run = lambda seed: equivalence.train(steps=4, batch_size=8, lr=0.1, dropout=0.3, augment=True, seed=seed)  # noqa: E731
    first, again = launch(run, 2, args=(0,)), launch(run, 2, args=(0,))
    other = launch(run, 2, args=(1,))
    assert all(largest_difference(a["model"], b["model"]) == 0 for a, b in zip(first, again, strict=True))
    assert largest_difference(first[0]["model"], other[0]["model"]) > 0


def test_running_statistics_without_broadcast_drift_apart_and_rank_0_keeps_its_own():
    def run(broadcast):
        return launch(lambda: equivalence.train(steps=5, batch_size=8, lr=0.1, norm="batch",
                                                broadcast_buffers=broadcast), 2)

    broadcast, local = run(True), run(False)
    assert torch.equal(broadcast[0]["running"][-1], local[0]["running"][-1])  # rank 0 only ever sees its own
    assert not torch.equal(local[0]["running"][-1], local[1]["running"][-1])
    assert torch.equal(broadcast[1]["running"][0], local[1]["running"][0])  # before any broadcast mattered
    assert not torch.equal(broadcast[1]["running"][-1], local[1]["running"][-1])


def test_evaluate_reads_a_sync_batchnorm_state():
    loss, correct = equivalence.evaluate(equivalence.convnet("sync").state_dict())
    assert loss > 0 and 0 <= correct <= 360


def test_the_gradient_gap_of_per_replica_batchnorm_shrinks_with_the_batch_and_vanishes_when_synced():
    gaps = launch(equivalence.gradient_gap, 2, args=([1, 4, 16], "batch", 2))[0]
    assert gaps[0] > gaps[1] > gaps[2] > 1e-3
    assert max(launch(equivalence.gradient_gap, 2, args=([1, 4], "sync", 2))[0]) < 1e-5


def test_one_step_of_sync_batchnorm_equals_the_whole_batch_in_one_process():
    """Within 1e-5 of each value's largest, lesson 08's comparison: the parameter gradients reach about 44, where
    float32's rounding alone differs by 1.5e-5 between thread counts (an absolute 1e-5 failed with 1 thread)."""
    reference = equivalence.batchnorm_step([3, 1, 2], "plain")
    ranks = launch(equivalence.batchnorm_step, 3, args=([3, 1, 2], "dpedu"))
    for key in ("output", "input grad", "parameter grads", "running statistics", "eval output"):
        assert sync_batchnorm.largest_gap(ranks, reference, key) < 1e-5, key
    per_replica = launch(equivalence.batchnorm_step, 3, args=([3, 1, 2], "plain"))
    assert sync_batchnorm.largest_gap(per_replica, reference, "output") > 1e-3


def test_without_a_gpu_per_rank_dpedu_sync_batchnorm_runs_on_cpu_ranks(fake_gpus, monkeypatch):
    calls = []
    fake_gpus(1)
    monkeypatch.setattr(equivalence, "launch", lambda fn, n, args=(), **kw: calls.append((fn, n, kw)) or ["result"] * n)
    assert equivalence.sync_batchnorm_on_this_machine([2, 2]) == ("dpedu", ["result", "result"])
    assert calls == [(equivalence.batchnorm_step, 2, {})]


def test_with_a_gpu_per_rank_torch_sync_batchnorm_runs_over_nccl(fake_gpus, monkeypatch):
    calls = []
    fake_gpus(2)
    monkeypatch.setattr(equivalence, "launch", lambda fn, n, args=(), **kw: calls.append((fn, n, kw)) or ["result"] * n)
    assert equivalence.sync_batchnorm_on_this_machine([2, 2])[0] == "torch"
    assert calls == [(equivalence._on_gpu, 2, {"backend": "nccl"})]


def test_torch_sync_batchnorm_refuses_cpu_tensors_in_training_and_in_ddp():
    messages = launch(equivalence.torch_refusals, 2)[0]
    assert "expected input tensor to be on GPU" in messages[0]
    assert "only work with GPU modules" in messages[1]


def test_ddp_buffer_option_is_named_as_this_torch_names_it():
    (name,) = equivalence._buffer_option(False)
    assert name in ("forward_sync_buffers", "broadcast_buffers")
    wrapped = launch(lambda: DDP(equivalence.convnet(), **equivalence._buffer_option(False)).broadcast_buffers, 2)
    assert wrapped == [False, False]


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: equivalence.convnet("layer"), ValueError, "norm"),
    (lambda: equivalence.convnet(dropout=1.0), ValueError, "dropout"),
    (lambda: equivalence.train(steps=-1, batch_size=8, lr=0.1, ddp=False), ValueError, "steps"),
    (lambda: equivalence.train(steps=1, batch_size=0, lr=0.1, ddp=False), ValueError, "batch_size"),
    (lambda: equivalence.train(steps=1, batch_size=8, lr=0, ddp=False), ValueError, "lr"),
    (lambda: equivalence.train(steps=1, batch_size=8, lr=0.1, ddp=False, reduction="max"), ValueError, "reduction"),
    (lambda: equivalence.train(steps=1, batch_size=8, lr=0.1), RuntimeError, "ddp=True needs a process group"),
    (lambda: equivalence.batchnorm_step([1, 2], "fused"), ValueError, "kind"),
    (lambda: equivalence.sync_batchnorm_on_this_machine([4]), ValueError, "batch_sizes"),
    (lambda: equivalence.sync_batchnorm_on_this_machine([4, 0]), ValueError, "batch_sizes"),
    (lambda: equivalence.batchnorm_step([2, 1.5]), ValueError, "each of batch_sizes"),
    (lambda: equivalence.shift(torch.zeros(3, 8, 8)), ValueError, "x must be a 2-D tensor"),
    (lambda: equivalence.shift(torch.zeros(3, 63)), ValueError, "x must hold 8x8 digits"),
    (lambda: equivalence.shift([0.0] * 64), TypeError, "x must be a torch.Tensor"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    assert not dist.is_initialized()
    with pytest.raises(error, match=name):
        call()


def test_gradient_gap_refuses_more_data_than_there_is():
    with pytest.raises(Exception, match="need more than the 1438 training digits"):
        launch(equivalence.gradient_gap, 2, args=([1000],))
    with pytest.raises(Exception, match="per_rank_batch_sizes must be a list"):
        launch(equivalence.gradient_gap, 2, args=(16,))
