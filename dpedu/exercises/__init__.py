"""Checks for the exercises at the end of each lesson, one module per lesson (``lesson00`` ...).

Each check computes the right answer itself (by formula or by running the experiment, never from a stored number),
prints whether the learner's answer agrees or what to look at, and returns True or False.
``answers`` holds a model answer or a rubric for every exercise, printed only on request:
``from dpedu.exercises.answers import answer; answer(3, 2)``.
"""


import math


def verdict(ok: bool, hint: str) -> bool:
    print("Correct." if ok else f"Not yet: {hint}")
    return ok


def close(answer: object, truth: float, rel: float) -> bool:
    """Is ``answer`` a finite number within ``rel`` (relative) of ``truth``? Any non-number is not."""
    return (isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer)
            and abs(answer - truth) <= rel * abs(truth))


def number(answer: object) -> object:
    """A number is an answer (right or wrong; NaN and inf are wrong); anything else is a TypeError."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"answer must be a number, got {answer!r}")
    return answer
