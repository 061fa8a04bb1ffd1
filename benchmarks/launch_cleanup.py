"""How long dpedu.launch takes to give control back when things go wrong, per start method.

    .venv/bin/python benchmarks/launch_cleanup.py [--repeats 3] [--methods fork forkserver spawn]

Two cases, each with 4 ranks: every rank hangs and launch's timeout (1 s) stops them ("timeout"),
and Ctrl-C arrives 0.2 s after the call, while spawned ranks are still importing torch ("Ctrl-C").
It prints the median time from the call to the exception, and checks after each run that no child
process is left. The guarantee (CONTRIBUTING.md): back within the timeout plus a few seconds, nothing left.
"""

import argparse
import os
import signal
import statistics
import threading
import time

from dpedu import LaunchTimeoutError, launch
from dpedu.runtime.failures import leftover_processes


def hang() -> None:
    time.sleep(600)


def seconds_until_back(method: str, case: str) -> float:
    start = time.monotonic()
    try:
        if case == "timeout":
            launch(hang, 4, timeout=1, start_method=method)
        else:
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            launch(hang, 4, timeout=120, start_method=method)
    except (LaunchTimeoutError, KeyboardInterrupt):
        elapsed = time.monotonic() - start
    if left := leftover_processes():
        raise SystemExit(f"{method}/{case}: processes left behind: {left}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=["fork", "forkserver", "spawn"])
    options = parser.parse_args()
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal or a kernel
    print(f"{'start method':>12} {'case':>8} {'back after (s)':>15}   median of {options.repeats}, 4 ranks")
    for method in options.methods:
        for case in ("timeout", "Ctrl-C"):
            times = [seconds_until_back(method, case) for _ in range(options.repeats)]
            print(f"{method:>12} {case:>8} {statistics.median(times):>15.2f}", flush=True)


if __name__ == "__main__":
    main()
