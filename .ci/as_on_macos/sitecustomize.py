"""Python as macOS runs it, for CI's pass 3: on PYTHONPATH, this is loaded by every process of the pass (pytest,
each kernel, each rank, each DataLoader worker).

A Linux run never shows what stops a Mac learner's lesson at an AttributeError: Linux's os and signal modules
have names that macOS's lack (lesson 13 once called os.sched_getaffinity unguarded). Here those in LINUX_ONLY
are removed, multiprocessing starts processes by spawn unless told otherwise (macOS's default since Python 3.8:
a DataLoader's workers, among others), and /proc, which macOS has not, is hidden from Python's file calls
(os.stat, os.listdir, os.scandir, os.open, os.access, open, and pathlib's, which use them), so that the code
paths that find processes another way are the ones that run. C code and other programs still see /proc, and
psutil keeps it: on a Mac it has a backend of its own, which asks the system instead.
"""

import builtins
import importlib
import io
import multiprocessing.context
import os
import sys

# Linux-only in Python's documentation ("Availability: Linux"), or left out of macOS's build (os.waitid).
# tests/test_portable.py reads this list: the code a Mac runs may use these names only where it asks for them.
LINUX_ONLY = {
    "os": ("sched_getaffinity", "sched_setaffinity", "sched_getscheduler", "sched_setscheduler", "sched_getparam",
           "sched_setparam", "sched_rr_get_interval", "pidfd_open", "P_PIDFD", "waitid", "memfd_create", "eventfd",
           "eventfd_read", "eventfd_write", "copy_file_range", "splice", "pipe2", "getrandom", "posix_fallocate",
           "posix_fadvise", "getxattr", "setxattr", "listxattr", "removexattr", "getresuid", "getresgid",
           "setresuid", "setresgid", "timerfd_create", "unshare", "setns"),
    "signal": ("pidfd_send_signal", "sigtimedwait", "sigwaitinfo"),
}
for module_name, names in LINUX_ONLY.items():
    module = importlib.import_module(module_name)
    for name in names:
        if hasattr(module, name):
            delattr(module, name)

multiprocessing.context._default_context._default_context = multiprocessing.context._concrete_contexts["spawn"]

# Modules whose calls stand for their caller's: os.path.exists("/proc/...") is psutil's call when psutil makes it.
_ON_BEHALF = {"genericpath", "posixpath", "os", "pathlib", "shutil", "io", __name__}


def _hidden(path: object) -> bool:
    """Is ``path`` in /proc, asked for by code other than psutil's?"""
    if isinstance(path, int) or path is None:  # a file descriptor, or the current folder
        return False
    try:
        name = os.fsdecode(path)
    except TypeError:
        return False
    if name != "/proc" and not name.startswith("/proc/"):
        return False
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _ON_BEHALF:
        frame = frame.f_back
    return frame is None or not str(frame.f_globals.get("__name__", "")).startswith("psutil")


def _without_proc(module, name: str, path_keyword: str):
    """Replace ``module.name`` by a function that raises FileNotFoundError for a path in /proc and otherwise
    calls the original, whatever the arguments; it keeps the original's place in os.supports_* and pickles as
    ``module.name`` does."""
    original = getattr(module, name)

    def call_unless_hidden(*args, **kwargs):
        path = args[0] if args else kwargs.get(path_keyword)
        if _hidden(path):
            raise FileNotFoundError(2, "No such file or directory (macOS has no /proc)", os.fsdecode(path))
        return original(*args, **kwargs)

    call_unless_hidden.__module__, call_unless_hidden.__qualname__ = module.__name__, name
    call_unless_hidden.__name__, call_unless_hidden.__doc__ = name, original.__doc__
    setattr(module, name, call_unless_hidden)
    for supports in ("supports_dir_fd", "supports_fd", "supports_follow_symlinks", "supports_effective_ids"):
        if original in getattr(os, supports):
            getattr(os, supports).add(call_unless_hidden)


for name in ("stat", "lstat", "listdir", "scandir", "open", "access"):
    _without_proc(os, name, "path")
_without_proc(builtins, "open", "file")
_without_proc(io, "open", "file")

# Python 3.10's pathlib calls these through an accessor class that copied them when pathlib was imported (which
# a .pth file of an editable install may have done before this ran): it is given the wrapped ones.
import pathlib  # noqa: E402 - after the wrapping, so that a pathlib imported only now copies the wrapped ones

if hasattr(pathlib, "_NormalAccessor"):
    for name, module in (("stat", os), ("lstat", os), ("listdir", os), ("scandir", os), ("open", io)):
        if hasattr(pathlib._NormalAccessor, name):
            setattr(pathlib._NormalAccessor, name, staticmethod(getattr(module, name)))
