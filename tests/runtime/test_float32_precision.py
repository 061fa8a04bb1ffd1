"""float32_precision: the pin gives full float32 and stays, undoes the TF32 override without torch's "mix of
the legacy and new APIs" error; and, with a GPU's TF32 emulated on the CPU, lesson 02's comparison fails
without the pin and passes with it."""

import os
import subprocess
import sys

import torch
from tf32 import lesson_02_batch, lesson_02_gap, lesson_02_model

from dpedu.runtime.float32_precision import pin_full_float32_precision


def test_the_pin_stays(float32_settings_kept):
    torch.set_float32_matmul_precision("high")
    pin_full_float32_precision()
    assert (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32) == ("highest", False, False)


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


def test_tf32_breaks_lesson_02s_comparison_and_the_pin_mends_it(tf32_override):
    (X, _), model = lesson_02_batch(), lesson_02_model()
    assert lesson_02_gap(model, X) > 1e-4  # a GPU under the override: lesson 02's 1e-5 fails
    pin_full_float32_precision()
    assert lesson_02_gap(model, X) < 1e-5
