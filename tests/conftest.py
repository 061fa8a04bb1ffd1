"""Each notebook is executed once per suite: where the browser test runs a lesson, nbval does not.

tests/test_browser.py executes every lesson in JupyterLab and compares the saved outputs with the stored
ones (tests/stored_outputs.py), which is what nbval would do in a kernel of its own. When that browser
test is selected and can run (Chromium found), the same notebook's nbval cells are deselected. Run a
notebook on its own (``./course test notebooks/01_gd_sgd_minibatch.ipynb``), or without Chromium, and
nbval checks it as before; CI's runs on other CPU kernel paths (``./course test notebooks/``) are nbval's.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
from pathlib import Path

import pytest
import tf32
import torch

from dpedu.runtime import start_methods, warm_ranks
from dpedu.runtime.failures import leftover_processes

BROWSER_TEST = "test_run_all_in_jupyterlab_shows_no_error_and_explorers_redraw"


def _first_backward() -> None:
    """torch's autograd engine decides at a process's first backward, once, whether to start device threads; after
    a FakeTensorMode on a CUDA build without GPUs it starts eight, and forked ranks can no longer run backward
    (tests/runtime/test_autograd_and_fork.py). Tests that fork ranks to hand them a fake (a monkeypatch they
    inherit) must find every test process able to fork whichever test ran before: its first backward is here.
    (With GPUs the engine starts them at any first backward, and ranks start from a forkserver anyway.)"""
    weight = torch.ones(1, requires_grad=True)
    (weight * 2).sum().backward()


_first_backward()


def _will_run(item) -> bool:
    return not any(mark.args and mark.args[0] for mark in item.iter_markers("skipif"))


def pytest_collection_modifyitems(config, items):
    in_browser = {item.callspec.params["notebook"].name for item in items
                  if getattr(item, "originalname", None) == BROWSER_TEST and _will_run(item)}
    twice = [item for item in items if item.path.suffix == ".ipynb" and item.path.name in in_browser]
    if twice:
        config.hook.pytest_deselected(items=twice)
        items[:] = [item for item in items if item.path.suffix != ".ipynb" or item.path.name not in in_browser]


@pytest.fixture(autouse=True)
def no_timing_claim_record(monkeypatch):
    """Unit tests judge timing claims on made-up machines and broken subjects: none of those judgements goes
    into CI's record of the lessons' claims (the browser test's lessons do: its module-scoped server starts
    with the record in its environment, before this runs)."""
    monkeypatch.delenv("DPEDU_TIMING_CLAIMS", raising=False)


@pytest.fixture
def fake_gpus(monkeypatch):
    """``fake_gpus(n)`` makes dpedu see n GPUs (torch itself still sees what is there).

    Every module of dpedu counts GPUs through ``start_methods.gpu_count``, so this one patch fakes a
    consistent GPU machine for the start method, the backend and every GPU branch. Not faked: the GPUs
    the environment report lists (it asks torch for their names) and ``dpedu.gpu_count``, the name
    notebooks import, bound when dpedu was imported.
    """
    return lambda n: monkeypatch.setattr(start_methods, "gpu_count", lambda: n)


@pytest.fixture
def float32_settings_kept():
    """Afterwards the float32 matmul precision and cuDNN's TF32 flag are what they were (a pin the test made
    included: setting the two rewrites the settings the pin writes)."""
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(before[0])
    torch.backends.cudnn.allow_tf32 = before[1]


@pytest.fixture
def tf32_override(monkeypatch, float32_settings_kept):
    """This process as if on an Ampere or later GPU under ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, emulated on
    the CPU: the float32 matmul precision reads "high", and ``torch.nn.functional.linear`` (``nn.Linear``'s
    forward and backward) rounds its operands to TF32 whenever it is not "highest" (tests/tf32.py). Ranks
    forked from this process inherit both.
    """
    monkeypatch.setattr(torch.nn.functional, "linear", tf32.linear)
    torch.set_float32_matmul_precision("high")


def _nothing_left_but_idle_ranks() -> None:
    assert [p for p in mp.active_children() if p.pid not in warm_ranks.idle_pids()] == []
    if Path("/proc").exists():
        assert leftover_processes() == []


def _close_warm_ranks() -> None:
    warm_ranks.close()
    assert mp.active_children() == []


@pytest.fixture
def no_leftover_processes():
    """After the test: no child process of this one but idle warm ranks, and (on Linux) nothing a launch left
    running. Then the warm ranks are closed, so that the next test starts from none."""
    yield
    _nothing_left_but_idle_ranks()
    _close_warm_ranks()


@pytest.fixture(scope="module")
def warm_ranks_shared_by_the_module():
    """Idle warm ranks reusable from one test of the module to the next, and closed after its last. A rank is reused
    only in the environment it started in, and pytest sets PYTEST_CURRENT_TEST anew at each step of each test: that
    variable, which no rank reads, is left out of the comparison."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(warm_ranks, "_PER_LAUNCH", (*warm_ranks._PER_LAUNCH, "PYTEST_CURRENT_TEST"))
        yield
    _close_warm_ranks()


@pytest.fixture
def no_leftover_processes_but_idle_ranks(warm_ranks_shared_by_the_module):
    """As ``no_leftover_processes``, but the idle warm ranks are kept for the module's next test (starting
    them costs seconds a test, more where torch is PyPI's CUDA build) and closed after the module's last."""
    yield
    _nothing_left_but_idle_ranks()


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a terminal or a Jupyter kernel.

    A shell ignores SIGINT in its background jobs, and Python keeps it ignored, so a test run
    started that way (as CI may be) would otherwise never see the interrupt.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
