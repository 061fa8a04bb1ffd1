"""Checks for the exercises at the end of each lesson, one module per lesson (``lesson00`` ...).

Each check computes the right answer itself (by formula or by running the experiment, never from a stored number),
prints whether the learner's answer agrees or what to look at, and returns True or False.
``answers`` holds a model answer or a rubric for every exercise, printed only on request:
``from dpedu.exercises.answers import answer; answer(3, 2)``. ``results()``, in a lesson's last cell, prints
every check this kernel has run with its last verdict, for a learner to hand in or a teacher to collect.
"""


import math
import sys

# Each check run in this process (module.function) -> its verdicts, in order: read by results().
_verdicts: dict[str, list[bool]] = {}


def verdict(ok: bool, hint: str) -> bool:
    print("Correct." if ok else f"Not yet: {hint}")
    _verdicts.setdefault(_calling_check(), []).append(ok)
    return ok


def _calling_check() -> str:
    """The exercise check that asked for this verdict: the outermost caller in a lessonNN module (the check
    the learner called, not a helper of it)."""
    check, frame = "another check", sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(f"{__name__}.lesson"):
            check = f"{module.removeprefix(__name__ + '.')}.{frame.f_code.co_name}"
        frame = frame.f_back
    return check


def results() -> dict[str, bool]:
    """Print every check run in this kernel, in the order first run: its last verdict and how many tries.
    Returns {check: last verdict}."""
    if not _verdicts:
        print("No exercise check has run in this kernel yet.")
    for check, verdicts in _verdicts.items():
        tries = f"{len(verdicts)} tries" if len(verdicts) > 1 else "1 try"
        print(f"{'correct' if verdicts[-1] else 'not yet':8} {check} ({tries})")
    return {check: verdicts[-1] for check, verdicts in _verdicts.items()}


def close(answer: object, truth: float, rel: float) -> bool:
    """Is ``answer`` a finite number within ``rel`` (relative) of ``truth``? Any non-number is not."""
    return (isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer)
            and abs(answer - truth) <= rel * abs(truth))


def number(answer: object) -> object:
    """A number is an answer (right or wrong; NaN and inf are wrong); anything else is a TypeError."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"answer must be a number, got {answer!r}")
    return answer
