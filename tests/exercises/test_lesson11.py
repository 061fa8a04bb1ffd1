import pytest

from dpedu.exercises import lesson11


def test_zero_gigabytes_check():
    assert lesson11.zero_gigabytes(13e9, 16, 2, 2 * 13 + 14 * 13 / 16)
    assert not lesson11.zero_gigabytes(13e9, 16, 2, 16 * 13 / 16)
    assert lesson11.zero_gigabytes(13e9, 16, 2, 4 * 13 + 12 * 13 / 16, "autocast")
    assert not lesson11.zero_gigabytes(13e9, 16, 2, 2 * 13 + 14 * 13 / 16, "autocast")


def test_survives_float16_check():
    assert lesson11.survives_float16(3e-8, True) and lesson11.survives_float16(2e-8, False)
    assert lesson11.survives_float16(1e-3, True) and not lesson11.survives_float16(1e-9, True)
    # 2^-25 is the tie between 0 and 2^-24: it rounds to even, 0; just above it rounds up to 2^-24
    assert lesson11.survives_float16(2.0 ** -25, False) and lesson11.survives_float16(2.0 ** -25 * 1.01, True)
    # overflow to inf is not surviving either: 65504 is float16's largest, 65520 rounds to inf
    assert lesson11.survives_float16(1e5, False) and not lesson11.survives_float16(1e5, True)
    assert lesson11.survives_float16(65504.0, True) and lesson11.survives_float16(65520.0, False)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson11.zero_gigabytes(0, 16, 2, 1.0), ValueError, "params"),
    (lambda: lesson11.zero_gigabytes(1e9, 16, 5, 1.0), ValueError, "stage"),
    (lambda: lesson11.zero_gigabytes(1e9, 16, 2, 1.0, "fp8"), ValueError, "precision"),
    (lambda: lesson11.survives_float16(float("nan"), True), ValueError, "value"),
    (lambda: lesson11.survives_float16(1e-8, "yes"), TypeError, "answer"),
    (lambda: lesson11.survives_float16(1e-8, 1), TypeError, "answer"),
    (lambda: lesson11.zero_gigabytes(13e9, 16, 2, None), TypeError, "answer must be a number"),
])
def test_bad_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_hsdp_gigabytes_check():
    assert lesson11.hsdp_gigabytes(7.5e9, 8, 15, "autocast") and lesson11.hsdp_gigabytes(7.5e9, 8, 15)
    assert not lesson11.hsdp_gigabytes(7.5e9, 8, 1.875, "autocast")  # FSDP over all 64, not HSDP


def test_kept_with_checkpointing_check():
    assert lesson11.kept_with_checkpointing(12, 128, 512, 12 * 512 * 128 * 4)
    assert not lesson11.kept_with_checkpointing(12, 128, 512, 9 * 12 * 512 * 128 * 4)


@pytest.mark.parametrize(("call", "error", "name"), [
    (lambda: lesson11.hsdp_gigabytes(7.5e9, 0, 15), ValueError, "shard_size"),
    (lambda: lesson11.hsdp_gigabytes(7.5e9, 8, 15, "fp8"), ValueError, "precision"),
    (lambda: lesson11.hsdp_gigabytes(7.5e9, 8, "15"), TypeError, "answer must be a number"),
    (lambda: lesson11.kept_with_checkpointing(0, 128, 512, 1), ValueError, "blocks"),
    (lambda: lesson11.kept_with_checkpointing(12, 128, 512, None), TypeError, "answer must be a number"),
])
def test_new_checks_refuse_bad_arguments_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_zero_one_slice_check():
    assert lesson11.zero_one_slice(1732, 3, 578) and lesson11.zero_one_slice(1732, 4, 433)
    assert not lesson11.zero_one_slice(1732, 3, 577) and not lesson11.zero_one_slice(1732, 3, 1732 / 3)
    with pytest.raises(ValueError, match="ranks"):
        lesson11.zero_one_slice(1732, 0, 1)
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson11.zero_one_slice(1732, 3, "578")
