"""Explorers that degrade gracefully, and progress bars that stay quiet under the tests (every lesson).

``explore`` puts a slider on each option of a drawing function and redraws on every change (lessons 01 and
06); without a frontend (``DPEDU_STATIC=1``, or no ipywidgets) it draws once. ``progress`` wraps long loops
(lessons 01 and 12).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any


def progress(iterable: Iterable, description: str = "") -> Iterable:
    """A ``tqdm.auto`` progress bar over ``iterable`` for long loops; quiet under the tests (``DPEDU_QUIET=1``)."""
    from tqdm.auto import tqdm

    if not isinstance(iterable, Iterable):
        raise TypeError(f"iterable must be something to loop over, got {type(iterable).__name__}")
    if not isinstance(description, str):
        raise TypeError(f"description must be a str, got {type(description).__name__}")
    return tqdm(iterable, desc=description, disable=os.environ.get("DPEDU_QUIET") == "1", leave=False)


def widgets_enabled() -> bool:
    """False under the test suite (``DPEDU_STATIC=1``) or without ipywidgets: explorers draw statically."""
    if os.environ.get("DPEDU_STATIC") == "1":
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def explore(draw: Callable[..., None], **options: Sequence[Any]) -> None:
    """Call ``draw(**choice)`` with a slider per option, redrawing on every change.

    Each option is a sequence of values to choose from (precompute what is slow, so that the
    answer comes at once); the first value is the starting one. Without widgets it draws once.
    """
    if not callable(draw):
        raise TypeError(f"draw must be callable, got {draw!r}")
    if not options:
        raise ValueError("explore needs at least one option to choose from")
    for name, values in options.items():
        if not isinstance(values, Sequence) or isinstance(values, str) or len(values) == 0:
            raise ValueError(f"option {name!r} must be a non-empty sequence of values, got {values!r}")
    if not widgets_enabled():
        draw(**{name: values[0] for name, values in options.items()})
        return
    import ipywidgets as widgets

    controls = {name: widgets.SelectionSlider(options=list(values), value=values[0], description=name,
                                              continuous_update=False) for name, values in options.items()}
    widgets.interact(draw, **controls)
