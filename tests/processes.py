"""What /proc says about processes, for the tests that check nothing is left running (Linux only)."""

from pathlib import Path

from dpedu.failures import leftover_processes


def state(pid: int) -> str | None:
    """The process's state letter ('R', 'S', 'Z' for a zombie, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z")


def children_of(pid: int) -> list[int]:
    """Live descendants of ``pid``, multiprocessing's helpers left out (not what they start)."""
    return leftover_processes(pid)


def gone_within(pid: int, seconds: float = 5.0) -> bool:
    """True once ``pid`` is dead; a SIGKILLed process takes a moment to be torn down by the kernel."""
    import time

    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)
