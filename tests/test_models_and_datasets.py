"""dpedu.models and dpedu.datasets: the small seeded models, the comparison of parameters, the shipped datasets."""

import pytest
import torch

from dpedu.datasets import diabetes, digits
from dpedu.models import identical_on_every_rank, largest_difference, linear_regression, mlp, parameter_checksum


def test_datasets_are_standardised_fixed_and_labelled():
    images, again = digits(), digits()
    assert torch.equal(images.X_train, again.X_train)
    assert images.X_train.shape == (1438, 64) and set(images.y_train.tolist()) == set(range(10))
    torch.testing.assert_close(diabetes().X_train.mean(0), torch.zeros(10), atol=1e-5, rtol=0)
    assert "CC BY 4.0" in str(images) and "scikit-learn" in str(diabetes())
    with pytest.raises(ValueError, match="test_fraction"):
        digits(test_fraction=1.5)


def test_mlp_shapes_and_seed():
    a, b = mlp(64, 32, 10, seed=1, depth=2), mlp(64, 32, 10, seed=1, depth=2)
    assert a(torch.zeros(5, 64)).shape == (5, 10)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    with pytest.raises(ValueError, match="hidden"):
        mlp(64, 0, 10)


def test_largest_difference_of_state_dicts_and_of_parameter_lists():
    a, b = mlp(4, 3, 2, seed=0), mlp(4, 3, 2, seed=0)
    assert largest_difference(a.state_dict(), b.state_dict()) == 0
    with torch.no_grad():
        b[0].weight[1, 2] += 0.5
    assert largest_difference(a.parameters(), b.parameters()) == pytest.approx(0.5)


def test_largest_difference_refuses_mismatched_sets():
    a, b = mlp(4, 3, 2, seed=0), mlp(4, 5, 2, seed=0)
    with pytest.raises(ValueError, match="same shapes"):
        largest_difference(a.parameters(), b.parameters())
    with pytest.raises(ValueError, match="same keys"):
        largest_difference(a.state_dict(), {"0.weight": a[0].weight})
    with pytest.raises(TypeError, match="both be state dicts"):
        largest_difference(a.state_dict(), list(a.parameters()))
    with pytest.raises(ValueError, match="same, non-zero number"):
        largest_difference([], [])


def test_models_and_datasets_name_bad_arguments():
    with pytest.raises(ValueError, match="in_features"):
        linear_regression(0)
    with pytest.raises(ValueError, match="seed"):
        mlp(4, 3, 2, seed=-1)
    with pytest.raises(ValueError, match="test_fraction"):
        diabetes(test_fraction=float("nan"))
    with pytest.raises(ValueError, match="seed"):
        digits(seed=1.5)


def test_largest_difference_wants_tensors_and_splits_need_examples():
    with pytest.raises(TypeError, match="a and b must hold tensors"):
        largest_difference([1.0], [2.0])
    with pytest.raises(ValueError, match="test_fraction 0.999 leaves 442 of 442"):
        diabetes(test_fraction=0.999)  # no training example left to standardise with
    with pytest.raises(ValueError, match="test_fraction"):
        digits(test_fraction=1e-5)  # no test example


def test_parameter_checksum_tells_runs_apart():
    a, b = mlp(4, 3, 2, seed=0), mlp(4, 3, 2, seed=0)
    assert parameter_checksum(a.parameters()) == parameter_checksum(b.parameters())
    with torch.no_grad():
        b[0].weight[0, 0] += 1e-3
    assert parameter_checksum(b.parameters()) - parameter_checksum(a.parameters()) == pytest.approx(1e-3, rel=1e-3)


def _replicas(nudge_rank_one: bool) -> bool:
    import torch.distributed as dist
    model = mlp(4, 3, 2, seed=0)
    if nudge_rank_one and dist.get_rank() == 1:
        with torch.no_grad():
            model[0].weight[0, 0] = torch.nextafter(model[0].weight[0, 0], torch.tensor(1.0))  # one ulp
    return identical_on_every_rank(model.parameters())


def test_identical_on_every_rank_sees_one_ulp(no_leftover_processes):
    from dpedu import launch
    assert launch(_replicas, 2, args=(False,)) == [True, True]
    assert launch(_replicas, 2, args=(True,)) == [False, False]
