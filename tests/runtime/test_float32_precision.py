"""float32_precision: the pin gives full float32 and stays, undoes the TF32 override without torch's "mix of
the legacy and new APIs" error; and, with a GPU's TF32 emulated on the CPU, lesson 02's comparison fails
without the pin and passes with it."""

import os
import subprocess
import sys

import pytest
import torch
from tf32 import lesson_02_batch, lesson_02_gap, lesson_02_model

from dpedu.runtime.float32_precision import pin_full_float32_precision


def observed() -> tuple:
    """Every way of reading the settings the helper changes, "raises" where torch refuses to answer."""
    def read(get):
        try:
            return get()
        except RuntimeError:
            return "raises"

    backends = torch.backends
    return (read(torch.get_float32_matmul_precision), read(lambda: backends.cuda.matmul.allow_tf32),
            read(lambda: backends.cudnn.allow_tf32),
            *(s.fp32_precision for s in (backends, backends.cuda.matmul, backends.mkldnn.matmul,
                                         backends.cudnn.conv, backends.cudnn.rnn)))


FULL = ("highest", False, False)  # what the first three of observed() read inside


@pytest.fixture
def settings_kept():
    """Whatever a test sets, torch's defaults come back after it (the precision and cuDNN's flag written last:
    each writes some of the new API's settings)."""
    yield
    backends = torch.backends
    backends.fp32_precision = "none"
    for setting in (backends.cuda.matmul, backends.mkldnn.matmul, backends.cudnn.conv, backends.cudnn.rnn):
        setting.fp32_precision = "none"
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = True


def test_the_pin_stays(settings_kept):
    torch.set_float32_matmul_precision("high")
    pin_full_float32_precision()
    assert observed()[:3] == FULL


# Run in a fresh interpreter: torch reads the variable when it starts.
UNDER_THE_OVERRIDE = """
import torch
from dpedu.runtime.float32_precision import pin_full_float32_precision
seen = [torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32]
pin_full_float32_precision()
seen += [torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32]
print(seen)
"""


def test_the_ngc_override_is_undone_and_the_legacy_flag_still_reads():
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"}
    run = subprocess.run([sys.executable, "-c", UNDER_THE_OVERRIDE], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr  # reading allow_tf32 raised nowhere
    # the override in force before the pin; full float32 after it, and the legacy flag still reads
    assert run.stdout.split("\n")[-2] == str(["high", True, "highest", False])


def test_tf32_breaks_lesson_02s_comparison_and_the_pin_mends_it(tf32_override, settings_kept):
    (X, _), model = lesson_02_batch(), lesson_02_model()
    assert lesson_02_gap(model, X) > 1e-4  # a GPU under the override: lesson 02's 1e-5 fails
    pin_full_float32_precision()
    assert lesson_02_gap(model, X) < 1e-5
