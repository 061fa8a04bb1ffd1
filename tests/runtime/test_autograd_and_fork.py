"""torch's rule that a forked child cannot run backward once the parent's autograd engine has started device threads,
met on a CUDA build of torch without GPUs, and the start method dpedu chooses there (dpedu.runtime.start_methods).

torch's own behaviour, which may change between releases: CI runs this on the newest torch too.
"""

import os
import subprocess
import sys

import pytest
import torch

# A machine without GPUs, on PyPI's default (CUDA) build of torch: a FakeTensorMode (torch.compile enters one) puts
# in a stand-in CUDA device, the first backward then starts autograd's device threads, and a forked rank's backward
# fails. The same launch with the method dpedu chooses works.
AFTER_A_FAKE_TENSOR_MODE = """
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
import dpedu
from dpedu.runtime.start_methods import autograd_device_threads, choose_start_method

def backward():
    weight = torch.ones(3, requires_grad=True)
    (weight * 2).sum().backward()
    return weight.grad.tolist()

with FakeTensorMode():
    pass
backward()
method, why = choose_start_method()
print(autograd_device_threads() > 0, method, "autograd" in why)
try:
    dpedu.launch(backward, 2, start_method="fork", timeout=60)
    print("forked: no error")
except dpedu.RankFailedError as error:
    print("forked:", "autograd's threading" in str(error))
print("chosen:", dpedu.launch(backward, 2, timeout=60) == [[2.0, 2.0, 2.0]] * 2)
"""


@pytest.mark.skipif(not torch.backends.cuda.is_built(), reason="a CPU-only build of torch has no CUDA device to "
                    "stand in for, so its autograd engine starts no device threads without a device")
@pytest.mark.skipif(bool(torch.cuda.device_count()), reason="with GPUs every first backward starts the threads, and "
                    "ranks start from a forkserver for the GPUs' sake first (tests/runtime/test_start_methods.py)")
def test_after_a_fake_tensor_mode_on_a_cuda_build_forked_ranks_fail_backward_and_the_chosen_method_works():
    env = {name: value for name, value in os.environ.items() if name != "DPEDU_START_METHOD"}
    run = subprocess.run([sys.executable, "-c", AFTER_A_FAKE_TENSOR_MODE], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["True forkserver True", "forked: True", "chosen: True"], run.stdout
