"""Inside one rank started by ``dpedu.launch``: set up like torchrun, run ``fn``, report back.

The parent learns through a pipe when the rank has started (``("started", None)``: torch imported, the
function unpickled, the process group joined) and then the outcome (a pickled ``("ok", result)`` or
``("error", ...)``), and the rank's printed output through two files, so that it can show each rank's
output labelled and in rank order whatever the start method.

Used by every ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12).
"""

from __future__ import annotations

import faulthandler
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

from dpedu.runtime.float32_precision import pin_full_float32_precision

# The process group's own timeout is set this much above launch's deadline, so that launch always
# stops a stuck rank first, with its own error, instead of racing torch's.
GROUP_TIMEOUT_MARGIN = 10.0
PORT_TAKEN = "port taken"  # the report of a rank 0 that could not listen on MASTER_PORT
STARTED = "started"  # sent once the rank is set up and in its process group, just before fn runs


@dataclass(frozen=True)
class RankSpec:
    rank: int
    world_size: int
    backend: str  # "gloo", or "nccl" for a group with nccl for CUDA tensors and gloo for CPU ones
    timeout: float
    threads: int
    env: dict[str, str]  # the launcher's whole environment, with the rendezvous variables
    logdir: str
    launcher_pid: int
    child_of_launcher: bool  # False under forkserver: the server is the parent, not the launcher


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


def _die_with_parent(launcher_pid: int, child_of_launcher: bool) -> None:
    """Own a process group (so the launcher can stop our children too) and die if our parent dies.

    Under forkserver the parent is the server, which exits when the launcher does.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the launcher held Ctrl-C back while starting us
    if hasattr(os, "setpgid"):
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if not _launcher_alive(launcher_pid, child_of_launcher):  # it died before prctl took effect
        os._exit(1)


def _launcher_alive(launcher_pid: int, child_of_launcher: bool) -> bool:
    if child_of_launcher:  # reparented if it died
        return os.getppid() == launcher_pid
    try:  # under forkserver our parent is the server: ask about the launcher itself
        os.kill(launcher_pid, 0)
    except ProcessLookupError:
        return False
    return True


_stack_file: list[Any] = []  # the file the stack goes to: open while this launch runs here


def _dump_stack_on_request(spec: RankSpec) -> None:
    """On SIGUSR1, write every thread's Python stack to a file: launch asks before stopping a stuck rank."""
    if hasattr(signal, "SIGUSR1"):
        stacks = open(Path(spec.logdir, f"rank{spec.rank}.stack"), "w")
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        for previous in _stack_file:  # a warm rank's, from its last launch
            previous.close()
        _stack_file[:] = [stacks]


def run_rank(spec: RankSpec, payload: bytes, report: Any) -> None:
    """Entry point of a rank process: set up, run ``fn(*args)``, send the outcome, tear down."""
    _die_with_parent(spec.launcher_pid, spec.child_of_launcher)
    run_work(spec, payload, report)
    report.close()
    # End as a forked child always ends, without interpreter shutdown: threads a library left running
    # can abort the process there, after it has reported (see the note in dpedu/data_parallel/digits_ddp.py).
    os._exit(0)


def run_work(spec: RankSpec, payload: bytes, report: Any) -> bool:
    """Run one launch's work as rank ``spec.rank``: True if ``fn`` returned and the group was torn down."""
    _capture_output(spec.logdir, spec.rank)
    _dump_stack_on_request(spec)
    os.environ.clear()  # the launcher's environment of this moment, whatever process forked us
    os.environ.update(spec.env)
    os.environ.update(RANK=str(spec.rank), LOCAL_RANK=str(spec.rank), GROUP_RANK="0",
                      LOCAL_WORLD_SIZE=str(spec.world_size), OMP_NUM_THREADS=str(spec.threads))
    torch.set_num_threads(spec.threads)
    succeeded = False
    try:
        fn, args = cloudpickle.loads(payload)
        backend = spec.backend
        if backend == "nccl":  # one GPU per rank; CPU tensors keep working through gloo
            torch.cuda.set_device(spec.rank)
            backend = "cpu:gloo,cuda:nccl"
            # The course compares what GPU ranks compute with the CPU's float32 results, within 1e-6 to 1e-4:
            # no TF32 in this rank, even where TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 (NGC containers) turns it on.
            pin_full_float32_precision()
        try:
            dist.init_process_group(backend, rank=spec.rank, world_size=spec.world_size,
                                    timeout=timedelta(seconds=spec.timeout + GROUP_TIMEOUT_MARGIN))
        except dist.DistNetworkError as exc:
            if "EADDRINUSE" not in str(exc):
                raise
            _report(report, cloudpickle.dumps((PORT_TAKEN, None)))  # launch tries again on another port
            return False
        # No rank's work begins before every rank has connected: a rank whose work returns at once would tear its
        # connections down while another is still making its own, which fails that one ("Connection closed by
        # peer" in gloo's full mesh, seen with a function that makes no collective call). A CPU tensor: gloo's.
        dist.all_reduce(torch.zeros(1))
        report.send_bytes(cloudpickle.dumps((STARTED, None)))  # launch's timeout counts from here
        result = fn(*args)
        try:
            message = cloudpickle.dumps(("ok", result))
        except Exception as exc:
            raise TypeError(f"the result of rank {spec.rank} cannot be sent back (not picklable): {exc}") from None
        succeeded = True
    except BaseException as exc:  # noqa: BLE001 - every failure, KeyboardInterrupt too, goes to the parent
        # The time lets the parent tell the first failure from the ones it caused in other ranks.
        message = cloudpickle.dumps(("error", (f"{type(exc).__name__}: {exc}", traceback.format_exc(), time.time())))
    _report(report, message)  # before tearing down, so a failure is reported before peers notice it
    if dist.is_initialized():
        dist.destroy_process_group()
    return succeeded


def _report(report: Any, message: bytes) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    report.send_bytes(message)
