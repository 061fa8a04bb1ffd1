"""What a name server that never answers costs each launch, and what RES_OPTIONS, which needs no root, saves.

    .venv/bin/python benchmarks/slow_name_lookup.py [--launches 4]     # Linux, as root (for the set-up only)

On some servers a launch now and then takes seconds more: torch's key-value store looks up the name of each
rank that connects, which is ::ffff:127.0.0.1 (an IPv4 address on an IPv6 socket), which /etc/hosts does not
name, so the lookup goes to the name servers; one that drops the query makes it wait glibc's timeout (5 s,
2 attempts). This reproduces that for one child process: a UDP socket on 127.0.0.9:53 that reads queries and
never answers, named as the only name server by a resolv.conf bind-mounted over /etc/resolv.conf in a mount
namespace of the child's own (``unshare --mount``: the machine's files are untouched). In it, the child launches
2 ranks that all-reduce, several times: as it is; with RES_OPTIONS="timeout:1 attempts:1" (glibc reads it
from the environment of each process: start JupyterLab with it, and the kernel and its ranks have it; no root
needed); and with the root's fix, a line "::ffff:127.0.0.1 localhost" added to /etc/hosts (a copy, mounted
the same way). It prints the median launch after the first, and how many queries the silent server received:
none means this machine's lookups bypass /etc/resolv.conf (systemd-resolved, nscd), and then neither fix applies.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

SILENT_SERVER = ("127.0.0.9", 53)
CHILD = """
import statistics, sys, time
import torch, torch.distributed as dist
import dpedu

def all_reduce_one():
    total = torch.ones(1)
    dist.all_reduce(total)
    return total.item()

if __name__ == "__main__":
    seconds = []
    for _ in range(int(sys.argv[1])):
        start = time.perf_counter()
        assert dpedu.launch(all_reduce_one, 2) == [2.0, 2.0]
        seconds.append(time.perf_counter() - start)
    print(f"{statistics.median(seconds[1:]):.2f}")
"""


queries = 0  # received by the silent server: none means lookups here bypass /etc/resolv.conf (systemd-resolved, nscd)


def never_answer(server: socket.socket) -> None:
    global queries
    while True:  # a daemon thread: it ends with the benchmark
        server.recvfrom(4096)
        queries += 1


def median_launch(resolv_conf: str, launches: int, res_options: str | None, hosts: str | None) -> str:
    env = {key: value for key, value in os.environ.items() if key != "RES_OPTIONS"}
    env["DPEDU_QUIET"] = "1"
    if res_options is not None:
        env["RES_OPTIONS"] = res_options
    mounts = f"mount --bind {resolv_conf} /etc/resolv.conf" + (f" && mount --bind {hosts} /etc/hosts" if hosts else "")
    inner = f"{mounts} && exec {sys.executable} -c \"$CHILD\" {launches}"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", inner],
                          env={**env, "CHILD": CHILD}, capture_output=True, text=True, timeout=60 + 30 * launches)
    if done.returncode != 0:
        raise SystemExit(f"the launches failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--launches", type=int, default=4, help="launches per setting (the first is left out)")
    args = parser.parse_args()
    if args.launches < 2:
        parser.error("--launches must be at least 2: the first launch is left out of the median")
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or shutil.which("unshare") is None:
        raise SystemExit("this needs Linux, root and unshare (util-linux): it bind-mounts a resolv.conf of its own")
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(SILENT_SERVER)
    threading.Thread(target=never_answer, args=(server,), daemon=True).start()
    with (tempfile.NamedTemporaryFile("w", prefix="dpedu-resolv-", suffix=".conf") as resolv_conf,
          tempfile.NamedTemporaryFile("w", prefix="dpedu-hosts-") as hosts):
        resolv_conf.write(f"nameserver {SILENT_SERVER[0]}\n")
        resolv_conf.flush()
        with open("/etc/hosts") as original:
            hosts.write(original.read().rstrip("\n") + "\n::ffff:127.0.0.1 localhost\n")
        hosts.flush()
        for said, res_options, hosts_file in (("as it is", None, None),
                                              ('RES_OPTIONS="timeout:1 attempts:1"', "timeout:1 attempts:1", None),
                                              ("/etc/hosts names ::ffff:127.0.0.1", None, hosts.name)):
            before = queries
            median = median_launch(resolv_conf.name, args.launches, res_options, hosts_file)
            print(f"name server silent, {said}: median launch {median} s ({queries - before} queries to it)",
                  flush=True)
    if queries == 0:
        print("The silent name server was never asked: lookups on this machine do not go to the name servers of "
              "/etc/resolv.conf (systemd-resolved's or nscd's cache, for example), so neither fix was measured.")


if __name__ == "__main__":
    main()
