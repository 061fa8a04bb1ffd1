"""The course's GPU self-check: ``./course check-gpu`` (``python -m dpedu.gpu_check``).

CI has no GPU, so every GPU path of the course (lessons 00, 02, 03, 04, 07, 09 and ``train_ddp.py``) is
tested there only by faking what torch reports. On a machine with GPUs this module runs those paths for
real, one line per check: PASS or FAIL, what it measured against which tolerance, and its time. A failing
check does not stop the next; the exit code is 1 if any failed. Without a GPU it says so and exits 0.

GPU kernels round differently from the CPU's, so results are compared with the CPU references within
1e-4 (1e-5 for a forward pass), as the lessons do. ``--record`` stores what the passing checks measured in
``notebooks/gpu_recorded.json``, which ``recorded`` reads back for a notebook's CPU path to show.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from dpedu import ddp, zero_memory
from dpedu.batchnorm_across_ranks import batchnorm_step, sync_batchnorm_on_this_machine
from dpedu.data_parallel import forward_on_gpus, wrap
from dpedu.datasets import digits
from dpedu.environment import environment_report, gpu_count
from dpedu.failures import RankFailedError
from dpedu.launcher import launch
from dpedu.mixed_precision import train_digits
from dpedu.models import mlp
from dpedu.training import largest_difference

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "notebooks" / "gpu_recorded.json"
FORKED_CUDA = "Cannot re-initialize CUDA in forked subprocess"  # torch's words for a rank forked after cuInit
GPU_NOTEBOOKS = ["00_welcome", "01_gd_sgd_minibatch", "02_data_parallelism_by_hand", "03_ddp_from_a_notebook",
                 "04_collectives_from_scratch", "07_batchnorm_and_randomness", "09_beyond_data_parallelism"]


class CheckFailed(Exception):
    """A check ran but measured something other than what the course promises."""


def expect(condition: bool, reason: str) -> None:
    if not condition:
        raise CheckFailed(reason)


# Inside ranks ------------------------------------------------------------------------------------------

def _device_name() -> str:
    return torch.cuda.get_device_name()


def _all_reduce_cuda_and_cpu() -> tuple[int, float, float]:
    on_gpu, on_cpu = (torch.tensor([dist.get_rank() + 1.0], device=d) for d in ("cuda", "cpu"))
    dist.all_reduce(on_gpu)  # through nccl
    dist.all_reduce(on_cpu)  # through gloo, in the same "cpu:gloo,cuda:nccl" group
    return torch.cuda.current_device(), on_gpu.item(), on_cpu.item()


def _ddp_on_my_gpu(ranks: int) -> dict:
    return ddp.train(steps=10, batch_size=64 // ranks, lr=0.1, device=f"cuda:{dist.get_rank()}")


def _fsdp_on_my_gpu() -> dict:
    return zero_memory.train("fsdp", steps=5, device=f"cuda:{dist.get_rank()}")


def _float16_and_float32() -> dict[str, float]:
    return {p: train_digits(p, steps=60, lr=0.3, hidden=64, device="cuda")[-1] for p in ("float32", "float16")}


# The checks: each returns the figure it measured, or raises ------------------------------------------------

def check_environment() -> str:
    report = environment_report()
    print(report)
    expect(report.backends["nccl"], "this torch has no nccl backend")
    expect(len(report.gpus) == gpu_count(), f"the report lists {len(report.gpus)} GPUs, NVML counts {gpu_count()}")
    expect(report.start_method == "forkserver", f"ranks would start by {report.start_method}, not forkserver")
    return f"{len(report.gpus)} GPU(s), nccl available, ranks start from a forkserver"


def is_forked_cuda_error(error: BaseException) -> bool:
    return isinstance(error, RankFailedError) and FORKED_CUDA in str(error)


def check_cuda_after_the_caller_initialised_it() -> str:
    torch.zeros(1, device="cuda")  # CUDA is up in this process, as after a notebook cell that used the GPU
    name = launch(_device_name, 1, backend="nccl")[0]
    try:  # the control: a rank forked from this process must fail, or the check could not fail either
        launch(_device_name, 1, backend="nccl", start_method="fork")
    except Exception as error:  # noqa: BLE001 - anything but torch's own refusal is a failure of the check
        expect(is_forked_cuda_error(error), f"the forked control failed otherwise: {error}")
    else:
        raise CheckFailed("a rank forked after CUDA was initialised used CUDA: the control did not fail")
    return f"a rank used {name}; a forked one failed with torch's {FORKED_CUDA!r}"


def check_nccl_all_reduce() -> str:
    n = gpu_count()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):  # launch relays what ranks print there, labelled
        results = launch(_all_reduce_cuda_and_cpu, n, backend="nccl")
    total = n * (n + 1) / 2
    expect(results == [(rank, total, total) for rank in range(n)], f"got {results}, want sums {total} on own GPUs")
    noise = [line for line in stderr.getvalue().splitlines() if line.startswith("[rank ")]
    expect(not noise, "ranks printed on stderr: " + "; ".join(noise[:3]))
    return f"{n} rank(s), each on its own GPU: CUDA and CPU sums {total:g}, nothing on stderr"


def train_ddp_result(stdout: str) -> tuple[float, bool]:
    """The parameter checksum and the replica check that ``notebooks/train_ddp.py`` prints on rank 0."""
    found = re.search(r"parameter checksum (-?\d+\.\d+).*replicas identical: (True|False)", stdout)
    if found is None:
        raise CheckFailed(f"train_ddp.py printed no result: {stdout[-300:]!r}")
    return float(found[1]), found[2] == "True"


def checksum(state: dict) -> float:
    return sum(v.double().sum().item() for v in state["model"].values())


def check_train_ddp_under_torchrun() -> str:
    ranks = min(2, gpu_count())
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "train_ddp.py", "--steps", "10", "--batch-size", str(64 // ranks)]
    run = subprocess.run(command, cwd=ROOT / "notebooks", capture_output=True, text=True, timeout=300)
    expect(run.returncode == 0, f"torchrun exited {run.returncode}: {run.stderr[-500:]}")
    expect("nccl" in run.stdout, f"the script did not run on nccl: {run.stdout[-300:]!r}")  # names its backend
    got, identical = train_ddp_result(run.stdout)
    want = checksum(ddp.train(steps=10, batch_size=64, lr=0.1, ddp=False))
    expect(identical and abs(got - want) < 1e-4, f"checksum {got:.6f} against the CPU's {want:.6f}; "
                                                  f"replicas identical: {identical}")
    return f"{ranks} rank(s) on nccl: checksum within 1e-4 of one CPU process, replicas identical"


def check_ddp_on_gpus() -> str:
    ranks = min(2, gpu_count())
    states = launch(_ddp_on_my_gpu, ranks, args=(ranks,), backend="nccl")
    gap = largest_difference(states[0]["model"], ddp.train(steps=10, batch_size=64, lr=0.1, ddp=False)["model"])
    expect(gap < 1e-4, f"largest difference from one CPU process {gap:.1e} (tolerance 1e-4)")
    return f"{ranks} rank(s) x {64 // ranks}: largest difference from one CPU process {gap:.1e} (tolerance 1e-4)"


def check_data_parallel() -> str:
    data = digits()
    X, y = data.X_train[:256], data.y_train[:256]
    cpu = mlp(64, 32, 10, seed=0)
    F.cross_entropy(cpu(X), y).backward()
    gpus = gpu_count()
    if gpus >= 2:
        on_gpus = mlp(64, 32, 10, seed=0).cuda()
        output, _ = forward_on_gpus(on_gpus, X.cuda(), list(range(gpus)))
        F.cross_entropy(output, y.cuda()).backward()
        gap = largest_difference([p.grad.cpu() for p in on_gpus.parameters()], [p.grad for p in cpu.parameters()])
        what = f"replicate/scatter/parallel_apply/gather on {gpus} GPUs: gradient gap"
    else:
        gap = (wrap(mlp(64, 32, 10, seed=0))(X.cuda()).cpu() - cpu(X)).abs().max().item()
        what = "nn.DataParallel on 1 GPU: output gap"
    expect(gap < 1e-5, f"{what} {gap:.1e} (tolerance 1e-5)")
    return f"{what} {gap:.1e} from one CPU model (tolerance 1e-5)"


def check_sync_batchnorm() -> str:
    kind, ranks = sync_batchnorm_on_this_machine([3, 5])
    reference = batchnorm_step([3, 5], "plain")
    gaps = []
    for key, want in reference.items():  # as lesson 07 compares: a slice of the batch per rank, or all of it
        if key in ("output", "input grad"):
            gap = (torch.cat([r[key] for r in ranks]) - want).abs().max()
        else:
            gap = max((r[key] - want).abs().max() for r in ranks)
        gaps.append((gap / want.abs().max()).item())
    name = "nn.SyncBatchNorm over nccl" if kind == "torch" else "dpedu.SyncBatchNorm (one GPU: gloo ranks)"
    expect(max(gaps) < 1e-4, f"{name}: largest relative gap {max(gaps):.1e} (tolerance 1e-4)")
    return f"{name} against the whole batch: largest relative gap {max(gaps):.1e} (tolerance 1e-4)"


def check_fsdp2() -> str:
    n = gpu_count()
    on_gpus = launch(_fsdp_on_my_gpu, n, backend="nccl")
    reference = launch(_ddp_on_cpu, n)
    gap = max((a - b).abs().max().item() for a, b in zip(on_gpus[0]["params"], reference[0]["params"], strict=True))
    expect(gap < 1e-4, f"FSDP2 on {n} GPU(s) against DDP on CPU ranks: {gap:.1e} (tolerance 1e-4)")
    return f"FSDP2 on {n} GPU(s), 5 Adam steps: within {gap:.1e} of DDP on CPU ranks (tolerance 1e-4)"


def _ddp_on_cpu() -> dict:
    return zero_memory.train("ddp", steps=5)


def check_float16() -> str:
    final = launch(_float16_and_float32, 1, backend="nccl")[0]
    gap = abs(final["float32"] - final["float16"])
    expect(gap < 0.02, f"loss after 60 steps: float32 {final['float32']:.3f}, float16 {final['float16']:.3f}")
    return f"loss after 60 steps: float32 {final['float32']:.3f}, float16 + GradScaler {final['float16']:.3f}"


def check_notebooks() -> str:
    paths = [f"notebooks/{name}.ipynb" for name in GPU_NOTEBOOKS]
    env = {**os.environ, "DPEDU_STATIC": "1", "DPEDU_QUIET": "1"}  # as ./course test runs them
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *paths], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=540)
    summary = (run.stdout.strip().splitlines() or ["no output"])[-1]
    expect(run.returncode == 0, f"pytest exited {run.returncode}: {summary}\n{run.stdout[-2000:]}")
    return f"{len(paths)} notebooks under nbval: {summary}"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("environment", check_environment),
    ("cuda-after-caller", check_cuda_after_the_caller_initialised_it),
    ("nccl-all-reduce", check_nccl_all_reduce),
    ("torchrun-train_ddp", check_train_ddp_under_torchrun),
    ("ddp-on-gpus", check_ddp_on_gpus),
    ("data-parallel", check_data_parallel),
    ("sync-batchnorm", check_sync_batchnorm),
    ("fsdp2", check_fsdp2),
    ("float16-gradscaler", check_float16),
    ("notebooks", check_notebooks),
]


def run_checks(checks: Sequence[tuple[str, Callable[[], str]]]) -> dict[str, tuple[bool, str]]:
    """Run every check in order, print one line for each, and return {name: (passed, figure or reason)}."""
    outcomes = {}
    for name, check in checks:
        start = time.monotonic()
        try:
            passed, text = True, check()
        except Exception as error:  # noqa: BLE001 - a failing check is reported, and the next one runs
            passed, text = False, str(error) if isinstance(error, CheckFailed) else f"{type(error).__name__}: {error}"
        first, *rest = text.splitlines() or [""]
        print(f"{'PASS' if passed else 'FAIL'}  {name:<20} {first}  ({time.monotonic() - start:.1f} s)", flush=True)
        for line in rest[:20] if not passed else []:
            print(f"      {line}")
        outcomes[name] = (passed, text)
    return outcomes


def record(outcomes: dict[str, tuple[bool, str]], path: Path = RECORD) -> None:
    """Store what the passing checks measured, with the GPU and torch that measured it."""
    gpu = ", ".join(sorted({torch.cuda.get_device_name(i) for i in range(gpu_count())}))
    date = datetime.date.today().isoformat()
    entries = {name: {"gpu": gpu, "torch": torch.__version__, "date": date, "text": text}
               for name, (passed, text) in outcomes.items() if passed and name != "notebooks"}
    path.write_text(json.dumps(entries, indent=1, ensure_ascii=False) + "\n")


def recorded(check: str, path: Path = RECORD) -> dict | None:
    """What ``check`` measured on a GPU machine, as ``--record`` stored it; None if nothing was stored."""
    if not path.exists():
        return None
    return json.loads(path.read_text()).get(check)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./course check-gpu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-notebooks", action="store_true", help="skip running the GPU notebooks under nbval")
    parser.add_argument("--record", action="store_true", help=f"store what passed in {RECORD.relative_to(ROOT)}")
    options = parser.parse_args(argv)
    if gpu_count() == 0:  # asks NVML: nothing initialised, nothing to clean up
        print(environment_report())
        print("No GPU here (torch.cuda.device_count() is 0), so there is nothing to check: the course's GPU paths "
              "are tested on CPU by faking what torch reports. Run this on a machine with GPUs.")
        return 0
    checks = [c for c in CHECKS if not (options.no_notebooks and c[0] == "notebooks")]
    outcomes = run_checks(checks)
    failed = [name for name, (passed, _) in outcomes.items() if not passed]
    print(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    if options.record:
        record(outcomes)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
