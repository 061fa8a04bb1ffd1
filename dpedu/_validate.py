"""Argument checks shared across dpedu: a ValueError that names the argument, before any work starts."""

from __future__ import annotations

import math


def whole(name: str, value: object, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum] (bools are refused: True is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None
                                                                                      and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f">= {minimum}"
        raise ValueError(f"{name} must be an int {bound}, got {value!r}")
    return value


def real(name: str, value: object, *, above: float | None = None, at_least: float | None = None) -> float:
    """``value`` as a finite float, ``> above`` or ``>= at_least`` when given."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (above is not None and value <= above) or (at_least is not None and value < at_least)):
        bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return float(value)
