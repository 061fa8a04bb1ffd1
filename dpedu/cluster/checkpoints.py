"""Checkpoints that survive a crash: write them whole or not at all, read them back safely.

A job that a failure restarts (``torchrun --max-restarts``, a Slurm requeue) resumes from its last
checkpoint, so that checkpoint must never be half-written, even when the writer is SIGKILLed or the
machine loses power in the middle of saving it. ``save_atomically`` writes a temporary file next to
the checkpoint and renames it over the old one; ``load_checkpoint`` reads it back, or says there is none.

``save_on_rank_zero`` is what every rank of a DDP job calls: one writer, then a barrier.

Used in lesson 10 (and by ``dpedu.scripts.train_resumable`` and ``train_elastic``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any

import torch
import torch.distributed as dist


def save_atomically(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Save ``state`` to ``path`` so that ``path`` holds either the old checkpoint or the new one, whole.

    Guarantees: a reader never sees a partly written file at ``path``, whether the writer returns, raises,
    is SIGKILLed or the machine loses power (on file systems that honour fsync). If it fails, ``path`` is
    unchanged. After a SIGKILL or power loss a temporary file (``.NAME.*.tmp`` beside ``path``) can be
    left behind; nothing reads it and it may be deleted. ``state`` may hold only what ``load_checkpoint``
    can read back: tensors, numbers, strings, and dicts, lists and tuples of them (state dicts are).
    """
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict (e.g. {{'model': model.state_dict(), 'step': 10}}), "
                        f"got {type(state).__name__}")
    path = _checked_path(path)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"path's directory {directory!r} does not exist")
    # In the same directory, so that the rename below stays on one file system: only there is it atomic.
    descriptor, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file readable by its owner only; a checkpoint on shared storage must be readable
        # as torch.save's own file would be: as the umask allows (reading the umask means setting it).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()  # from Python's buffer to the operating system...
            os.fsync(file.fileno())  # ...and from there to the disk, before the rename makes it the checkpoint
        os.replace(temporary, path)  # atomic: ``path`` names the old file or the new one, never neither
    except BaseException:  # any failure, Ctrl-C too: leave the old checkpoint and no temporary file
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_directory(directory)


def load_checkpoint(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> dict[str, Any] | None:
    """The checkpoint saved at ``path``, its tensors on ``map_location``; None when there is none yet.

    ``weights_only=True``: unpickling can run code, and a checkpoint is a file anyone may have replaced;
    this way only tensors, numbers, strings and containers of them are read.
    """
    path = _checked_path(path)
    if not os.path.exists(path):
        return None  # a first run: start from scratch
    state = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(state, dict):
        raise TypeError(f"{path!r} holds a {type(state).__name__}, not a checkpoint dict")
    return state


def _checked_path(path: object) -> str:
    """``path`` as a str, if it can name a checkpoint file."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise ValueError(f"path must be a non-empty file name, got {path!r}")
    if os.path.isdir(path):
        raise ValueError(f"path must name a file, but {path!r} is a directory")
    return path


def _sync_directory(directory: str) -> None:
    """Make the rename itself durable: it is an entry in the directory, written when the directory is synced.

    Without this, a power loss just after ``save_atomically`` returns could bring back the old checkpoint
    (never a broken one). Windows cannot open a directory to sync it; there this is skipped.
    """
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def save_on_rank_zero(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Inside ranks, called by every rank: rank 0 saves ``state`` atomically (all replicas hold the same),
    and no rank returns before it is on disk, so a failure from then on resumes from it."""
    if dist.get_rank() == 0:
        save_atomically(state, path)
    dist.barrier()
