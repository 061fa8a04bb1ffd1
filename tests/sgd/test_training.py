import math

import pytest
import torch
import torch.nn.functional as F

from dpedu.datasets import diabetes
from dpedu.models import linear_regression
from dpedu.sgd.training import full_loss, train


def squared_error(prediction, target):
    return F.mse_loss(prediction.squeeze(1), target)


@pytest.fixture(scope="module")
def patients():
    return diabetes()


def test_full_batch_history_counts_one_update_per_epoch(patients):
    n = len(patients.X_train)
    h = train(linear_regression(10), squared_error, patients.X_train, patients.y_train, batch_size=n, lr=0.1, epochs=3)
    assert h.updates == [0, 1, 2, 3] and h.examples == [0, n, 2 * n, 3 * n] and h.epochs == [0, 1, 2, 3]
    assert h.loss[0] > h.loss[1] > h.loss[2] > h.loss[3]


def test_history_ends_with_the_loss_after_the_last_update(patients):
    model = linear_regression(10)
    h = train(model, squared_error, patients.X_train, patients.y_train, batch_size=1, lr=0.01, epochs=5 / 354)
    assert h.updates[-1] == 5 and h.examples[-1] == 5
    assert h.loss[-1] == full_loss(model, squared_error, patients.X_train, patients.y_train)


def test_same_seed_same_history_and_full_gd_is_exactly_gradient_descent(patients):
    X, y = patients.X_train, patients.y_train
    a = train(linear_regression(10, seed=3), squared_error, X, y, batch_size=16, lr=0.05, epochs=2, seed=7)
    b = train(linear_regression(10, seed=3), squared_error, X, y, batch_size=16, lr=0.05, epochs=2, seed=7)
    assert a.loss == b.loss and a.updates == b.updates
    model, reference = linear_regression(10, seed=1), linear_regression(10, seed=1)
    train(model, squared_error, X, y, batch_size=len(X), lr=0.1, epochs=2)
    for _ in range(2):  # the same two steps by hand
        reference.zero_grad()
        squared_error(reference(X), y).backward()
        with torch.no_grad():
            for p in reference.parameters():
                p -= 0.1 * p.grad
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)


def test_last_batch_of_an_epoch_may_be_smaller(patients):
    h = train(linear_regression(10), squared_error, patients.X_train, patients.y_train, batch_size=100, lr=0.01,
              epochs=1)
    assert h.updates[-1] == math.ceil(354 / 100) and h.examples[-1] == 354


@pytest.mark.parametrize(("kwargs", "name"), [({"batch_size": 0}, "batch_size"), ({"batch_size": 10_000}, "batch_size"),
                                             ({"lr": float("nan")}, "lr"), ({"lr": -1.0}, "lr"),
                                             ({"epochs": 0}, "epochs")])
def test_bad_arguments_name_themselves(patients, kwargs, name):
    call = {"batch_size": 8, "lr": 0.1, "epochs": 1} | kwargs
    with pytest.raises(ValueError, match=name):
        train(linear_regression(10), squared_error, patients.X_train, patients.y_train, **call)


def test_warmup_rises_linearly_to_the_learning_rate(patients, monkeypatch):
    seen = []
    real_step = torch.optim.SGD.step

    def record(self, *args, **kwargs):
        seen.append(self.param_groups[0]["lr"])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.SGD, "step", record)
    train(linear_regression(10), squared_error, patients.X_train, patients.y_train, batch_size=59, lr=0.4,
          epochs=1, warmup_updates=4)
    assert seen == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])
    with pytest.raises(ValueError, match="warmup_updates"):
        train(linear_regression(10), squared_error, patients.X_train, patients.y_train, batch_size=8, lr=0.1,
              epochs=1, warmup_updates=-1)


@pytest.mark.parametrize(("change", "error", "name"), [
    ({"model": "not a model"}, TypeError, "model"), ({"loss_fn": 3}, TypeError, "loss_fn"),
    ({"y": torch.zeros(3)}, ValueError, "X and y"), ({"X": [[0.0]]}, TypeError, "X and y"),
    ({"evaluations_per_epoch": 0}, ValueError, "evaluations_per_epoch"), ({"seed": -1}, ValueError, "seed")])
def test_train_checks_what_it_trains_and_on_what(patients, change, error, name):
    call = {"model": linear_regression(10), "loss_fn": squared_error, "X": patients.X_train, "y": patients.y_train,
            "batch_size": 8, "lr": 0.1, "epochs": 1} | change
    with pytest.raises(error, match=name):
        train(call.pop("model"), call.pop("loss_fn"), call.pop("X"), call.pop("y"), **call)


@pytest.mark.parametrize(("change", "error", "name"), [
    ({"X": "double"}, TypeError, "X is torch.float64 but model's parameters are torch.float32"),
    ({"X": torch.tensor(1.0), "y": torch.tensor(1.0)}, ValueError, "X and y"),
    ({"epochs": 1e-9}, ValueError, "epochs must cover at least one example"),
    ({"model": torch.nn.Flatten()}, ValueError, "model must have parameters")])
def test_train_refuses_what_would_fail_deep_in_torch_or_train_nothing(patients, change, error, name):
    call = {"model": linear_regression(10), "loss_fn": squared_error, "X": patients.X_train, "y": patients.y_train,
            "batch_size": 8, "lr": 0.1, "epochs": 1} | change
    if isinstance(call["X"], str):  # the fixture is not in scope in the parameters
        call["X"] = patients.X_train.double()
    with pytest.raises(error, match=name):
        train(call.pop("model"), call.pop("loss_fn"), call.pop("X"), call.pop("y"), **call)


