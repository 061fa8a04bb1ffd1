"""Checks for the exercises at the end of each lesson, one module per lesson (``lesson00`` ...).

Each check computes the right answer itself (by formula or by running the experiment, never from a stored number),
prints whether the learner's answer agrees or what to look at, and returns True or False.
``answers`` holds a model answer or a rubric for every exercise, printed only on request:
``from dpedu.exercises.answers import answer; answer(3, 2)``. ``results()``, in a lesson's last cell, prints
every question a check was asked in this kernel (its arguments but the answer) with its last verdict, for a
learner to hand in or a teacher to collect.
"""


import inspect
import math
import sys

# Each check run in this process, with the question it was asked ("module.function(argument=value, ...)") -> its
# verdicts, in order: read by results().
_verdicts: dict[str, list[bool]] = {}
# The parameters through which a learner gives an answer; a check's other parameters, where not left at their
# defaults, are its question: one check asked two questions (with and without drop_last) is listed twice.
ANSWER_PARAMETERS = frozenset({"answer", "prediction", "formula", "fn", "my_function", "mini", "torch_ddp",
                               "tensor_parallel", "pipeline_parallel", "zero_stage"})


def verdict(ok: bool, hint: str) -> bool:
    print("Correct." if ok else f"Not yet: {hint}")
    _verdicts.setdefault(_calling_check(), []).append(ok)
    return ok


def _calling_check() -> str:
    """The exercise check that asked for this verdict, with its question: the outermost caller in a lessonNN module
    (the check the learner called, not a helper of it)."""
    check, frame = "another check", sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith(f"{__name__}.lesson"):
            function = frame.f_globals.get(frame.f_code.co_name)
            question = _question(function, frame.f_locals) if callable(function) else ""
            check = f"{module.removeprefix(__name__ + '.')}.{frame.f_code.co_name}({question})"
        frame = frame.f_back
    return check


def _question(check, arguments: dict) -> str:
    """``check``'s arguments other than the answer, where not left at their defaults: "world_size=4, ..."."""
    parameters = inspect.signature(check).parameters.items()
    return ", ".join(f"{name}={arguments[name]!r}" for name, parameter in parameters
                     if name not in ANSWER_PARAMETERS and name in arguments
                     and repr(arguments[name]) != repr(parameter.default))


def results() -> dict[str, bool]:
    """Print every check run in this kernel, with the question asked, in the order first run: its last verdict and
    how many tries. Returns {check(question): last verdict}."""
    if not _verdicts:
        print("No exercise check has run in this kernel yet.")
    for check, verdicts in _verdicts.items():
        tries = f"{len(verdicts)} tries" if len(verdicts) > 1 else "1 try"
        print(f"{'correct' if verdicts[-1] else 'not yet':8} {_shortened(check)} ({tries})")
    return {check: verdicts[-1] for check, verdicts in _verdicts.items()}


def _shortened(check: str, width: int = 100) -> str:
    return check if len(check) <= width else f"{check[:width - 2]}…)"


def close(answer: object, truth: float, rel: float) -> bool:
    """Is ``answer`` a finite number within ``rel`` (relative) of ``truth``? Any non-number is not."""
    return (isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer)
            and abs(answer - truth) <= rel * abs(truth))


def number(answer: object) -> object:
    """A number is an answer (right or wrong; NaN and inf are wrong); anything else is a TypeError."""
    if isinstance(answer, bool) or not isinstance(answer, (int, float)):
        raise TypeError(f"answer must be a number, got {answer!r}")
    return answer
