import multiprocessing as mp
import os
import signal
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dpedu.datasets import digits
from dpedu.models import mlp
from dpedu.sgd import hogwild

pytestmark = pytest.mark.usefixtures("no_leftover_processes")  # tests/conftest.py


def test_lock_free_workers_train_the_shared_model():
    images = digits()
    model = mlp(64, 32, 10, seed=0)
    before = F.cross_entropy(model(images.X_train), images.y_train).item()
    hogwild.train(model, F.cross_entropy, images.X_train, images.y_train, workers=2, steps=150, batch_size=16, lr=0.1)
    after = F.cross_entropy(model(images.X_train), images.y_train).item()
    assert after < before / 5
    assert all(p.is_shared() and p.grad is None for p in model.parameters())


def failing_loss(prediction, target):
    raise RuntimeError("broken loss")


def test_a_failing_worker_is_reported_and_reaped():
    images = digits()
    with pytest.raises(RuntimeError, match=r"worker\(s\) \[0, 1\] failed"):
        hogwild.train(mlp(64, 8, 10), failing_loss, images.X_train, images.y_train, workers=2, steps=5,
                      batch_size=4, lr=0.1)


class StubbornLoss:
    """A loss that never returns: it says it is running (a file per worker), ignores SIGTERM and sleeps."""

    def __init__(self, ready_dir: Path):
        self.ready_dir = ready_dir

    def __call__(self, prediction, target):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # so stopping it takes SIGKILL, after the grace period
        Path(self.ready_dir, str(os.getpid())).touch()
        time.sleep(600)


def train_stubborn_workers(ready_dir: Path, timeout: float = 120) -> None:
    X, y = torch.zeros(8, 64), torch.zeros(8, dtype=torch.long)
    hogwild.train(mlp(64, 8, 10), StubbornLoss(ready_dir), X, y, workers=2, steps=5, batch_size=4, lr=0.1,
                  timeout=timeout)


def test_workers_still_running_at_the_timeout_are_stopped_and_reaped(tmp_path):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="still running after timeout=1 s were stopped"):
        train_stubborn_workers(tmp_path, timeout=1)
    assert time.monotonic() - start < 1 + 10  # a hang check, not a speed test


def interrupt_when_running(ready_dir: Path, workers: int, times: int) -> None:
    """Once every worker runs, Ctrl-C ``times`` times 0.3 s apart: the later ones land in the clean-up."""
    def send():
        deadline = time.monotonic() + 60
        while len(list(ready_dir.iterdir())) < workers and time.monotonic() < deadline:
            time.sleep(0.02)
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.3)

    threading.Thread(target=send, daemon=True).start()


@pytest.mark.parametrize("times", [1, 3])
def test_ctrl_c_stops_and_reaps_every_worker_even_when_repeated_during_the_clean_up(ctrl_c_raises, tmp_path, times):
    interrupt_when_running(tmp_path, workers=2, times=times)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        train_stubborn_workers(tmp_path)
    assert time.monotonic() - start < 30
    time.sleep(0.3 * times)  # the thread is done: every interrupt was taken inside train


def test_an_error_while_starting_workers_stops_those_already_started(monkeypatch, tmp_path):
    real_start = mp.process.BaseProcess.start
    started = []

    def start_one_then_fail(process):
        if started:
            raise OSError("no more processes")
        real_start(process)
        started.append(process)

    monkeypatch.setattr(mp.process.BaseProcess, "start", start_one_then_fail)
    with pytest.raises(OSError, match="no more processes"):
        train_stubborn_workers(tmp_path)


@pytest.mark.parametrize(("change", "error", "names"), [
    ({"workers": 0}, ValueError, "workers"),
    ({"steps": 1.5}, ValueError, "steps"),
    ({"batch_size": 5}, ValueError, "batch_size must be an int from 1 to 4"),
    ({"lr": -0.1}, ValueError, "lr"),
    ({"lr": float("nan")}, ValueError, "lr"),
    ({"timeout": 0}, ValueError, "timeout"),
    ({"loss_fn": "mse"}, TypeError, "loss_fn"),
    ({"model": "mlp"}, TypeError, "model"),
    ({"y": torch.zeros(3, dtype=torch.long)}, ValueError, "X and y"),
])
def test_bad_arguments_are_refused_before_any_worker_starts(monkeypatch, change, error, names):
    monkeypatch.setattr(mp.process.BaseProcess, "start", lambda process: pytest.fail("a worker was started"))
    call = {"model": mlp(64, 8, 10), "loss_fn": F.cross_entropy, "X": torch.zeros(4, 64),
            "y": torch.zeros(4, dtype=torch.long), "workers": 2, "steps": 1, "batch_size": 1, "lr": 0.1} | change
    with pytest.raises(error, match=names):
        hogwild.train(call.pop("model"), call.pop("loss_fn"), call.pop("X"), call.pop("y"), **call)
