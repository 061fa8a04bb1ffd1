"""Lesson 14's "the accelerate loop = the hand loop" catches what it guards against: a hand-written loop that
forgets to divide the loss by the micro-batches, or never all-reduces, or an accelerate loop that divides once
more, fails the notebook's comparison (``same_run``, within 1e-6, on part 1's settings); a hand loop without
``no_sync`` fails its count (``one_all_reduce_per_update``). The correct loops pass both.

A broken hand loop is ``train_by_hand`` with one line changed (its source edited and run again inside the ranks),
so that each test breaks exactly the loop the lesson shows.
"""


import pytest

from claims.broken import changed
from dpedu import launch
from dpedu.frameworks.accelerate_loop import (
    Settings,
    one_all_reduce_per_update,
    same_run,
    train_by_hand,
    train_with_accelerate,
)

SETTINGS = Settings()  # part 1's
DIVIDE = ("(loss / settings.accumulate).backward()", "loss.backward()")
SYNC_ON_LAST = "with model.no_sync() if k < settings.accumulate - 1 else nullcontext():"
NEVER_SYNC = (SYNC_ON_LAST, "with model.no_sync():")
ALWAYS_SYNC = (SYNC_ON_LAST, "with nullcontext():")


def _hand_loop_with(edit: tuple[str, str], settings: Settings):
    """Inside a rank: ``train_by_hand`` with ``edit`` (old, new) made to its source."""
    return changed(train_by_hand, edit)(settings)


@pytest.fixture(scope="module")
def part1():
    """Part 1's two runs: by hand and through accelerate, 2 ranks each."""
    return launch(train_by_hand, 2, (SETTINGS,)), launch(train_with_accelerate, 2, (SETTINGS,))


def test_a_hand_loop_that_forgets_the_division_fails_the_comparison(part1):
    """Backs 14 cell 8: the hand loop and the accelerate loop agree within 1e-6, and a hand loop that forgets to
    divide the loss by the micro-batches (a gradient twice too large) fails that check, clipping notwithstanding."""
    by_hand, accelerated = part1
    assert same_run(by_hand, accelerated)
    assert 0 < by_hand[0].clipped_steps < SETTINGS.steps  # the check needs steps the clip leaves alone
    assert not same_run(launch(_hand_loop_with, 2, (DIVIDE, SETTINGS)), accelerated)


def test_a_clip_on_every_step_would_hide_the_forgotten_division():
    """Backs 14 cell 3: clipped on every step (at norm 0.5), a hand loop that forgets the division still agrees
    with the accelerate loop within 1e-6: clipping gives every step the clip's length whatever the scale."""
    always = Settings(clip=0.5)
    accelerated = launch(train_with_accelerate, 2, (always,))
    forgot = launch(_hand_loop_with, 2, (DIVIDE, always))
    assert accelerated[0].clipped_steps == forgot[0].clipped_steps == always.steps
    assert same_run(forgot, accelerated)


def test_a_hand_loop_that_never_all_reduces_fails_the_comparison(part1):
    """Backs 14 cell 8: a hand loop under no_sync on every micro-batch (no all-reduce at all, each rank trains on
    its own half) fails the check: its replicas differ, and neither is the accelerate loop's."""
    never = launch(_hand_loop_with, 2, (NEVER_SYNC, SETTINGS))
    assert all(record.all_reduces == 0 for record in never)
    assert not same_run(never, part1[1])


def test_an_accelerate_loop_that_divides_again_fails_the_comparison(part1):
    """Backs 14 cell 8: an accelerate loop that keeps the hand loop's division (the loss divided twice, a gradient
    half as large) fails the check against the hand loop."""
    twice = launch(train_with_accelerate, 2, (Settings(extra_division=True),))
    assert not same_run(part1[0], twice)


def test_a_hand_loop_without_no_sync_fails_the_count(part1):
    """Backs 14 cell 10: both loops make one all-reduce per optimizer step, and a hand loop that all-reduces on
    every micro-batch (no no_sync) fails that count, though it trains the same parameters."""
    assert all(one_all_reduce_per_update(run, SETTINGS) for run in part1)
    always = launch(_hand_loop_with, 2, (ALWAYS_SYNC, SETTINGS))
    assert not one_all_reduce_per_update(always, SETTINGS)
    assert always[0].all_reduces == SETTINGS.steps * SETTINGS.accumulate
