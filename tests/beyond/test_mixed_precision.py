import platform
from pathlib import Path

import pytest
import torch

from dpedu import launch, models
from dpedu.beyond import mixed_precision as mx


@pytest.fixture(autouse=True)
def _capped_onednn(monkeypatch):
    """bfloat16 work runs in a rank with oneDNN capped, as the lesson runs it (a rank sees the caller's
    environment as it is at the call)."""
    for name, value in mx.BF16_ENV.items():
        monkeypatch.setenv(name, value)


def _in_a_rank(fn, *args):
    return launch(fn, 1, args=args)[0]


def _activations():
    model, x = models.mlp(8, 16, 4, depth=2), torch.randn(5, 8)
    return {p: mx.saved_bytes(model, x, p) for p in mx.PRECISIONS}


def test_autocast_keeps_half_the_activation_bytes_and_adds_16_bit_weight_copies():
    kept = _in_a_rank(_activations)
    assert kept["bfloat16"]["activations"] * 2 == kept["float32"]["activations"] and kept["float16"] == kept["bfloat16"]
    # activations: x (5 x 8) and two hidden layers (5 x 16), 4 bytes each in float32
    assert kept["float32"] == {"activations": 4 * (5 * 8 + 2 * 5 * 16), "weight_copies": 0}
    # the copies of the weights whose inputs need a gradient (not the first layer's): 16 x 16 and 4 x 16
    assert kept["bfloat16"] == {"activations": 2 * (5 * 8 + 2 * 5 * 16), "weight_copies": 2 * (16 * 16 + 4 * 16)}


def test_bfloat16_and_float16_with_loss_scaling_train_like_float32():
    losses = _in_a_rank(lambda: {p: mx.train_digits(p, steps=25, lr=0.3, hidden=32) for p in mx.PRECISIONS})
    assert [len(v) for v in losses.values()] == [3, 3, 3]  # after steps 10, 20 and 25
    assert losses["float32"][-1] < 0.8 * losses["float32"][0]
    for precision in ("bfloat16", "float16"):
        assert abs(losses[precision][-1] - losses["float32"][-1]) < 0.02


def test_float16_loses_tiny_gradients_that_loss_scaling_and_bfloat16_keep():
    found = _in_a_rank(lambda: {(p, s): mx.small_gradients(p, s) for p, s in
                                (("float16", 1.0), ("float16", 2.0 ** 16), ("bfloat16", 1.0), ("float32", 1.0))})
    assert found["float16", 1.0]["lost_share"] == 1.0 and found["float16", 1.0]["relative_error"] == 1.0
    assert found["float16", 2.0 ** 16]["relative_error"] < 0.01 and found["bfloat16", 1.0]["relative_error"] < 0.05
    assert found["float16", 2.0 ** 16]["lost_share"] < 0.01 and found["bfloat16", 1.0]["lost_share"] < 0.01
    assert found["bfloat16", 1.0]["relative_error"] > 0.01  # 8 bits of precision show
    assert found["float32", 1.0] == {**found["float32", 1.0], "lost_share": 0.0, "relative_error": 0.0}
    assert found["float32", 1.0]["smallest_gradient"] < 2 ** -24


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists() or platform.machine() != "x86_64", reason="reads x86 flags")
def test_bfloat16_instructions_agree_with_the_flags_linux_lists():
    flags = Path("/proc/cpuinfo").read_text().split()
    assert mx.bfloat16_instructions() == ("avx512_bf16" in flags or "amx_tile" in flags)


@pytest.mark.parametrize(("machine", "answers", "expected"), [
    ("x86_64", (True, False), True), ("x86_64", (False, True), True), ("x86_64", (False, False), False),
    ("AMD64", (False, False), False), ("arm64", (True, True), None), ("aarch64", (False, False), None),
    ("x86_64", (None, False), None),  # a torch without the check: it cannot tell
])
def test_bfloat16_instructions_say_none_where_torchs_check_cannot_tell(monkeypatch, machine, answers, expected):
    monkeypatch.setattr(mx.platform, "machine", lambda: machine)
    for name, answer in zip(("_is_avx512_bf16_supported", "_is_amx_tile_supported"), answers, strict=True):
        if answer is None:
            monkeypatch.delattr(torch.cpu, name)
        else:
            monkeypatch.setattr(torch.cpu, name, lambda answer=answer: answer)
    assert mx.bfloat16_instructions() is expected


def test_matmul_seconds_are_positive():
    assert all(_in_a_rank(lambda: [mx.matmul_seconds(p, 16, 3) > 0 for p in mx.PRECISIONS]))


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: mx.saved_bytes("model", None), TypeError, "model"),
    (lambda: mx.saved_bytes(models.mlp(2, 2, 2), [1.0]), TypeError, "x"),
    (lambda: mx.train_digits("int8", steps=1, lr=0.1), ValueError, "precision"),
    (lambda: mx.matmul_seconds("int8"), ValueError, "precision"),
    (lambda: mx.train_digits("float32", steps=0, lr=0.1), ValueError, "steps"),
    (lambda: mx.train_digits("float32", steps=1, lr=0.0), ValueError, "lr"),
    (lambda: mx.train_digits("float32", steps=1, lr=0.1, device="tpu"), ValueError, "device"),
    (lambda: mx.small_gradients("float16", 0.0), ValueError, "loss_scale"),
    (lambda: mx.small_gradients("float16", 1.0, weight=-1.0), ValueError, "weight"),
    (lambda: mx.small_gradients("half", 1.0), ValueError, "precision"),
    (lambda: mx.matmul_seconds("float64"), ValueError, "precision"),
    (lambda: mx.matmul_seconds("float32", 0), ValueError, "size"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
