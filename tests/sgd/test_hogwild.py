import multiprocessing as mp

import pytest
import torch
import torch.nn.functional as F

from dpedu.datasets import digits
from dpedu.models import mlp
from dpedu.sgd import hogwild


def test_lock_free_workers_train_the_shared_model():
    images = digits()
    model = mlp(64, 32, 10, seed=0)
    before = F.cross_entropy(model(images.X_train), images.y_train).item()
    hogwild.train(model, F.cross_entropy, images.X_train, images.y_train, workers=2, steps=150, batch_size=16, lr=0.1)
    after = F.cross_entropy(model(images.X_train), images.y_train).item()
    assert after < before / 5
    assert all(p.is_shared() and p.grad is None for p in model.parameters())
    assert mp.active_children() == []


def failing_loss(prediction, target):
    raise RuntimeError("broken loss")


def test_a_failing_worker_is_reported_and_reaped():
    images = digits()
    with pytest.raises(RuntimeError, match=r"worker\(s\) \[0, 1\] failed"):
        hogwild.train(mlp(64, 8, 10), failing_loss, images.X_train, images.y_train, workers=2, steps=5,
                      batch_size=4, lr=0.1)
    assert mp.active_children() == []


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
