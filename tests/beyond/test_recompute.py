import pytest
import torch

from dpedu import launch
from dpedu.beyond import recompute as rc


def _one_step(recompute, depth=3, width=8, batch=5, early_stop=True):
    blocks = rc.Blocks(width, depth, recompute=recompute, early_stop=early_stop)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)
    measured = rc.step(blocks, blocks, x, y)
    return measured, [p.grad for p in blocks.parameters()]


def test_checkpointing_keeps_only_each_blocks_input_recomputes_what_backward_needs_and_changes_no_gradient():
    plain, plain_grads = _one_step(False)
    ckpt, ckpt_grads = _one_step(True)
    whole, whole_grads = _one_step(True, early_stop=False)
    value = 4 * 5 * 8  # one (batch, width) float32 activation
    assert plain["kept_bytes"] == 3 * 9 * value  # input, 4w before GELU, 4w after, per block
    assert ckpt["kept_bytes"] == whole["kept_bytes"] == 3 * value
    # 3 blocks of 2 Linears: 6 matmuls forward; backward 2 per Linear, but none for the input's gradient
    assert (plain["forward_matmuls"], plain["backward_matmuls"]) == (6, 11)
    # early stop: each block's first Linear is recomputed, not its second (its input is saved first)
    assert (ckpt["forward_matmuls"], ckpt["backward_matmuls"]) == (6, 11 + 3)
    assert (whole["forward_matmuls"], whole["backward_matmuls"]) == (6, 11 + 6)  # one whole forward more
    for a, b, c in zip(ckpt_grads, whole_grads, plain_grads, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-6, atol=0)
        torch.testing.assert_close(b, c, rtol=1e-6, atol=0)


def test_under_ddp_replicas_stay_identical_and_the_gradients_equal_those_without():
    ranks = launch(lambda: rc.train_ddp(steps=2, width=8, batch=4), 2)
    for a, b in zip(ranks[0][True]["params"], ranks[1][True]["params"], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ranks[0][True]["grads"], ranks[0][False]["grads"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=0)
    assert [s["backward_matmuls"] for s in ranks[0][True]["steps"]] == [4 * 4 - 1 + 4] * 2  # counted under DDP too


def _run(steps: int, backward_s: float = 0.02, forward_s: float = 0.01) -> dict:
    return {"steps": [{"backward_cpu_s": backward_s, "forward_cpu_s": forward_s}] * steps}


def test_checkpointings_cost_is_the_median_of_paired_differences_after_the_warm_up_step():
    plain = {"steps": [{"backward_cpu_s": b, "forward_cpu_s": f} for b, f in
                       ((1.0, 1.0), (0.020, 0.010), (0.020, 0.012), (0.030, 0.011))]}
    checkpointed = {"steps": [{"backward_cpu_s": b, "forward_cpu_s": 0.0} for b in (0.0, 0.025, 0.029, 0.050)]}
    added, forward = rc.checkpointing_cpu_ms(plain, checkpointed)  # differences 5, 9 and 20 ms; the first left out
    assert added == pytest.approx(9.0) and forward == pytest.approx(11.0)
    assert rc.checkpointing_costs_backward(added, forward) and not rc.checkpointing_costs_backward(2.0, forward)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: rc.Blocks(8, 2, recompute="yes"), TypeError, "recompute"),
    (lambda: rc.Blocks(8, 2, recompute=True, early_stop=1), TypeError, "early_stop"),
    (lambda: rc.Blocks(0, 2, recompute=True), ValueError, "width"),
    (lambda: rc.step(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2), torch.ones(1, 2), torch.ones(1, 2)),
     TypeError, "blocks"),
    (lambda: rc.step(rc.Blocks(2, 1, recompute=False), rc.Blocks(2, 1, recompute=False), torch.ones(2),
                     torch.ones(1, 2)), ValueError, "x"),
    (lambda: rc.train_ddp(steps=0), ValueError, "steps"),
    (lambda: rc.checkpointing_cpu_ms([], _run(3)), TypeError, "plain"),
    (lambda: rc.checkpointing_cpu_ms(_run(3), {}), TypeError, "checkpointed"),
    (lambda: rc.checkpointing_cpu_ms(_run(1), _run(1)), ValueError, "plain"),
    (lambda: rc.checkpointing_cpu_ms(_run(3), _run(2)), ValueError, "as many steps"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
