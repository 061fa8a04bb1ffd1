"""Python as macOS runs it, for CI's pass 3: on PYTHONPATH, this is loaded by every process of the pass (pytest,
each kernel, each rank, each DataLoader worker).

A Linux run never shows what stops a Mac learner's lesson at an AttributeError: Linux's os and signal modules
have names that macOS's lack (lesson 13 once called os.sched_getaffinity unguarded). Here they are removed,
multiprocessing starts processes by spawn unless told otherwise (macOS's default since Python 3.8: a DataLoader's
workers, among others), and /proc, which macOS has not, is hidden from Python's file calls, so that the code
paths that find processes another way are the ones that run. psutil keeps /proc: on a Mac it has a backend of
its own, which asks the system instead.
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


def _hidden(path: object) -> bool:
    """Is ``path`` in /proc, asked by code other than psutil's?"""
    if isinstance(path, int):  # a file descriptor
        return False
    try:
        name = os.fsdecode(path)
    except TypeError:
        return False
    if name != "/proc" and not name.startswith("/proc/"):
        return False
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return not caller.startswith("psutil")


def _without_proc(call):
    def call_unless_hidden(path=".", *args, **kwargs):
        if _hidden(path):
            raise FileNotFoundError(2, "No such file or directory (macOS has no /proc)", os.fsdecode(path))
        return call(path, *args, **kwargs)

    return call_unless_hidden


for module, name in ((os, "stat"), (os, "lstat"), (os, "listdir"), (os, "scandir"), (os, "open"),
                     (os, "access"), (builtins, "open"), (io, "open")):
    setattr(module, name, _without_proc(getattr(module, name)))
