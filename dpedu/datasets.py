"""Small real datasets that ship inside scikit-learn, as standardised float32 tensors.

Nothing is downloaded: both come with the scikit-learn package. Features are standardised with the
training split's statistics; the split is fixed by ``seed`` so every lesson sees the same data.

Used in lessons 01–08 and 11.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dpedu._validate import real, whole


@dataclass(frozen=True)
class Dataset:
    name: str
    X_train: torch.Tensor
    y_train: torch.Tensor
    X_test: torch.Tensor
    y_test: torch.Tensor
    source: str
    licence: str

    def __str__(self) -> str:
        return (f"{self.name}: {len(self.X_train)} training and {len(self.X_test)} test examples, "
                f"{self.X_train.shape[1]} features\n  source: {self.source}\n  licence: {self.licence}")


def _split_and_standardise(X, y, test_fraction: float, seed: int, target_dtype) -> tuple:
    real("test_fraction", test_fraction, above=0)
    if not test_fraction < 1:
        raise ValueError(f"test_fraction must be between 0 and 1, got {test_fraction!r}")
    whole("seed", seed, minimum=0)
    X = torch.as_tensor(X, dtype=torch.float32)
    y = torch.as_tensor(y, dtype=target_dtype)
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(seed))
    n_test = round(len(X) * test_fraction)
    if not 1 <= n_test <= len(X) - 2:  # standardising needs two training examples; a test set needs one
        raise ValueError(f"test_fraction {test_fraction!r} leaves {n_test} of {len(X)} examples for testing; "
                         "each split needs some (the training split at least two)")
    test, train = order[:n_test], order[n_test:]
    mean, std = X[train].mean(0), X[train].std(0).clamp_min(1e-6)  # constant pixels have std 0
    return (X[train] - mean) / std, y[train], (X[test] - mean) / std, y[test]


def digits(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """1,797 handwritten digits as 8x8 grey images (64 features), labels 0-9 (int64)."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return Dataset("digits", *_split_and_standardise(X, y, test_fraction, seed, torch.int64),
                   source="UCI ML hand-written digits (Alpaydin & Kaynak, 1998), as shipped with scikit-learn",
                   licence="CC BY 4.0 (UCI Machine Learning Repository)")


def diabetes(test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """442 diabetes patients, 10 baseline measurements; target: disease progression after a year.

    The target is standardised too (mean 0, standard deviation 1 on the training split), so that
    losses read the same whatever the units.
    """
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True, scaled=False)
    X_train, y_train, X_test, y_test = _split_and_standardise(X, y, test_fraction, seed, torch.float32)
    mean, std = y_train.mean(), y_train.std()
    return Dataset("diabetes", X_train, (y_train - mean) / std, X_test, (y_test - mean) / std,
                   source="Efron, Hastie, Johnstone & Tibshirani (2004), Least Angle Regression; "
                          "as shipped with scikit-learn",
                   licence="distributed with scikit-learn under its BSD-3-Clause licence")
