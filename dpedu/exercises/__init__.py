"""Checks for the exercises at the end of each lesson, one module per lesson (``lesson00`` ...).

Each check computes the right answer itself (by formula or by running the experiment, never from a stored number),
prints whether the learner's answer agrees or what to look at, and returns True or False.
``answers`` holds a model answer or a rubric for every exercise, printed only on request:
``from dpedu.exercises.answers import answer; answer(3, 2)``. ``results()``, in a lesson's last cell, prints
every question a check was asked in this kernel (its arguments but the answer) with its last verdict, for a
learner to hand in or a teacher to collect; checks run inside ``with not_recorded():`` (a lesson's own
demonstrations) are left out of it.
"""


import contextlib
import inspect
import math
import reprlib
import sys
from collections.abc import Iterator

# Each question a check was asked in this process ("module.function(argument=value, ...)") -> its verdicts, in
# order, and the question as results() prints it (each value shortened): read by results().
_verdicts: dict[str, list[bool]] = {}
_printed: dict[str, str] = {}
_recording = True  # False inside not_recorded()
# The parameters through which a learner gives an answer; a check's other parameters, where not left at their
# defaults, are its question: one check asked two questions (with and without drop_last) is listed twice.
ANSWER_PARAMETERS = frozenset({"answer", "prediction", "formula", "fn", "my_function", "mini", "torch_ddp",
                               "tensor_parallel", "pipeline_parallel", "zero_stage"})
_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = 4
_SHORT.maxstring = _SHORT.maxother = 30


def verdict(ok: bool, hint: str) -> bool:
    print("Correct." if ok else f"Not yet: {hint}")
    if _recording:
        check, arguments = _calling_check()
        question = _written(check, arguments, repr)
        _verdicts.setdefault(question, []).append(ok)
        _printed[question] = _written(check, arguments, _SHORT.repr)
    return ok


@contextlib.contextmanager
def not_recorded() -> Iterator[None]:
    """Checks run inside say what they say but are left out of ``results()``: a lesson's own demonstrations of its
    checks, so that a learner's hand-in lists only the learner's answers."""
    global _recording
    before, _recording = _recording, False
    try:
        yield
    finally:
        _recording = before


def _calling_check() -> tuple[str, list[tuple[str, object]]]:
    """The exercise check that asked for this verdict and its question: the outermost caller in a lessonNN module
    (the check the learner called, not a helper of it)."""
    outermost, frame = None, sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(f"{__name__}.lesson"):
            outermost = frame
        frame = frame.f_back
    if outermost is None:
        return "another check", []
    module, name = outermost.f_globals["__name__"], outermost.f_code.co_name
    function = outermost.f_globals.get(name)
    return (f"{module.removeprefix(__name__ + '.')}.{name}",
            _question(function, outermost.f_locals) if callable(function) else [])


def _written(check: str, arguments: list[tuple[str, object]], show) -> str:
    """``check(name=value, ...)``, each value written by ``show``."""
    return f"{check}({', '.join(f'{name}={show(value)}' for name, value in arguments)})"


def _question(check, arguments: dict) -> list[tuple[str, object]]:
    """``check``'s arguments other than the answer, where not left at their defaults, as (name, plain value)."""
    parameters = inspect.signature(check).parameters.items()
    return [(name, plain) for name, parameter in parameters
            if name not in ANSWER_PARAMETERS and name in arguments
            and (plain := _plain(arguments[name])) != _plain(parameter.default)]


def _plain(value: object) -> object:
    """A value as a question names it: 4.0 as 4, 13e9 as 13_000_000_000, a tuple as a list, NumPy's numbers as
    Python's, so that one question written two ways is one question."""
    value = plain(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def results() -> dict[str, bool]:
    """Print every question a check was asked in this kernel (outside ``not_recorded()``), in the order first asked:
    its last verdict and how many tries. Returns {check(question): last verdict}."""
    if not _verdicts:
        print("No exercise check has run in this kernel yet.")
    for question, verdicts in _verdicts.items():
        tries = f"{len(verdicts)} tries" if len(verdicts) > 1 else "1 try"
        print(f"{'correct' if verdicts[-1] else 'not yet':8} {_printed[question]} ({tries})")
    return {question: verdicts[-1] for question, verdicts in _verdicts.items()}


def plain(value: object) -> object:
    """What a NumPy scalar, or a one-element array or tensor, holds, as Python's own value (its ``.item()``):
    learners compute answers with NumPy and torch. Anything else as it is."""
    numel = getattr(value, "numel", None)  # a tensor counts its elements with numel(), an array with .size
    count = numel() if callable(numel) else getattr(value, "size", None)
    return value.item() if count == 1 and callable(getattr(value, "item", None)) else value


def close(answer: object, truth: float, rel: float) -> bool:
    """Is ``answer`` a finite number within ``rel`` (relative) of ``truth``? Any non-number is not."""
    answer = plain(answer)
    return (isinstance(answer, (int, float)) and not isinstance(answer, bool) and math.isfinite(answer)
            and abs(answer - truth) <= rel * abs(truth))


def number(answer: object) -> int | float:
    """A number is an answer (right or wrong; NaN and inf are wrong), returned as a Python number (``plain``);
    anything else is a TypeError."""
    value = plain(answer)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"answer must be a number, got {answer!r}")
    return value
