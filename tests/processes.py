"""What /proc says about processes, for the tests that check nothing is left running (Linux only)."""

from pathlib import Path

# multiprocessing's shared helpers: one of each per parent process, ending with it. They are not
# ranks, but what *they* start (a forkserver's ranks) is.
HELPERS = (b"resource_tracker", b"multiprocessing.forkserver")


def state(pid: int) -> str | None:
    """The process's state letter ('R', 'S', 'Z' for a zombie, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z")


def _processes() -> list[tuple[int, int, str, bytes]]:
    """(pid, parent pid, state, command line) of every process."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            found.append((int(entry.name), int(fields[1]), fields[0], command))
    return found


def children_of(pid: int) -> list[int]:
    """Live (not zombie) descendants of ``pid``, multiprocessing's helpers left out (not what they start)."""
    table = _processes()
    found, parents = [], {pid}
    while parents:
        children = [(p, command) for p, parent, s, command in table if parent in parents and s != "Z"]
        found += [p for p, command in children if not any(helper in command for helper in HELPERS)]
        parents = {p for p, _ in children}
    return found


def gone_within(pid: int, seconds: float = 5.0) -> bool:
    """True once ``pid`` is dead; a SIGKILLed process takes a moment to be torn down by the kernel."""
    import time

    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not alive(pid)
