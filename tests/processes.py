"""What /proc says about processes, for the tests that check nothing is left running (Linux only)."""

from pathlib import Path


def state(pid: int) -> str | None:
    """The process's state letter ('R', 'S', 'Z' for a zombie, ...), or None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid: int) -> bool:
    return state(pid) not in (None, "Z")


def children_of(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is ``pid``.

    multiprocessing's resource tracker is left out: spawn starts that one shared helper per parent
    process, and it ends with the parent; it is not a rank.
    """
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                command = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z" and b"resource_tracker" not in command:
                found.append(int(entry.name))
    return found
