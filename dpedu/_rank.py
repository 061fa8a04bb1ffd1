"""Inside one rank started by ``dpedu.launch``: set up like torchrun, run ``fn``, report back.

The parent learns the outcome through a pipe (a pickled ``("ok", result)`` or ``("error", ...)``)
and the rank's printed output through two files, so that it can show each rank's output labelled
and in rank order whatever the start method.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist


class RankFailedError(RuntimeError):
    """A rank raised or died. ``rank`` names it; ``remote_traceback`` is its own traceback."""

    def __init__(self, rank: int, summary: str, remote_traceback: str = ""):
        self.rank = rank
        self.summary = summary
        self.remote_traceback = remote_traceback
        message = f"rank {rank} failed: {summary}"
        if remote_traceback:
            message += f"\n\n--- traceback in rank {rank} ---\n{remote_traceback.rstrip()}"
        super().__init__(message)

    def __reduce__(self):
        return type(self), (self.rank, self.summary, self.remote_traceback)


@dataclass(frozen=True)
class RankSpec:
    rank: int
    world_size: int
    backend: str
    timeout: float
    threads: int
    env: dict[str, str]
    logdir: str


class RankOutput:
    """The parent's view of what one rank printed: complete new lines, labelled with the rank."""

    def __init__(self, logdir: str, rank: int):
        self.rank = rank
        self.paths = {stream: Path(logdir, f"rank{rank}.{stream}") for stream in ("out", "err")}
        self.offsets = {"out": 0, "err": 0}

    def take(self, stream: str, final: bool) -> str:
        path = self.paths[stream]
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(self.offsets[stream])
            data = f.read()
        if not final:  # hold back a partial last line until it is complete
            data = data[: data.rfind(b"\n") + 1]
        self.offsets[stream] += len(data)
        text = data.decode("utf-8", errors="replace")
        return "".join(f"[rank {self.rank}] {line}\n" for line in text.splitlines())


def show_outputs(outputs: list[RankOutput], final: bool) -> None:
    """Print each rank's new output in rank order: stdout to stdout, stderr to stderr."""
    for output in outputs:
        for stream, sink in (("out", sys.stdout), ("err", sys.stderr)):
            if text := output.take(stream, final):
                sink.write(text)
    sys.stdout.flush()
    sys.stderr.flush()


def _capture_output(logdir: str, rank: int) -> None:
    # Redirect the file descriptors, not only sys.stdout, so that C++ messages are caught too.
    for fd, stream in ((1, "out"), (2, "err")):
        target = os.open(Path(logdir, f"rank{rank}.{stream}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


def _die_with_parent(parent_pid: int) -> None:
    """Own a process group (so the parent can stop our children too) and die if the parent dies."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the parent held Ctrl-C back while starting us
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def run_rank(spec: RankSpec, payload: bytes, report: Any, parent_pid: int) -> None:
    """Entry point of a rank process: set up, run ``fn(*args)``, send the outcome, tear down."""
    _die_with_parent(parent_pid)
    _capture_output(spec.logdir, spec.rank)
    os.environ.update(spec.env)
    os.environ.update(RANK=str(spec.rank), LOCAL_RANK=str(spec.rank), GROUP_RANK="0",
                      LOCAL_WORLD_SIZE=str(spec.world_size), OMP_NUM_THREADS=str(spec.threads))
    torch.set_num_threads(spec.threads)
    try:
        fn, args = cloudpickle.loads(payload)
        if spec.backend == "nccl":
            torch.cuda.set_device(spec.rank)
        dist.init_process_group(spec.backend, rank=spec.rank, world_size=spec.world_size,
                                timeout=timedelta(seconds=spec.timeout))
        result = fn(*args)
        try:
            message = cloudpickle.dumps(("ok", result))
        except Exception as exc:
            raise TypeError(f"the result of rank {spec.rank} cannot be sent back (not picklable): {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - every failure, KeyboardInterrupt too, goes to the parent
        # The time lets the parent tell the first failure from the ones it caused in other ranks.
        message = cloudpickle.dumps(("error", (f"{type(exc).__name__}: {exc}", traceback.format_exc(), time.time())))
    sys.stdout.flush()
    sys.stderr.flush()
    report.send_bytes(message)  # before tearing down, so a failure is reported before peers notice it
    report.close()
    if dist.is_initialized():
        dist.destroy_process_group()
    # End as a forked child always ends, without interpreter shutdown: threads a library left running
    # can abort the process there, after it has reported (see the note in dpedu/ddp.py).
    os._exit(0)
