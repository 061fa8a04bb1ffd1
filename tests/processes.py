"""What /proc says about one process, for the tests that check nothing is left running (Linux only).

What a launch left behind, as a whole, is ``dpedu.runtime.failures.leftover_processes``."""

from pathlib import Path


def state(pid: int) -> str | None:
    """The process's state letter ('R', 'S', 'Z' for a zombie, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z")


def gone_within(pid: int, seconds: float = 5.0) -> bool:
    """True once ``pid`` is dead; a SIGKILLed process takes a moment to be torn down by the kernel."""
    import time

    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)
