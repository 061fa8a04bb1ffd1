"""The course's GPU self-check: ``./course check-gpu`` (``python -m dpedu.gpu_check``).

CI has no GPU, so the GPU branches of the course (the lessons whose cells count GPUs, found from the
notebooks themselves, ``dpedu.scripts.train_ddp`` and lesson 13's ``dpedu.scripts.train_addition``) are tested
there only by faking what torch reports. On a machine with GPUs this module runs them for real, each against
the CPU reference its lesson uses, one line per check: PASS or FAIL, what it measured against which
tolerance, and its time; a FAIL says what to do, a PASS may carry a note (a warning a rank printed, a
setting that will bite). A failing check does not stop the next, except the two every later check stands
on (the environment, and CUDA after this process started it). Every check has a watchdog: one that gives no
answer in its time is a FAIL with where it was stuck, and the check ends there. The notebooks step runs each
GPU lesson under nbval, writes pytest's full output to a log file, and the run ends with one line per
lesson: its GPU cells ran here, or did not and why. The exit code is 1 if any check failed.

Without a GPU it says so and exits 0; where the system lists NVIDIA GPUs that torch cannot use (a CPU-only
torch, a driver older than torch's CUDA) it says what to install and exits 2. ``--record`` stores what the
passing checks measured in ``notebooks/gpu_recorded.json``, which ``recorded`` reads back.

Order matters: this process initialises CUDA in the second check, after the environment report, and
from then on every launch starts its ranks from the forkserver (the default with GPUs), never by fork.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import faulthandler
import io
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpedu.beyond import zero_memory
from dpedu.beyond.mixed_precision import train_digits
from dpedu.data_parallel import digits_ddp
from dpedu.data_parallel.equivalence import batchnorm_step, sync_batchnorm_on_this_machine
from dpedu.data_parallel.nn_data_parallel import forward_on_gpus, replication_cost, wrap
from dpedu.data_parallel.sync_batchnorm import largest_gap
from dpedu.datasets import digits
from dpedu.models import largest_difference, mlp
from dpedu.runtime import gpus, start_methods
from dpedu.runtime.commands import run_together
from dpedu.runtime.environment import EnvironmentReport, environment_report
from dpedu.runtime.failures import RankFailedError, leftover_processes
from dpedu.runtime.gpus import SHARED_MEMORY_REMEDY, cuda12_install, driver_remedy
from dpedu.runtime.launcher import launch
from dpedu.runtime.rendezvous import on_loopback

ROOT = Path(__file__).resolve().parents[1]  # the course's repository, when dpedu is used from it
RECORD = ROOT / "notebooks" / "gpu_recorded.json"
RECORDED = ("nccl-all-reduce", "data-parallel", "sync-batchnorm", "fsdp2", "float16-gradscaler")
FORKED_CUDA = "Cannot re-initialize CUDA in forked subprocess"  # torch's words for a rank forked after cuInit
# a code cell that asks how many GPUs there are, or calls what branches on it (lesson 08's nn.SyncBatchNorm)
GPU_BRANCH = re.compile(r"\b(gpu_count|device_count|sync_batchnorm_on_this_machine)\(")
# The GPUs each lesson's GPU cells need to all run on GPUs (1 where not named here): with fewer, those cells take
# their CPU path, as on a laptop, and the verdict says so (tests/test_gpu_check.py keeps this in step with the cells)
GPUS_FOR_EVERY_CELL = {"02_data_parallelism_by_hand": 2, "08a_batchnorm_across_ranks": 2,
                       "12b_which_parallelism_when": 8, "13b_data_loading_and_scaling": 2,
                       "appendix_circulating_code": 2}
NOTEBOOK_LIMIT = 600  # seconds for one lesson under nbval (a cold start of torch on a cluster's shared disk is slow)
LOG = "gpu-check-notebooks.log"  # pytest's full output of the notebooks step, in the current folder
CHECK_LIMIT = 900  # seconds any one check may take before the watchdog calls it stuck
# GPU results are compared with float32 CPU results, at tolerances from 1e-6 to 1e-4 (each check states its
# own). What is left between them is summation order, provided float32 stays float32: the GPU paths pin
# full precision (TF32, which an environment variable can turn on, would round matrix products to 10 bits).


class CheckFailed(Exception):
    """A check ran but measured something other than what the course promises."""


class NotCheckedHere(Exception):  # noqa: N818 - a verdict, not an error
    """A check this machine cannot run (too few GPUs): neither passed nor failed."""


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


def gpu_notebooks(folder: Path | None = None) -> list[Path]:
    """The notebooks with a GPU branch: a code cell that counts the GPUs (``gpu_count()``, ``device_count()``)."""
    folder = course_file("notebooks") if folder is None else folder
    return [path for path in sorted(folder.glob("*.ipynb"))
            if any(cell["cell_type"] == "code" and GPU_BRANCH.search("".join(cell["source"]))
                   for cell in json.loads(path.read_text())["cells"])]


def course_file(relative: str) -> Path:
    """A file of the course's repository, or a failed check saying it is not there."""
    path = ROOT / relative
    expect(path.exists(), f"{relative} is not here ({ROOT}): run the check from a clone of the course")
    return path


# The checks: each returns the figure it measured, or raises ------------------------------------------------

def check_environment() -> str:
    report = environment_report()  # reads the GPUs in a child process: CUDA stays uninitialised here
    print(report)
    names = [gpu.name for gpu in report.gpus]
    expect(bool(names), "the report lists 0 GPUs")
    expect(not any(n.startswith("unusable") for n in names), f"torch cannot use the GPUs: {names[0]}")
    expect(report.backends["nccl"], "this torch has no nccl backend")
    expect(report.start_method != "fork", "ranks would start by fork, which CUDA in this process would spoil: "
           "unset DPEDU_START_METHOD")
    for warning in report.warnings:  # what will bite later (shared memory, TF32), said once, here
        note(warning)
    return f"{len(names)} GPU(s) ({', '.join(names)}), nccl available, ranks start by {report.start_method}"


def is_forked_cuda_error(error: BaseException) -> bool:
    """Whether ``error`` is a rank's failure with torch's refusal to use CUDA in a forked child."""
    return isinstance(error, RankFailedError) and FORKED_CUDA in str(error)


def check_cuda_after_parent_init() -> str:
    torch.zeros(1, device="cuda")  # CUDA is up in this process, as after a notebook cell that used the GPU
    name = launch(torch.cuda.get_device_name, 1, backend="nccl")[0]
    try:  # the control: a rank forked from this process must fail, or the check could not fail either
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # Python's warning about forking threads: the point
            launch(torch.cuda.get_device_name, 1, backend="nccl", start_method="fork")
    except Exception as error:  # noqa: BLE001 - anything but torch's own refusal is a failure of the check
        expect(is_forked_cuda_error(error), f"the forked control failed otherwise: {error}")
    else:
        raise CheckFailed("a rank forked after CUDA was initialised used CUDA: the control did not fail")
    return f"a rank used {name} after this process initialised CUDA; a forked one failed: {FORKED_CUDA!r}"


def _all_reduce_cuda_and_cpu() -> tuple[int, float, float]:  # in each rank
    on_gpu, on_cpu = (torch.tensor([dist.get_rank() + 1.0], device=d) for d in ("cuda", "cpu"))
    dist.all_reduce(on_gpu)  # through nccl
    dist.all_reduce(on_cpu)  # through gloo, in the same "cpu:gloo,cuda:nccl" group
    return torch.cuda.current_device(), on_gpu.item(), on_cpu.item()


def check_nccl_all_reduce() -> str:
    n = start_methods.gpu_count()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):  # launch relays what ranks print there, labelled "[rank r]"
        results = launch(_all_reduce_cuda_and_cpu, n, backend="nccl")
    total = n * (n + 1) / 2
    expect(results == [(rank, total, total) for rank in range(n)], f"got {results}, want sums {total:g} on own GPUs")
    noise = [line for line in stderr.getvalue().splitlines() if line.startswith("[rank ")]
    if noise:  # right sums with a warning: the machine works, and the warning may explain a later failure
        note("ranks printed on stderr: " + " | ".join(noise[:3]) + (" ..." if len(noise) > 3 else ""))
    return f"{n} rank(s), rank r on cuda:r: CUDA and CPU sums both {total:g} (exact)"


def train_ddp_result(stdout: str) -> tuple[str, float, bool]:
    """The backend, parameter checksum and replica check that ``dpedu.scripts.train_ddp`` prints on rank 0."""
    found = re.search(r" on (\S+), .*parameter checksum (-?\d+\.\d+).*replicas identical: (True|False)", stdout)
    if found is None:
        raise CheckFailed(f"train_ddp.py printed no result: {stdout[-300:]!r}")
    return found[1], float(found[2]), found[3] == "True"


def check_torchrun_train_ddp() -> str:
    ranks = min(2, start_methods.gpu_count())  # the script uses GPUs only when each local rank can have one
    env = {**os.environ, "OMP_NUM_THREADS": "1", **on_loopback()}  # as lesson 03 runs it
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
               "-m", "dpedu.scripts.train_ddp", "--steps", "10", "--batch-size", str(64 // ranks)]
    run = run_together([command], timeout=180, env=env)[0]  # reaps torchrun's workers too
    expect(run.returncode == 0, f"torchrun exited {run.returncode}:\n{run.stderr[-1500:]}")
    backend, got, identical = train_ddp_result(run.stdout)
    reference = digits_ddp.train(steps=10, batch_size=64, lr=0.1, ddp=False)  # lesson 03's reference
    want = digits_ddp.parameter_checksum(reference)
    expect("cuda:nccl" in backend, f"the script ran on {backend}, not on the GPUs (it needs one per local rank)")
    expect(identical, "the replicas differ after training")
    expect(abs(got - want) < 1e-4, f"checksum {got:.5f}, one CPU process {want:.5f} (tolerance 1e-4)")
    return (f"{ranks} rank(s) x {64 // ranks} on {backend}: checksum |difference| from one CPU process x 64 "
            f"{abs(got - want):.1e} (tolerance 1e-4; printed to 5 decimals), replicas identical")


def train_addition_summary(stdout: str) -> dict:
    """The JSON summary that ``dpedu.scripts.train_addition`` prints as the last line of rank 0's output."""
    lines = stdout.strip().splitlines()
    try:
        summary = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        summary = None
    if not isinstance(summary, dict) or "losses" not in summary:
        raise CheckFailed(f"train_addition.py printed no summary: {stdout[-300:]!r}")
    return summary


def check_torchrun_train_addition() -> str:
    ranks = min(2, start_methods.gpu_count())  # the script uses GPUs only when each local rank can have one
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DPEDU_QUIET": "1", **on_loopback()}  # as lesson 13 runs it
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
               "-m", "dpedu.scripts.train_addition", "--steps", "100", "--warmup", "20"]
    run = run_together([command], timeout=300, env=env)[0]  # reaps torchrun's workers too
    expect(run.returncode == 0, f"torchrun exited {run.returncode}:\n{run.stderr[-1500:]}")
    summary = train_addition_summary(run.stdout)
    losses = summary["losses"]
    expect(summary["backend"] == "cpu:gloo,cuda:nccl" and summary["device"] == "cuda",
           f"the script ran on {summary['backend']} ({summary['device']}), not on the GPUs")
    expect(summary["precision"] == "float16", f"precision {summary['precision']}, not auto's float16 on GPUs")
    expect(summary["replicas_identical"], "the replicas differ after training")
    expect(len(losses) == 100 and all(map(float.__eq__, losses, losses)), "not 100 finite global losses")
    expect(losses[-1] < 0.8 * losses[0], f"the loss went from {losses[0]:.3f} to {losses[-1]:.3f}, not down 20 %")
    return (f"{ranks} rank(s) on {summary['backend']}, float16 + GradScaler, 100 steps: global loss "
            f"{losses[0]:.2f} -> {losses[-1]:.2f} (bar: down 20 %), replicas identical")


def check_ddp_on_gpus() -> str:
    ranks = min(2, start_methods.gpu_count())
    states = launch(lambda: digits_ddp.train(steps=10, batch_size=64 // ranks, lr=0.1,
                                            device=f"cuda:{dist.get_rank()}"),
                    ranks, backend="nccl")  # lesson 03's nccl cell
    gap = largest_difference(states[0]["model"], digits_ddp.train(steps=10, batch_size=64, lr=0.1, ddp=False)["model"])
    figure = f"{ranks} rank(s) x {64 // ranks}, 10 steps: max |difference| from one CPU process {gap:.1e}"
    expect(gap < 1e-4, f"{figure} (tolerance 1e-4)")
    return f"{figure} (tolerance 1e-4)"


def check_data_parallel() -> str:
    gpus = start_methods.gpu_count()
    data = digits()
    X, y = data.X_train[:256], data.y_train[:256]  # lesson 02's global batch
    reference = mlp(64, 32, 10, seed=0)
    F.cross_entropy(reference(X), y).backward()
    gaps = {f"nn.DataParallel on {gpus} GPU(s), output": (wrap(mlp(64, 32, 10, seed=0))(X.cuda()).cpu()
                                                          - reference(X)).abs().max().item()}
    peaks = ""
    if gpus >= 2:  # lesson 02's replicate/scatter/parallel_apply/gather, and what replicating costs
        on_gpus = mlp(64, 32, 10, seed=0).cuda()
        output, _ = forward_on_gpus(on_gpus, X.cuda(), list(range(gpus)))
        F.cross_entropy(output, y.cuda()).backward()
        gaps["forward_on_gpus, gradient"] = largest_difference([p.grad.cpu() for p in on_gpus.parameters()],
                                                               [p.grad for p in reference.parameters()])
        batch, labels = data.X_train[:256].repeat(16, 1).cuda(), data.y_train[:256].repeat(16).cuda()
        cost = replication_cost(mlp(64, 4096, 10, depth=2).cuda(), batch, labels)
        peak, mib = cost["peak_bytes"], [round(p / 2**20) for p in cost["peak_bytes"]]
        expect(peak[0] > max(peak[1:]), f"GPU 0 should hold the most (module, gathered output): peaks {mib} MiB")
        peaks = f"; peak MiB per GPU {mib}, replicate {cost['replicate_s'] * 1e3:.2f} ms"
    figure = ", ".join(f"{what} {gap:.1e}" for what, gap in gaps.items()) + " (tolerance 1e-5)"
    expect(max(gaps.values()) < 1e-5, f"max |difference| from one CPU model: {figure}")
    return f"max |difference| from one CPU model: {figure}{peaks}"


def check_sync_batchnorm() -> str:
    if (n := start_methods.gpu_count()) < 2:  # lesson 08 then runs dpedu.SyncBatchNorm on CPU ranks: no GPU path
        raise NotCheckedHere(f"needs 2 GPUs (nn.SyncBatchNorm over nccl, lesson 08a); this machine has {n}")
    kind, ranks = sync_batchnorm_on_this_machine([3, 5])
    reference = batchnorm_step([3, 5], "plain")
    tolerance = 1e-4 if kind == "torch" else 1e-5  # lesson 08's: GPU kernels round differently
    worst = max(largest_gap(ranks, reference, key) for key in reference)  # lesson 08's comparison
    where = "nn.SyncBatchNorm on 2 GPUs over nccl" if kind == "torch" else "dpedu.SyncBatchNorm on 2 CPU ranks"
    figure = f"{where} vs one process on the whole batch: max relative gap {worst:.1e} (tolerance {tolerance:g})"
    expect(worst < tolerance, figure)
    return figure


def check_fsdp2() -> str:
    n = start_methods.gpu_count()
    on_gpus = launch(lambda: zero_memory.train("fsdp", steps=5, device=f"cuda:{dist.get_rank()}"), n, backend="nccl")
    reference = launch(lambda: zero_memory.train("ddp", steps=5), n)[0]["params"]  # gloo ranks
    gap = max(largest_difference(rank["params"], reference) for rank in on_gpus)
    figure = f"FSDP2 on {n} GPU(s), 5 Adam steps, every rank vs DDP on {n} CPU ranks: {gap:.1e} (tolerance 1e-5)"
    expect(gap < 1e-5, figure)
    return figure


def check_float16_gradscaler() -> str:
    final = launch(lambda: {p: train_digits(p, steps=60, lr=0.3, hidden=64, device="cuda")[-1]
                            for p in ("float32", "float16")}, 1, backend="nccl")[0]  # lesson 11's cell
    gap = abs(final["float32"] - final["float16"])
    figure = (f"loss after 60 steps: float32 {final['float32']:.3f}, float16 + GradScaler {final['float16']:.3f}: "
              f"|difference| {gap:.1e} (tolerance 0.02)")
    expect(gap < 0.02, figure)
    return figure


def ran_here(lesson: str) -> str:
    """A lesson's verdict when its GPU cells passed: on how many GPUs, and whether some took their CPU path."""
    have, need = start_methods.gpu_count(), GPUS_FOR_EVERY_CELL.get(lesson, 1)
    return f"ran here on {have} GPU(s)" + (f"; its cells for {need} GPUs took their CPU path" if have < need else "")


def check_notebooks() -> str:
    """Each lesson with a GPU branch under nbval, alone, in this Python; pytest's whole output goes to ``LOG``."""
    log = Path(LOG).resolve()
    log.write_text("")
    for path in gpu_notebooks():
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-current-env",
                   str(path.relative_to(ROOT))]
        # the repository's conftest.py sets what notebooks need under pytest; run_together reaps the kernels too
        start = time.monotonic()
        try:
            run = run_together([command], timeout=NOTEBOOK_LIMIT, cwd=str(ROOT))[0]
        except TimeoutError:
            lessons[path.stem] = f"did not finish within {NOTEBOOK_LIMIT} s"
        else:
            with log.open("a") as file:
                file.write(f"===== {path.name}\n{run.stdout}{run.stderr}\n")
            failed = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
            lessons[path.stem] = (ran_here(path.stem) if run.returncode == 0 else
                                  f"failed: {(failed or ['pytest exited 1'])[0]}")
        print(f"      {path.stem}: {lessons[path.stem]} ({time.monotonic() - start:.0f} s)", flush=True)  # progress
    bad = {name: verdict for name, verdict in lessons.items() if not verdict.startswith("ran here")}
    expect(not bad, "\n".join([f"{len(bad)} of {len(lessons)} GPU lessons failed under nbval; pytest's output "
                                f"is in {log}", *(f"{name}: {verdict}" for name, verdict in bad.items())]))
    return f"{len(lessons)} GPU lessons under nbval, all passed; pytest's output is in {log}"


Check = Callable[[], str]
CHECKS: list[tuple[str, Check]] = [
    ("environment", check_environment),
    ("cuda-after-parent-init", check_cuda_after_parent_init),
    ("nccl-all-reduce", check_nccl_all_reduce),
    ("torchrun-train_ddp", check_torchrun_train_ddp),
    ("torchrun-train_addition", check_torchrun_train_addition),
    ("ddp-on-gpus", check_ddp_on_gpus),
    ("data-parallel", check_data_parallel),
    ("sync-batchnorm", check_sync_batchnorm),
    ("fsdp2", check_fsdp2),
    ("float16-gradscaler", check_float16_gradscaler),
    ("notebooks", check_notebooks),
]


def no_kernel_image_remedy() -> str:
    """What to do where this torch has no kernels for the GPU: CUDA 13 builds leave out GPUs older than Turing
    (the V100), CUDA 12.6 builds those newer than Hopper (Blackwell)."""
    if (torch.version.cuda or "").startswith("13"):
        return (f"this torch was not built for this GPU's architecture (CUDA 13 builds leave out GPUs older than "
                f"Turing, such as the V100): install torch's CUDA 12.6 build, which still covers Maxwell to Hopper: "
                f"{cuda12_install()}")
    return (f"this torch (CUDA {torch.version.cuda}) was not built for this GPU's architecture: a GPU newer than "
            f"Hopper (Blackwell: RTX 50xx, B200) needs a CUDA 12.8 or later build, PyPI's default CUDA 13 one with "
            f"driver {gpus.OLDEST_DRIVER[13]} or later")


ROOTS = ("environment", "cuda-after-parent-init")  # every later check stands on these: after a FAIL, stop
REMEDIES = [  # (words in a failure, what to do): the first that matches
    ("GPU lessons failed under nbval", "read the log: a cell whose output differs only because it ran on a GPU "
                                       "is the course's bug (report it with the log); an error in a cell is the "
                                       "machine's, and the checks above say which"),
    ("unhandled system error", f"{SHARED_MEMORY_REMEDY}; where GPUs cannot reach each other directly (some PCIe "
                               f"VMs), also NCCL_P2P_DISABLE=1"),
    ("/dev/shm", SHARED_MEMORY_REMEDY),
    ("busy or unavailable", "the GPUs are in exclusive-process mode or taken by another program (nvidia-smi says "
                            "which): free them, or ask for the default compute mode"),
    ("system not yet initialized", "on an NVSwitch system (HGX, DGX) the fabric manager is not running: "
                                   "systemctl start nvidia-fabricmanager, then rerun"),
    ("no kernel image", no_kernel_image_remedy()),
    ("driver", driver_remedy()),
    ("out of memory", "another program holds the GPUs' memory (nvidia-smi says which): free it and rerun"),
    ("no answer within", "a GPU operation that never returns: rerun with NCCL_P2P_DISABLE=1 (GPUs that cannot "
                         "reach each other directly) and NCCL_DEBUG=INFO to see where it waits"),
    ("tolerance", "the course pins full float32 wherever it compares GPU results with CPU ones, so TF32 should not "
                  "explain this: report it with this output and the value of TORCH_ALLOW_TF32_CUBLAS_OVERRIDE"),
]
DEFAULT_REMEDY = "rerun with NCCL_DEBUG=INFO for NCCL's own account, and keep this output for whoever helps"
notes: list[str] = []  # what the running check noted (warnings under a PASS)
lessons: dict[str, str] = {}  # lesson -> what its GPU cells did here, filled by the notebooks step


def note(text: str) -> None:
    """A warning for the running check's line: it passed, but this may explain a later failure."""
    notes.append(text)


def remedy(reason: str) -> str:
    """What to do about a failure, from the words it was reported with."""
    return next((fix for words, fix in REMEDIES if words in reason), DEFAULT_REMEDY)


def _reason(error: Exception) -> str:
    if isinstance(error, CheckFailed):
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)  # where it broke, and which line of the check led there
    mine = [frame for frame in frames if frame.filename == __file__]
    where = [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in [frames[-1], *mine[-1:]] if frames]
    return f"{type(error).__name__}: {error}\n(raised at {', called from '.join(dict.fromkeys(where))})"


@contextlib.contextmanager
def watchdog(name: str, limit: float, so_far: Callable[[], str] = str) -> Iterator[None]:
    """End this process, with a FAIL line, every thread's stack and ``so_far()``, if the block takes more than
    ``limit`` s: a GPU call stuck in the driver cannot be interrupted. Every process started from here is killed
    first: the ranks die with this process, but what ``run_together`` started (a lesson's pytest, its kernel and
    ranks) runs in sessions of its own and would go on holding the GPUs."""
    def stuck() -> None:
        print(f"FAIL  {name:<22} no answer within {limit:g} s; where each thread was:", flush=True)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        print(f"      what to do: {remedy('no answer within')}", flush=True)
        for pid in leftover_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        print(so_far(), flush=True)
        os._exit(1)

    timer = threading.Timer(limit, stuck)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def run_checks(checks: Sequence[tuple[str, Check]], limit: float = CHECK_LIMIT) -> dict[str, tuple[bool | None, str]]:
    """Run the checks in order, print one line for each (a FAIL with what to do, a PASS with its notes), stop
    after a failed root check, and return {name: (passed, figure or reason)}, passed None (SKIP) where the check
    cannot run on this machine. Each check gets ``limit`` s, the notebooks step each lesson's limit (it stops a
    lesson that overruns its own) and a minute more."""
    outcomes: dict[str, tuple[bool | None, str]] = {}  # None: not checked here

    def so_far() -> str:
        passed = [check for check, (ok, _) in outcomes.items() if ok is True]
        lines = [f"so far: {len(passed)} passed ({', '.join(passed) or 'none'}), the check above stuck"]
        return "\n".join(lines + [f"  {lesson}: {verdict}" for lesson, verdict in lessons.items()])

    for name, check in checks:
        start = time.monotonic()
        notes.clear()
        try:  # without the course's notebooks here, finding them is the notebooks step's failure
            allowed = len(gpu_notebooks()) * NOTEBOOK_LIMIT + 60 if name == "notebooks" else limit
            with watchdog(name, allowed, so_far):
                passed, text = True, check()
        except NotCheckedHere as why:
            passed, text = None, f"not checked here: {why}"
        except Exception as error:  # noqa: BLE001 - a failing check is reported, and the next one runs
            passed, text = False, _reason(error)
        first, *rest = text.splitlines() or [""]
        verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[passed]
        print(f"{verdict}  {name:<22} {first}  ({time.monotonic() - start:.1f} s)", flush=True)
        below = [f"note: {n}" for n in notes] if passed else [] if passed is None else [
            *(rest if len(rest) <= 15 else [*rest[:4], "...", *rest[-10:]]),  # a traceback's first and last lines
            f"what to do: {remedy(text)}"]
        for line in below:
            print(f"      {line}")
        outcomes[name] = (passed, text)
        if passed is False and name in ROOTS:
            print(f"      stopped here: every later check needs {name} to pass")
            break
    return outcomes


def record(outcomes: dict[str, tuple[bool, str]], path: Path = RECORD, gpu: str | None = None) -> None:
    """Add what the passing checks in ``RECORDED`` measured to ``path``, with the GPU, torch and date."""
    if gpu is None:
        names = collections.Counter(g.name for g in environment_report().gpus)
        gpu = ", ".join(f"{count} x {name}" if count > 1 else name for name, count in names.items())
    entries = json.loads(path.read_text()) if path.exists() else {}  # each entry says where it was measured
    date = datetime.date.today().isoformat()
    entries.update({name: {"gpu": gpu, "torch": torch.__version__, "date": date, "text": text}
                    for name, (passed, text) in outcomes.items() if passed and name in RECORDED})
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")


def recorded(check: str, path: Path = RECORD) -> dict | None:
    """What ``check`` measured on a GPU machine, as ``--record`` stored it; None if nothing was stored."""
    return json.loads(path.read_text()).get(check) if path.exists() else None


def why_gpus_are_unusable(report: EnvironmentReport) -> str:
    """What keeps torch from GPUs that the system lists, and what to do."""
    if report.warnings:  # a CPU-only torch, or CUDA that cannot start: the report said it with the remedy
        return "the warning above says why and what to do"
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides them from torch: unset it"
    return ("torch's CUDA finds none of them: in a container, start it with the GPUs passed in (docker run "
            "--gpus all)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course check-gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-notebooks", action="store_true", help="skip running the GPU notebooks under nbval")
    parser.add_argument("--record", action="store_true", help="store what passed in notebooks/gpu_recorded.json")
    options = parser.parse_args(argv)
    if start_methods.gpu_count() == 0:  # NVML's count, and a child process's CUDA where NVML lists GPUs
        report = environment_report()
        print(report)
        if listed := gpus.system_gpu_count() or gpus.probe().listed:  # GPUs that this torch cannot use
            print(f"FAIL  this machine has {listed} NVIDIA GPU(s) and this torch cannot use them, so the course's "
                  f"GPU paths cannot run here: {why_gpus_are_unusable(report)}")
            return 2
        print("No GPU here (torch.cuda.device_count() is 0), so there is nothing to check: the course's GPU paths "
              "are tested on CPU by faking what torch reports. Run this on a machine with GPUs.")
        return 0
    os.environ.setdefault("DPEDU_QUIET", "1")  # launch's note on the start method: the report says it already
    lessons.clear()
    outcomes = run_checks([c for c in CHECKS if not (options.no_notebooks and c[0] == "notebooks")])
    failed = [name for name, (passed, _) in outcomes.items() if passed is False]
    skipped = [name for name, (passed, _) in outcomes.items() if passed is None]
    print(f"{len(outcomes) - len(failed) - len(skipped)} passed, {len(failed)} failed"
          + (f": {', '.join(failed)}" if failed else "")
          + (f"; not checked here: {', '.join(skipped)}" if skipped else ""))
    if (ROOT / "notebooks").is_dir():  # a clone: the lessons are here to name
        print("The GPU cells of each lesson that has them, on this machine:")
        for path in gpu_notebooks():
            print(f"  {path.stem}: {lessons.get(path.stem, 'not run (--no-notebooks, or the checks stopped first)')}")
    if options.record:
        record(outcomes, RECORD)
        print(f"recorded what passed of {', '.join(RECORDED)} in {RECORD}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
