"""What torch's C++ side writes to standard error, caught: ``with captured_stderr() as caught: ...``.

torch's C++ code (DDP's reducer, the profiler) logs to file descriptor 2 directly, past ``sys.stderr``,
so the descriptor itself is redirected, into a temporary file, and put back however the block ends. The
descriptor belongs to the whole process: whatever any thread writes to it inside the block is caught.
Used by lesson 05's ``profile_trace`` (the profiler's log kept out of sight) and ``ddp_settings`` (DDP's
warnings kept, without their time stamps, to be printed in the lesson).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# "[rank0]:[W1125 09:09:27.957782789 reducer.cpp:1529] Warning: <message> (function operator())"
_WARNING = re.compile(r"\] Warning: (?P<message>.*?)(?: \(function .*\))?$")


@dataclass
class Caught:
    text: str = ""  # everything written to file descriptor 2 inside the block, once the block has ended

    def warnings(self) -> list[str]:
        """The C++ warnings in ``text``, each once, in order, without prefix, time stamp or function name."""
        found = (match["message"].strip() for line in self.text.splitlines() if (match := _WARNING.search(line)))
        return list(dict.fromkeys(found))


@contextmanager
def captured_stderr() -> Iterator[Caught]:
    """Redirect file descriptor 2 into a temporary file for the block; the result's ``text`` holds it after.

    If the block raises, what was caught is also written to the real standard error, so that an error's
    C++ side (gloo's message, say) is not lost.
    """
    caught = Caught()
    with tempfile.TemporaryFile(mode="w+b") as sink:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            yield caught
        except BaseException:
            _restore(saved, sink, caught)
            sys.stderr.write(caught.text)
            raise
        else:
            _restore(saved, sink, caught)


def _restore(saved: int, sink, caught: Caught) -> None:
    try:
        sys.stderr.flush()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0)
        caught.text = sink.read().decode("utf-8", errors="replace")
