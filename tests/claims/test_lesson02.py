"""Lesson 02's equalities catch the mistakes they guard against: K towers in one process equal the full batch,
and a tower sum that adds instead of averaging, or weights uneven shards wrong, fails the same comparison.

The towers are the notebook's own code: the cell that defines ``tower_gradients`` is read from the notebook
and run here, so that the subject tested is the one the lesson teaches.
"""

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from dpedu.datasets import digits
from dpedu.models import largest_difference, mlp

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "02_data_parallelism_by_hand.ipynb"
TOWERS_CELL = "667f368d"  # cell 4: tower_gradients, full_batch_gradients, sgd_step


@pytest.fixture(scope="module")
def lesson():
    """The functions of the notebook's cell 4, and cell 2's batch of 256 digits."""
    cells = [cell for cell in json.loads(NOTEBOOK.read_text())["cells"] if cell.get("id") == TOWERS_CELL]
    assert len(cells) == 1, f"cell {TOWERS_CELL} (tower_gradients) not found in {NOTEBOOK.name}"
    namespace = {"copy": copy, "torch": torch, "F": F}
    exec(compile("".join(cells[0]["source"]), f"{NOTEBOOK.name}, cell {TOWERS_CELL}", "exec"), namespace)
    images = digits()
    namespace["X"], namespace["y"] = images.X_train[:256], images.y_train[:256]
    torch.set_num_threads(1)
    return namespace


def five_steps_gap(lesson, K, weights=None):
    """Cell 6's experiment: five steps of K towers against five full-batch steps, from the same start;
    ``weights`` (default: the plain mean, 1/K each) is how the towers' gradients are combined."""
    X, y = lesson["X"], lesson["y"]
    towers, reference = mlp(64, 32, 10, seed=0), mlp(64, 32, 10, seed=0)
    for _ in range(5):
        lesson["sgd_step"](towers, lesson["tower_gradients"](towers, X, y, K, weights=weights))
        lesson["sgd_step"](reference, lesson["full_batch_gradients"](reference, X, y))
    return largest_difference(towers.parameters(), reference.parameters())


@pytest.mark.parametrize("K", [2, 4, 8])
def test_towers_that_add_their_gradients_fail_the_full_batch_comparison(lesson, K):
    """Backs 02 cell 6: K towers agree with the full batch within 1e-6, and towers that sum the K mean-loss
    gradients instead of averaging them (a step K times too large) fail that bound."""
    gap = five_steps_gap(lesson, K)
    assert gap < 1e-6, gap  # cell 6's check, on the lesson's towers
    summed = five_steps_gap(lesson, K, weights=[1.0] * K)
    assert not summed < 1e-6, summed  # the same check, on towers that add


def test_uneven_shards_weighted_wrong_fail_the_full_batch_comparison(lesson):
    """Backs 02 cell 10: on 250 examples in 4 uneven shards, size-weighted towers agree with the full batch
    within 1e-6, and towers that weight the shards wrong (a plain mean, or the sizes in the wrong order)
    fail that bound."""
    model = mlp(64, 32, 10, seed=0)
    X_odd, y_odd = lesson["X"][:250], lesson["y"][:250]
    sizes = [len(s) for s in X_odd.tensor_split(4)]
    assert sizes == [63, 63, 62, 62]
    full = lesson["full_batch_gradients"](model, X_odd, y_odd)

    def towers(weights):
        return lesson["tower_gradients"](model, X_odd, y_odd, 4, weights=weights)

    assert largest_difference(towers([n / 250 for n in sizes]), full) < 1e-6  # cell 10's check
    for wrong in (None, [n / 250 for n in reversed(sizes)]):  # 1/4 each; the sizes of other shards
        gap = largest_difference(towers(wrong), full)
        assert not gap < 1e-6, (wrong, gap)
