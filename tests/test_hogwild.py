import multiprocessing as mp

import pytest
import torch
import torch.nn.functional as F

from dpedu import hogwild
from dpedu.datasets import digits
from dpedu.models import mlp


def test_lock_free_workers_train_the_shared_model():
    images = digits()
    model = mlp(64, 32, 10, seed=0)
    before = F.cross_entropy(model(images.X_train), images.y_train).item()
    hogwild.train(model, images.X_train, images.y_train, F.cross_entropy, workers=2, steps=150, batch_size=16, lr=0.1)
    after = F.cross_entropy(model(images.X_train), images.y_train).item()
    assert after < before / 5
    assert all(p.is_shared() and p.grad is None for p in model.parameters())
    assert mp.active_children() == []


def failing_loss(prediction, target):
    raise RuntimeError("broken loss")


def test_a_failing_worker_is_reported_and_reaped():
    images = digits()
    with pytest.raises(RuntimeError, match=r"worker\(s\) \[0, 1\] failed"):
        hogwild.train(mlp(64, 8, 10), images.X_train, images.y_train, failing_loss, workers=2, steps=5,
                      batch_size=4, lr=0.1)
    assert mp.active_children() == []


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="workers"):
        hogwild.train(mlp(64, 8, 10), torch.zeros(4, 64), torch.zeros(4, dtype=torch.long), F.cross_entropy,
                      workers=0, steps=1, batch_size=1, lr=0.1)
