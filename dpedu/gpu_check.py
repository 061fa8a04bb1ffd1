"""The course's GPU self-check: ``./course check-gpu`` (``python -m dpedu.gpu_check``).

CI has no GPU, so the GPU branches of the course (lessons 00, 02, 03, 04, 07, 09, ``dpedu.scripts.train_ddp`` and
lesson 10's ``dpedu.scripts.train_addition``) are tested there only by faking what torch reports. On a machine with
GPUs this module runs them for real, each against the CPU reference its lesson uses, one line per check:
PASS or FAIL, what it measured against which tolerance, and its time. A failing check does not stop the
next; the exit code is 1 if any failed. Without a GPU it says so and exits 0. ``--record`` stores what the
passing checks measured in ``notebooks/gpu_recorded.json``, which ``recorded`` reads back for a notebook's
CPU path to show.

Order matters: this process initialises CUDA in the second check, after the environment report, and
from then on every launch starts its ranks from the forkserver (the default with GPUs), never by fork.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import io
import json
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpedu.beyond import zero_memory
from dpedu.beyond.mixed_precision import train_digits
from dpedu.data_parallel import digits_ddp
from dpedu.data_parallel.equivalence import batchnorm_step, sync_batchnorm_on_this_machine
from dpedu.data_parallel.nn_data_parallel import forward_on_gpus, replication_cost, wrap
from dpedu.datasets import digits
from dpedu.models import largest_difference, mlp
from dpedu.runtime import start_methods
from dpedu.runtime.commands import run_together
from dpedu.runtime.environment import environment_report
from dpedu.runtime.failures import RankFailedError
from dpedu.runtime.launcher import launch
from dpedu.runtime.rendezvous import on_loopback

ROOT = Path(__file__).resolve().parents[1]  # the course's repository, when dpedu is used from it
RECORD = ROOT / "notebooks" / "gpu_recorded.json"
RECORDED = ("nccl-all-reduce", "data-parallel", "sync-batchnorm", "fsdp2", "float16-gradscaler")
FORKED_CUDA = "Cannot re-initialize CUDA in forked subprocess"  # torch's words for a rank forked after cuInit
NOTEBOOKS = ["00_welcome", "01_gd_sgd_minibatch", "02_data_parallelism_by_hand", "03_ddp_from_a_notebook",
             "04_collectives_from_scratch", "07_batchnorm_and_randomness", "09_beyond_data_parallelism"]
# GPU results are compared with float32 CPU results: torch leaves TF32 off for float32 matmuls by default,
# and lesson 07's GPU ranks turn cuDNN's TF32 convolutions off; what is left is summation order, 1e-4 at most.


class CheckFailed(Exception):
    """A check ran but measured something other than what the course promises."""


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


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
    expect(report.backends["nccl"], "this torch has no nccl backend")
    gpus = start_methods.gpu_count()
    expect(len(names) == gpus, f"the report lists {len(names)} GPU(s), NVML counts {gpus}")
    expect(not any(n.startswith("unusable") for n in names), f"torch cannot use the GPUs: {names[0]}")
    expect(report.start_method == "forkserver", f"ranks would start by {report.start_method}, not forkserver")
    return f"{len(names)} GPU(s) ({', '.join(names)}), nccl available, ranks start from a forkserver"


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
    expect(not noise, "ranks printed on stderr (the browser test fails on that):\n" + "\n".join(noise[:5]))
    return f"{n} rank(s), rank r on cuda:r: CUDA and CPU sums both {total:g} (exact), nothing on stderr"


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
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DPEDU_QUIET": "1", **on_loopback()}  # as lesson 10 runs it
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
    kind, ranks = sync_batchnorm_on_this_machine([3, 5])
    reference = batchnorm_step([3, 5], "plain")
    tolerance = 1e-4 if kind == "torch" else 1e-5  # lesson 07's: GPU kernels round differently

    def largest_gap(key: str) -> float:  # lesson 07's comparison, relative to the reference's largest value
        if key in ("output", "input grad"):  # each rank holds its own slice of the batch
            gap = (torch.cat([r[key] for r in ranks]) - reference[key]).abs().max()
        else:  # every rank holds all of it
            gap = max((r[key] - reference[key]).abs().max() for r in ranks)
        return (gap / reference[key].abs().max()).item()

    worst = max(map(largest_gap, reference))
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
                            for p in ("float32", "float16")}, 1, backend="nccl")[0]  # lesson 09's cell
    gap = abs(final["float32"] - final["float16"])
    figure = (f"loss after 60 steps: float32 {final['float32']:.3f}, float16 + GradScaler {final['float16']:.3f}: "
              f"|difference| {gap:.1e} (tolerance 0.02)")
    expect(gap < 0.02, figure)
    return figure


def check_notebooks() -> str:
    paths = [str(course_file(f"notebooks/{name}.ipynb").relative_to(ROOT)) for name in NOTEBOOKS]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths]
    # the repository's conftest.py sets what notebooks need under pytest; run_together reaps the kernels too
    run = run_together([command], timeout=480, cwd=str(ROOT))[0]
    lines = run.stdout.strip().splitlines() or ["no output"]
    failed = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
    expect(run.returncode == 0, "\n".join([f"pytest exited {run.returncode}: {lines[-1]}", *failed]))
    return f"{len(paths)} notebooks under nbval: {lines[-1]}"


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


def _reason(error: Exception) -> str:
    if isinstance(error, CheckFailed):
        return str(error)
    frames = traceback.extract_tb(error.__traceback__)  # where it broke, and which line of the check led there
    mine = [frame for frame in frames if frame.filename == __file__]
    where = [f"{Path(f.filename).name}:{f.lineno} in {f.name}" for f in [frames[-1], *mine[-1:]] if frames]
    return f"{type(error).__name__}: {error}\n(raised at {', called from '.join(dict.fromkeys(where))})"


def run_checks(checks: Sequence[tuple[str, Check]]) -> dict[str, tuple[bool, str]]:
    """Run every check in order, print one line for each, and return {name: (passed, figure or reason)}."""
    outcomes = {}
    for name, check in checks:
        start = time.monotonic()
        try:
            passed, text = True, check()
        except Exception as error:  # noqa: BLE001 - a failing check is reported, and the next one runs
            passed, text = False, _reason(error)
        first, *rest = text.splitlines() or [""]
        print(f"{'PASS' if passed else 'FAIL'}  {name:<22} {first}  ({time.monotonic() - start:.1f} s)", flush=True)
        for line in [] if passed else rest if len(rest) <= 15 else [*rest[:4], "...", *rest[-10:]]:
            print(f"      {line}")  # a traceback's first and last lines: what failed, and where
        outcomes[name] = (passed, text)
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course check-gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-notebooks", action="store_true", help="skip running the GPU notebooks under nbval")
    parser.add_argument("--record", action="store_true", help="store what passed in notebooks/gpu_recorded.json")
    options = parser.parse_args(argv)
    if start_methods.gpu_count() == 0:  # asks NVML: nothing initialised, nothing to clean up
        print(environment_report())
        print("No GPU here (torch.cuda.device_count() is 0), so there is nothing to check: the course's GPU paths "
              "are tested on CPU by faking what torch reports. Run this on a machine with GPUs.")
        return 0
    os.environ.setdefault("DPEDU_QUIET", "1")  # launch's note on the start method: the report says it already
    outcomes = run_checks([c for c in CHECKS if not (options.no_notebooks and c[0] == "notebooks")])
    failed = [name for name, (passed, _) in outcomes.items() if not passed]
    print(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    if options.record:
        record(outcomes, RECORD)
        print(f"recorded what passed of {', '.join(RECORDED)} in {RECORD}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
