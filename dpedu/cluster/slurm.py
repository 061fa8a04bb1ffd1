"""A one-node Slurm cluster on this machine (lesson 09): submit with ``sbatch`` and ``srun`` as on a real one.

``local_cluster()`` writes a ``slurm.conf`` for one node, this machine as ``localhost``, into a fresh
temporary directory, starts Slurm's controller (``slurmctld``) and node daemon (``slurmd``) there, and
stops both, with every job, when its ``with`` block ends. It needs Linux, root and Slurm installed;
``unavailable_reason()`` says what is missing. There is no munge and no database: authentication is
off (``auth/none``), so while the cluster runs, anyone on this machine could run commands as root through
it (it listens on 127.0.0.1 only). Run it on a machine or container of your own: where other people have
processes (a class server), ``unavailable_reason()`` refuses, unless ``DPEDU_SLURM_SHARED_OK=1`` says you trust them.

    python -m dpedu.cluster.slurm JOB.sbatch [ARGS...]   # start, submit from here, print the job's output, stop
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from dpedu._validate import real
from dpedu.runtime.commands import Finished, run_together
from dpedu.runtime.processes import InterruptGuard, Supervisor, has_exited, live_processes, stop_and_reap, wait_until
from dpedu.runtime.rendezvous import free_port, on_loopback

PROGRAMS = ("slurmctld", "slurmd", "sbatch", "srun", "scontrol", "scancel", "squeue")
NODE = "localhost"  # a name every machine resolves: the job script uses it as the rendezvous host
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
         "DEADLINE"}
SHARED_OK = "DPEDU_SLURM_SHARED_OK"  # set to 1, the cluster starts where other people have processes too


def _program(name: str) -> str | None:
    # Debian puts the daemons in /usr/sbin, which is not on every user's PATH.
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"]))


def unavailable_reason() -> str | None:
    """None when ``local_cluster()`` can run here; otherwise one sentence: what is missing and how to get it, or
    why it must not start here."""
    if not sys.platform.startswith("linux"):
        return f"a local Slurm cluster needs Linux (this is {sys.platform}): run the lesson in a Linux container"
    missing = [name for name in PROGRAMS if _program(name) is None]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} not found): as root on Debian/Ubuntu, "
                "`apt-get install slurm-wlm`")
    if (os.cpu_count() or 1) < 2:
        return "lesson 09's batch job runs 2 ranks with a CPU each, and this machine has 1 CPU"
    if os.geteuid() != 0:
        return "starting Slurm's daemons needs root: run the notebook as root, e.g. in a container"
    if (others := _other_people()) and os.environ.get(SHARED_OK) != "1":
        return (f"other people have processes on this machine (user ids {', '.join(map(str, sorted(others)))}), and "
                "while the cluster runs, with no authentication, any of them could run commands as root through "
                f"it: on a shared server show the recorded run; where you trust every user, set {SHARED_OK}=1")
    return None


def _login_uid() -> int | None:
    """The user this session logged in as, kept by the kernel through sudo and su (None where it is unset)."""
    with suppress(OSError, ValueError):
        uid = int(Path("/proc/self/loginuid").read_text())
        return None if uid == 2**32 - 1 else uid
    return None


def _other_people() -> set[int]:
    """The people, other than whoever runs this (who logged in, and sudo's caller), with a process here: user
    ids from login.defs' UID_MIN to UID_MAX (1000 and 60000 unless it says otherwise); system services run
    below, nobody (65534) and systemd's dynamic users above."""
    bounds = {"UID_MIN": 1000, "UID_MAX": 60000}
    with suppress(OSError):
        defs = Path("/etc/login.defs").read_text()
        for name in bounds:
            if found := re.search(rf"^\s*{name}\s+(\d+)", defs, re.MULTILINE):
                bounds[name] = int(found[1])
    mine = {os.getuid(), _login_uid()}
    if os.environ.get("SUDO_UID", "").isdigit():
        mine.add(int(os.environ["SUDO_UID"]))
    owners = {process.owner for process in live_processes()}  # none where /proc cannot be read (CI's macOS-like pass)
    return {uid for uid in owners if bounds["UID_MIN"] <= uid <= bounds["UID_MAX"] and uid not in mine}


@dataclass(frozen=True)
class Job:
    """A batch job that has ended, in whatever state Slurm gave it (COMPLETED, FAILED, CANCELLED, ...).

    ``exit_code`` is the script's; ``output`` the text of its ``--output`` file ("" if it wrote none);
    ``seconds`` the time from submission until it had ended."""
    job_id: int
    state: str
    exit_code: int
    output: str
    output_path: str
    seconds: float


def _conf(directory: Path, cpus: int, memory_mb: int, ports: tuple[int, int]) -> str:
    settings = {
        "ClusterName": "dpedu", "SlurmctldHost": f"{NODE}(127.0.0.1)", "SlurmctldPort": ports[0],
        "SlurmdPort": ports[1], "SlurmUser": "root", "SlurmdUser": "root", "MpiDefault": "none",
        "MailProg": "/bin/true", "ReturnToService": 2,
        # No munge daemon: no authentication, no signed credentials; so listen on 127.0.0.1, not every interface
        "AuthType": "auth/none", "CredType": "cred/none", "CommunicationParameters": "NoCtldInAddrAny,NoInAddrAny",
        # No cgroups: a job's processes are found by their parents, and are not bound to CPUs
        "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
        # Jobs ask for CPUs, not whole cores; the counts below hold even where slurmd counts otherwise (containers)
        "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_CPU", "SlurmdParameters": "config_overrides",
        # Start a batch job as it is submitted (Slurm's default waits up to 3 s to gather submissions), and give
        # a cancelled job's processes 2 s from SIGTERM to SIGKILL (default 30 s)
        "SchedulerType": "sched/builtin", "SchedulerParameters": "batch_sched_delay=0", "KillWait": 2,
        # No database: nothing is accounted
        "AccountingStorageType": "accounting_storage/none", "JobAcctGatherType": "jobacct_gather/none",
        "JobCompType": "jobcomp/none",
        "StateSaveLocation": directory / "state", "SlurmdSpoolDir": directory / "spool",
        "SlurmctldPidFile": directory / "slurmctld.pid", "SlurmdPidFile": directory / "slurmd.pid",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items()) + (
        f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN\n"
        f"PartitionName=dpedu Nodes={NODE} Default=YES MaxTime=INFINITE State=UP\n")


class LocalCluster:
    """The running cluster ``local_cluster()`` yields; use it only inside that ``with`` block."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.conf = directory / "slurm.conf"
        self.cpus = os.cpu_count() or 1
        # A notebook itself run under Slurm has SLURM_JOB_ID etc.: srun would look for that job here.
        # TMPDIR: what the daemons and jobs leave in a temporary folder (a job's torchrun: its logs) goes with ours.
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, "SLURM_CONF": str(self.conf),
                    "TMPDIR": str(directory)}
        self.daemons: dict[str, subprocess.Popen] = {}

    def _client(self, *args: str, cwd: str | Path | None = None, env: Mapping[str, str] | None = None,
                timeout: float = 10.0) -> subprocess.CompletedProcess:
        """Run a Slurm command on this cluster; one still running after ``timeout`` s is killed (code 124)."""
        try:
            return subprocess.run([_program(args[0]) or args[0], *args[1:]], cwd=cwd, env={**self.env, **(env or {})},
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as error:
            return subprocess.CompletedProcess(error.cmd, 124, "", f"no answer within {timeout:g} s")

    def _job(self, job_id: int) -> dict[str, str]:
        line = self._client("scontrol", "show", "job", "-o", str(job_id)).stdout.strip()
        # Fields are "Key=value" separated by spaces; a value (a path) may hold spaces but never "Key=".
        return dict(field.split("=", 1) for field in re.split(r" (?=[\w/:]+=)", line) if "=" in field)

    def _start(self, timeout: float, supervisor: Supervisor) -> None:
        memory_mb = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
        ports = (first := free_port(), next(p for p in iter(free_port, None) if p != first))
        for sub in ("state", "spool"):
            (self.directory / sub).mkdir()
        self.conf.write_text(_conf(self.directory, self.cpus, memory_mb, ports))
        for name, extra in (("slurmctld", []), ("slurmd", ["-N", NODE])):  # -D: in the foreground, as our child
            with open(self.directory / f"{name}.log", "w") as log:
                self.daemons[name] = subprocess.Popen([_program(name), "-D", "-f", str(self.conf), *extra],
                                                      env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                                      stderr=subprocess.STDOUT, start_new_session=True)
        node = ""  # what scontrol last said of the node

        def idle() -> bool:
            nonlocal node
            for name, daemon in self.daemons.items():
                if has_exited(daemon):
                    raise RuntimeError(f"{name} exited while starting; its log ends:\n{self._log_tail(name)}")
            node = self._client("scontrol", "show", "node", "-o", NODE, timeout=5.0).stdout
            return re.search(r"\bState=IDLE\s", node) is not None

        supervisor.wait(idle, timeout, lambda: TimeoutError(
            f"the node was not idle after timeout={timeout:g} s ({node.strip() or 'no answer'}); slurmctld's log "
            f"ends:\n{self._log_tail('slurmctld')}"), poll=0.1)

    def _log_tail(self, name: str, lines: int = 10) -> str:
        return "\n".join((self.directory / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])

    def sbatch(self, script: str | os.PathLike, *args: str, cwd: str | os.PathLike | None = None,
               env: Mapping[str, str] | None = None, timeout: float = 120.0) -> Job:
        """Submit ``script ARGS`` from ``cwd`` (default: here; relative paths in the job start there) and
        wait until the job has ended, in any state. ``env`` is added to the job's environment. The job's
        output file is written into the cluster's temporary directory and returned as ``Job.output``.

        sbatch's refusal raises RuntimeError with its message. A job not ended after ``timeout`` s is
        cancelled and TimeoutError names it; on Ctrl-C it is cancelled too."""
        if not isinstance(script, (str, os.PathLike)) or not Path(script).is_file():
            raise ValueError(f"script must be the path of an existing file, got {script!r}")
        if not all(isinstance(a, str) for a in args):
            raise ValueError(f"args must be strings, got {args!r}")
        workdir = Path.cwd() if cwd is None else Path(cwd)
        if not workdir.is_dir():
            raise ValueError(f"cwd must be an existing directory, got {cwd!r}")
        if env is not None and not (isinstance(env, Mapping) and all(isinstance(k, str) and isinstance(v, str)
                                                                     for k, v in env.items())):
            raise ValueError(f"env must map names to strings, got {env!r}")
        real("timeout", timeout, above=0)
        start = time.monotonic()
        job_id = 0  # none submitted yet
        fields: dict[str, str] = {}  # what scontrol last said of the job

        def cancel_unless_ended(ended: bool) -> None:  # a timeout, Ctrl-C or error: the job is cancelled
            if job_id and not ended:
                self._client("scancel", str(job_id))

        def ended() -> bool:
            nonlocal fields
            fields = self._job(job_id)
            return fields.get("JobState", "UNKNOWN") in ENDED

        with Supervisor(cancel_unless_ended) as supervisor:
            # The output file goes to the cluster's directory, whatever the script's --output says, so that a
            # run leaves nothing behind in the course's folders.
            submitted = self._client("sbatch", "--parsable", f"--output={self.directory / '%x-%j.out'}",
                                     str(Path(script).resolve()), *args, cwd=workdir, env=env)
            if submitted.returncode != 0:
                raise RuntimeError(f"sbatch refused {script}: {submitted.stderr.strip()}")
            job_id = int(submitted.stdout.strip().split(";")[0])  # "id" or "id;cluster"
            supervisor.wait(ended, start + timeout - time.monotonic(), lambda: TimeoutError(
                f"job {job_id} ({Path(script).name}) was still {fields.get('JobState', 'UNKNOWN')} after "
                f"timeout={timeout:g} s, and was cancelled"), poll=0.1)
        state = fields["JobState"]
        output_path = fields.get("StdOut", "")
        output = Path(output_path).read_text(errors="replace") if output_path and Path(output_path).is_file() else ""
        return Job(job_id, state, int(fields.get("ExitCode", "0:0").split(":")[0]), output, output_path,
                   time.monotonic() - start)

    def srun(self, args: Sequence[str], timeout: float = 60.0, cwd: str | os.PathLike | None = None) -> Finished:
        """Run ``srun ARGS`` (e.g. ``["-n2", "hostname"]``) and return what it printed; stopped, with its
        tasks, after ``timeout`` s (TimeoutError)."""
        if isinstance(args, str) or not args or not all(isinstance(a, str) for a in args):
            raise ValueError(f"args must be a non-empty list of strings, e.g. ['-n2', 'hostname'], got {args!r}")
        real("timeout", timeout, above=0)
        # run_together adds os.environ back: unset the outside job's variables explicitly (see __init__).
        unset = [arg for name in os.environ if name.startswith("SLURM_") for arg in ("-u", name)]
        command = ["env", *unset, _program("srun"), *args] if unset else [_program("srun"), *args]
        return run_together([command], timeout=timeout, cwd=None if cwd is None else str(cwd), env=self.env)[0]

    def _stop(self) -> None:
        ctld = self.daemons.get("slurmctld")
        if ctld is not None and not has_exited(ctld):
            # Jobs first: slurmstepd, which runs them, outlives slurmd by design (a restarted slurmd adopts it).
            self._client("scancel", "--partition=dpedu")
            wait_until(lambda: not self._client("squeue", "-h", "-o", "%i").stdout.strip(), 10.0, poll=0.1)
        stop_and_reap(list(self.daemons.values()), grace=2.0)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        """SIGKILL whatever a job left running (a process it detached), then wait (5 s at most) until gone."""
        fds = {}
        for pid in _processes_of(str(self.conf)):
            with suppress(OSError):
                fds[pid] = os.pidfd_open(pid)
        try:  # a pid held open is checked again: if it was freed and reused meanwhile, the newcomer is spared
            for pid in set(fds) & set(_processes_of(str(self.conf))):
                with suppress(OSError):
                    signal.pidfd_send_signal(fds[pid], signal.SIGKILL)
        finally:
            for fd in fds.values():
                os.close(fd)
        if not wait_until(lambda: not _processes_of(str(self.conf)), 5.0, poll=0.02):
            warnings.warn(f"processes of the Slurm jobs still running after SIGKILL: {_processes_of(str(self.conf))}",
                          RuntimeWarning, stacklevel=3)


def _processes_of(conf: str) -> list[int]:
    """Live processes of the cluster whose configuration is ``conf`` (but this one): those whose environment
    names it (slurmd passes it to slurmstepd; slurmstepd and sbatch to every task, torchrun to its ranks),
    and every process in a session of such a slurmstepd (it starts each job's tasks in its own session)."""
    marker, table = f"SLURM_CONF={conf}".encode(), []
    for process in live_processes():
        if process.pid != os.getpid():
            with suppress(OSError):  # gone meanwhile
                table.append((process, marker in Path(f"/proc/{process.pid}/environ").read_bytes().split(b"\0")))
    sessions = {process.session for process, marked in table if marked and process.name.startswith("slurmstepd")}
    return [process.pid for process, marked in table if marked or process.session in sessions]


@contextmanager
def local_cluster(timeout: float = 20.0) -> Iterator[LocalCluster]:
    """Start a one-node Slurm cluster on this machine and yield it, its node idle.

    On leaving the block, normally or by an exception or Ctrl-C: every job is cancelled, both daemons
    get SIGTERM (SIGKILL 2 s later) and are reaped, any process a job left is killed, and the directory
    is removed. RuntimeError with ``unavailable_reason()`` where it cannot run here; TimeoutError if the
    node is not idle within ``timeout`` s (what started is stopped first)."""
    real("timeout", timeout, above=0)
    if (reason := unavailable_reason()) is not None:
        raise RuntimeError(reason)
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="dpedu-slurm-")))
    try:
        # Ctrl-C only between steps: no daemon started but unrecorded. The cluster outlives this wait: it is
        # stopped below, however the block ends.
        with Supervisor() as supervisor:
            cluster._start(timeout, supervisor)
        yield cluster
    finally:
        with InterruptGuard():  # a second Ctrl-C is raised after the clean-up, not in it
            cluster._stop()
            shutil.rmtree(cluster.directory, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one batch job on a local cluster; print its output and how long each phase took. Exit code 2
    where no cluster can run here (the reason printed), else 0 if the job COMPLETED, 1 if not."""
    parser = argparse.ArgumentParser(prog="python -m dpedu.cluster.slurm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("script", help="the batch script, submitted from the current directory")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    options = parser.parse_args(argv)
    if (reason := unavailable_reason()) is not None:
        print(reason, file=sys.stderr)
        return 2
    package_root = str(Path(__file__).resolve().parents[2])  # the job's python imports this same dpedu
    env = {"PYTHON": os.environ.get("PYTHON", sys.executable),
           "RDZV_PORT": os.environ.get("RDZV_PORT", str(free_port())),
           "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
           **on_loopback()}  # every rank runs here: gloo over loopback, as in lesson 03
    start = time.monotonic()
    with local_cluster() as cluster:
        print(f"cluster started in {time.monotonic() - start:.1f} s: one node ({NODE}, {cluster.cpus} CPUs)")
        job = cluster.sbatch(options.script, *options.args, env=env, timeout=300.0)
        print(f"job {job.job_id} {job.state} with exit code {job.exit_code}, {job.seconds:.1f} s from sbatch to "
              f"its end; its output ({Path(job.output_path).name}):\n{job.output.rstrip()}", flush=True)
        stopping = time.monotonic()
    print(f"cluster stopped in {time.monotonic() - stopping:.1f} s")
    return 0 if job.state == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
