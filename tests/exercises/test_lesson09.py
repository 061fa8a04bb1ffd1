import pytest

from dpedu.exercises import lesson09


def test_bubble_check():
    assert lesson09.bubble(4, 8, 3 / 11) and lesson09.bubble(4, 8, 0.273)
    assert not lesson09.bubble(4, 8, 3 / 8) and not lesson09.bubble(4, 8, float("nan"))


def test_micro_batches_kept_check():
    assert lesson09.micro_batches_kept("1f1b", 4, 8, 1, 3) and not lesson09.micro_batches_kept("1f1b", 4, 8, 1, 8)
    assert lesson09.micro_batches_kept("gpipe", 4, 8, 1, 8)


def test_zero_gigabytes_check():
    assert lesson09.zero_gigabytes(13e9, 16, 2, 2 * 13 + 14 * 13 / 16)
    assert not lesson09.zero_gigabytes(13e9, 16, 2, 16 * 13 / 16)
    assert lesson09.zero_gigabytes(13e9, 16, 2, 4 * 13 + 12 * 13 / 16, "autocast")
    assert not lesson09.zero_gigabytes(13e9, 16, 2, 2 * 13 + 14 * 13 / 16, "autocast")


def test_survives_float16_check():
    assert lesson09.survives_float16(3e-8, True) and lesson09.survives_float16(2e-8, False)
    assert lesson09.survives_float16(1e-3, True) and not lesson09.survives_float16(1e-9, True)
    # 2^-25 is the tie between 0 and 2^-24: it rounds to even, 0; just above it rounds up to 2^-24
    assert lesson09.survives_float16(2.0 ** -25, False) and lesson09.survives_float16(2.0 ** -25 * 1.01, True)
    # overflow to inf is not surviving either: 65504 is float16's largest, 65520 rounds to inf
    assert lesson09.survives_float16(1e5, False) and not lesson09.survives_float16(1e5, True)
    assert lesson09.survives_float16(65504.0, True) and lesson09.survives_float16(65520.0, False)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson09.bubble(0, 8, 0.1), ValueError, "stages"),
    (lambda: lesson09.micro_batches_kept("zb", 4, 8, 1, 3), ValueError, "kind"),
    (lambda: lesson09.micro_batches_kept("1f1b", 4, 8, 4, 3), ValueError, "stage"),
    (lambda: lesson09.zero_gigabytes(0, 16, 2, 1.0), ValueError, "params"),
    (lambda: lesson09.zero_gigabytes(1e9, 16, 5, 1.0), ValueError, "stage"),
    (lambda: lesson09.zero_gigabytes(1e9, 16, 2, 1.0, "fp8"), ValueError, "precision"),
    (lambda: lesson09.survives_float16(float("nan"), True), ValueError, "value"),
    (lambda: lesson09.survives_float16(1e-8, "yes"), TypeError, "answer"),
    (lambda: lesson09.survives_float16(1e-8, 1), TypeError, "answer"),
    (lambda: lesson09.bubble(4, 8, "0.27"), TypeError, "answer must be a number"),
    (lambda: lesson09.bubble(4, 8, True), TypeError, "answer must be a number"),
    (lambda: lesson09.micro_batches_kept("1f1b", 4, 8, 1, "3"), TypeError, "answer must be a number"),
    (lambda: lesson09.zero_gigabytes(13e9, 16, 2, None), TypeError, "answer must be a number"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_hsdp_gigabytes_check():
    assert lesson09.hsdp_gigabytes(7.5e9, 8, 15, "autocast") and lesson09.hsdp_gigabytes(7.5e9, 8, 15)
    assert not lesson09.hsdp_gigabytes(7.5e9, 8, 1.875, "autocast")  # FSDP over all 64, not HSDP


def test_kept_with_checkpointing_check():
    assert lesson09.kept_with_checkpointing(12, 128, 512, 12 * 512 * 128 * 4)
    assert not lesson09.kept_with_checkpointing(12, 128, 512, 9 * 12 * 512 * 128 * 4)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson09.hsdp_gigabytes(7.5e9, 0, 15), ValueError, "shard_size"),
    (lambda: lesson09.hsdp_gigabytes(7.5e9, 8, 15, "fp8"), ValueError, "precision"),
    (lambda: lesson09.hsdp_gigabytes(7.5e9, 8, "15"), TypeError, "answer must be a number"),
    (lambda: lesson09.kept_with_checkpointing(0, 128, 512, 1), ValueError, "blocks"),
    (lambda: lesson09.kept_with_checkpointing(12, 128, 512, None), TypeError, "answer must be a number"),
])
def test_new_checks_refuse_bad_arguments_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()
