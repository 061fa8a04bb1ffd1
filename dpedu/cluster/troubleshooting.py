"""When distributed training goes wrong: trigger a failure for real and see what the learner sees (lesson 10).

``observe`` runs a function on ranks with ``dpedu.launch`` and, instead of raising, returns what
happened: how it ended, how long it took, the error's own words and what the ranks printed. A crashing
rank is safe here: it is a child process, and ``launch`` reaps every one of them.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpedu.runtime.failures import LaunchTimeoutError, RankFailedError
from dpedu.runtime.launcher import launch

# torch's C++ errors start with the source file they were raised in, on the machine that built the wheel
_SOURCE_LOCATION = re.compile(r"\[(enforce fail at )?/[^\]\s]+:\d+\] ")
# TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprints spell out every tensor option; the device type is enough
_TENSOR_OPTIONS = re.compile(r"TensorOptions\(dtype=[^,]*, device=(\w+).*?memory_format=\([^)]*\)\)")


@dataclass(frozen=True)
class Outcome:
    """What one run ended with: ``"returned"``, ``"raised"`` (a rank's exception), ``"crashed"`` (a rank
    died from a signal) or ``"hung"`` (stopped at the timeout)."""

    ending: str
    seconds: float
    error: str  # the first lines of the error as torch words it (source locations left out), or ""
    printed: str  # every rank's output, labelled "[rank r]", stdout and stderr
    results: list[Any] | None  # the ranks' results when it returned

    def lines(self, containing: str) -> list[str]:
        """The lines of ``error`` and ``printed`` that contain ``containing``."""
        return [line.strip() for line in (self.error + "\n" + self.printed).splitlines() if containing in line]


def observe(fn: Callable[..., Any], world_size: int = 2, args: Sequence[Any] = (), *, timeout: float = 10.0,
            error_lines: int = 3) -> Outcome:
    """Run ``fn(*args)`` on ``world_size`` ranks (``dpedu.launch``) and report how it ended, without raising.

    Everything the ranks print is captured into the outcome, not shown. Only the failures that
    ``launch`` reports are caught (``RankFailedError``, ``LaunchTimeoutError``); bad arguments and
    Ctrl-C still raise. Every rank is stopped and reaped before this returns.
    """
    captured = io.StringIO()
    start = time.perf_counter()
    results, error = None, None
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            results = launch(fn, world_size, args, timeout=timeout)
        except (RankFailedError, LaunchTimeoutError) as exc:
            error = exc
    seconds = time.perf_counter() - start
    if error is None:
        ending, message = "returned", ""
    elif isinstance(error, LaunchTimeoutError):
        ending, message = "hung", str(error)
    else:
        ending = "crashed" if error.signal else "raised"
        message = f"rank {error.rank}: {error.summary}"
    message = "\n".join(readable(message).splitlines()[:error_lines])
    return Outcome(ending, seconds, message, readable(captured.getvalue()), results)


def readable(message: str) -> str:
    """torch's error message without the C++ source locations, and DETAIL's tensor options cut to the device."""
    return _TENSOR_OPTIONS.sub(r"\1", _SOURCE_LOCATION.sub("", message))
