"""How a notebook starts processes: fork, forkserver or spawn, and why it matters with GPUs.

- ``fork`` copies the running kernel: instant, and the child already has torch imported. But a
  child forked from a process that has touched CUDA cannot use CUDA ("Cannot re-initialize CUDA in
  forked subprocess"), and merely asking ``torch.cuda.is_available()`` touches it (it calls cuInit;
  torch documents this and the ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` way around it). Nobody can tell
  afterwards whether a notebook cell did, so on a machine with GPUs ranks are never forked.
- ``forkserver`` (Linux) starts one clean server process that imports torch and never touches CUDA;
  every rank is forked from *it*. The first launch pays for that import once, later ones are fast.
- ``spawn`` starts a fresh interpreter per rank, which imports torch itself (seconds per launch).
  It is the safe choice where fork is unreliable: macOS, whose system libraries do not support
  forking a process that has started threads.
- Nor can a forked child run backward once torch's autograd engine has started its device threads in
  the parent (torch's "Autograd and Fork" rule). The engine decides at a process's first backward. With
  GPUs it starts them then; without, on PyPI's default (CUDA) build of torch, it does so where that first
  backward follows a ``FakeTensorMode`` (``torch.compile`` enters one), which puts in a stand-in CUDA
  device guard that reports eight devices.

With ``forkserver`` and ``spawn`` the function to run is sent to the child by value (cloudpickle),
so functions defined in a notebook cell work with every method.

Used by every ``dpedu.launch`` (lessons 00, 03 to 05, 08 to 12) and by Hogwild's workers (lesson 06).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import sys

import torch

from dpedu.runtime import gpus

__all__ = ["gpu_count", "autograd_device_threads", "choose_start_method", "context"]

# What is imported once before ranks start, so that no rank pays for it: the rank entry point (torch,
# torch.distributed) and torch._dynamo, which DDP imports on first use (~1 s per rank, and an import made
# inside a rank while its process group exists leaks the group: see dpedu/data_parallel/digits_ddp.py).
# The forkserver imports them when it starts; with fork, the kernel imports them before its first fork.
# None of them initialises CUDA (tests/runtime/test_start_methods.py checks it).
PRELOAD = ["dpedu.runtime._rank", "torch._dynamo"]


def gpu_count() -> int:
    """How many GPUs torch can use here, counted without initialising CUDA in this process.

    ``torch.cuda.device_count()`` asks NVML and, as torch documents, does not spoil a later fork when
    NVML answers; ``torch.cuda.is_available()`` calls cuInit and does (unless
    ``PYTORCH_NVML_BASED_CUDA_CHECK=1``). But NVML also lists GPUs that CUDA cannot start (a driver too
    old for this torch), so where it lists any, ``gpus.probe`` starts CUDA once in a child process:
    GPUs it cannot start count as none, with a warning that says why. dpedu asks this way everywhere.
    """
    return gpus.usable_count()


def autograd_device_threads() -> int:
    """How many device threads torch's autograd engine has started in this process; 0 where the operating
    system does not list a process's threads in /proc (only Linux forks ranks, and Linux lists them).

    torch names them ``pt_autograd_<device>``. Once they exist, a forked child's backward raises "Unable to
    handle autograd's threading in combination with fork-based multiprocessing". (A process forked from one
    that had them inherits that verdict but not the threads: dpedu's ranks launch nothing further.)
    """
    try:
        thread_ids = os.listdir("/proc/self/task")
    except OSError:
        return 0
    count = 0
    for thread_id in thread_ids:
        try:
            with open(f"/proc/self/task/{thread_id}/comm") as comm:
                count += comm.read().startswith("pt_autograd_")
        except OSError:  # the thread ended meanwhile
            continue
    return count


def choose_start_method(start_method: str | None = None) -> tuple[str, str | None]:
    """Return ``(method, why_not_fork)``: ``fork`` where it is safe, else the fallback and the reason.

    An explicit ``start_method`` wins, then the environment variable ``DPEDU_START_METHOD`` (to try
    another machine's path here, e.g. macOS's spawn on Linux). multiprocessing's own default is not
    consulted: anything that uses multiprocessing (a tqdm bar, DataLoader workers) fixes it to
    "fork" on Linux, which says nothing about whether forking is safe.
    Otherwise: ``spawn`` off Linux, ``forkserver`` on Linux with GPUs or once autograd's device threads
    have started here, ``fork`` on Linux otherwise. Counting the GPUs asks NVML and does not touch CUDA,
    so the answer never spoils a later fork.
    """
    forced = start_method or os.environ.get("DPEDU_START_METHOD")
    if forced is not None:
        if forced not in mp.get_all_start_methods():
            raise ValueError(f"start_method must be one of {mp.get_all_start_methods()}, got {forced!r}")
        return forced, None if forced == "fork" else f"the start method {forced!r} was requested"
    if not sys.platform.startswith("linux"):
        return "spawn", f"fork is not reliable on {sys.platform}"
    if gpus := gpu_count():
        return "forkserver", (f"this machine has {gpus} GPU(s), and a rank forked from a process that has "
                              "touched CUDA cannot use them; ranks start from a clean server process instead")
    if threads := autograd_device_threads():
        return "forkserver", (f"torch's autograd engine has started {threads} device threads in this process "
                              "(on a CUDA build of torch without GPUs, a torch.compile before the process's first "
                              "backward does that), and a forked rank could not run backward; ranks start from a "
                              "clean server process instead")
    return "fork", None


def context(method: str) -> mp.context.BaseContext:
    """The multiprocessing context for ``method``; ranks it starts by fork or from a forkserver find
    ``PRELOAD`` imported already (spawned ranks import everything afresh: nothing to share)."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)  # takes effect when the server first starts
    elif method == "fork":
        _import_preload()
    return ctx


def _import_preload() -> None:
    for module in PRELOAD:  # once per process: later calls find them in sys.modules
        importlib.import_module(module)


# Where ranks will be forked from this process, import PRELOAD with dpedu (the first cell of a lesson),
# so that the first launch is as quick as the next ones. Not in a process that multiprocessing spawned (a
# rank, a DataLoader worker; named before it imports anything): it launches nothing, and a spawned rank
# would pay ~1 s for the import whether or not its function uses DDP. Nor where NVML lists GPUs: ranks start
# from a forkserver there, and asking whether CUDA can start would cost a child process at every import.
if mp.current_process().name == "MainProcess" and not torch.cuda.device_count() and choose_start_method()[0] == "fork":
    _import_preload()
