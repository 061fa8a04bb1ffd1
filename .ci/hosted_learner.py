"""CI's hosted-learner pass: every lesson opened alone, as Colab, Kaggle or a JupyterHub give it.

A fresh environment holds only what a hosted image has (Jupyter, ipykernel, torch, numpy, matplotlib,
scikit-learn) and the test runners (pytest, nbval, pytest-timeout). dpedu comes from the wheel that
`./course wheel` builds, never from the clone:
1. lesson 00 runs first, copied alone into an empty folder with the wheel beside it, dpedu not installed
   and COLAB_RELEASE_TAG set: its first cell must install dpedu itself, quietly, and leave torch as it was;
2. every other notebook is copied alone into an empty folder of its own and run by strict nbval there,
   with no conftest.py, no images/ and no scripts beside it;
3. with --unit-tests, the unit tests whose subject is torch's own behaviour (ON_EVERY_TORCH) run in the same
   environment, ranks started as dpedu chooses (forked, on Linux without GPUs): a Linux learner's `./course test`
   on PyPI's build; the others (ONCE) are pass 1's alone.
Run by .ci/run; by hand: python3 .ci/hosted_learner.py --python python3.13 --torch 2.15.0 [--unit-tests]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTED_IMAGE = ["jupyterlab", "ipykernel", "numpy", "matplotlib", "scikit-learn"]
RUNNERS = ["pytest", "nbval", "pytest-timeout"]
# Each unit test file is one of two kinds (tests/test_ci_passes.py checks that every file is named in exactly one):
# - ON_EVERY_TORCH: what it checks goes through an API whose behaviour changes between torch releases (DDP and
#   its hooks, FSDP2, DTensor, pipelining, torch.compile, torchrun and elastic agents, DataLoader and
#   DistributedSampler, autocast and GradScaler, CUDA and precision reports, torch's own error messages):
#   run here on the newest torch as well as by pass 1;
# - ONCE: what it checks is dpedu's own logic over tensor arithmetic every release computes alike, the process
#   handling of dpedu.launch and its warm ranks (Python's multiprocessing; every lesson here launches ranks
#   from a forkserver), the course's scripts (each runs in a lesson of passes 1, 2 and 3: under torchrun
#   train_ddp in 03 and 09, train_resumable and train_elastic in 10, train_addition in 13a, train_accelerate in
#   14 (and under accelerate launch), mpi_torch in 09 (and under mpiexec); mpi_allreduce under mpiexec in 09;
#   what their tests add is the scripts' own checks and messages), or the repository's files: pass 1 alone runs it.
ON_EVERY_TORCH = ["tests/beyond", "tests/data_parallel", "tests/frameworks", "tests/training_run",
                  "tests/cluster/test_checkpoints.py", "tests/cluster/test_circulating_code.py",
                  "tests/cluster/test_rank_variables.py", "tests/cluster/test_troubleshooting.py",
                  "tests/runtime/test_autograd_and_fork.py", "tests/runtime/test_environment.py",
                  "tests/runtime/test_float32_precision.py", "tests/runtime/test_gpus.py",
                  "tests/runtime/test_stderr.py", "tests/runtime/test_traffic.py",
                  "tests/test_gpu_check.py", "tests/test_gpu_counting.py", "tests/test_models_and_datasets.py"]
ONCE = ["tests/claims", "tests/exercises", "tests/notebook", "tests/scripts", "tests/sgd",
        "tests/cluster/test_slurm.py", "tests/runtime/test_launcher.py", "tests/runtime/test_commands.py",
        "tests/runtime/test_machine_load.py", "tests/runtime/test_processes.py", "tests/runtime/test_rendezvous.py",
        "tests/runtime/test_start_methods.py", "tests/runtime/test_warm_ranks.py", "tests/test_browser.py",
        "tests/test_ci_passes.py", "tests/test_course_script.py", "tests/test_layout.py", "tests/test_packaging.py",
        "tests/test_portable.py", "tests/test_stored_outputs.py", "tests/test_timing_claims.py"]
# What the clone's conftest.py and pyproject.toml give nbval there, given here by hand (nothing of the clone is
# beside the notebooks): static explorers and no progress bars, as the stored outputs were recorded.
STORED_AS = {"DPEDU_STATIC": "1", "DPEDU_QUIET": "1"}


def run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, **kwargs)


def environment(venv: Path, python: str, torch: str) -> Path:
    """The hosted-like environment with ``torch`` (PyPI's default build), dpedu not installed; its python."""
    if not (venv / "bin" / "python").exists():
        run([python, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    # A learner's pip has no local cap on torch (PIP_CONSTRAINT=/dev/null lifts one where a machine sets it),
    # and never a "+cpu" wheel a local cache may offer: PyPI's default build, as a hosted image has.
    pip_env = {**os.environ, "PIP_CONSTRAINT": "/dev/null"}
    run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", f"torch=={torch}",
         f"torch!={torch}+cpu", *HOSTED_IMAGE, *RUNNERS], env=pip_env)
    subprocess.run([str(py), "-m", "pip", "uninstall", "--quiet", "--yes", "dpedu"], check=False)
    return py


def torch_version(py: Path) -> str:
    return subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def nbval(py: Path, notebooks: list[Path], env: dict[str, str]) -> None:
    """Strict nbval on ``notebooks``, each in its own folder below one work folder, with the course's sanitizer
    and timeouts. The work folder holds its own pytest.ini, so that pytest finds no configuration and no
    conftest.py of the clone."""
    work = notebooks[0].parents[1]
    (work / "pytest.ini").write_text("[pytest]\n")
    shutil.copy2(ROOT / "tests" / "nbval_sanitize.cfg", work)
    run([str(py), "-m", "pytest", "-p", "no:cacheprovider", "--nbval", "--nbval-cell-timeout=240", "--timeout=300",
         "--nbval-sanitize-with", "nbval_sanitize.cfg", *(str(n.relative_to(work)) for n in notebooks)],
        env={**os.environ, **STORED_AS, **env}, cwd=work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="python3", help="the interpreter the environment is made from")
    parser.add_argument("--torch", required=True, help="the torch release a hosted image has, e.g. 2.15.0")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-hosted")
    parser.add_argument("--unit-tests", action="store_true", help="also run the unit tests in that environment")
    parser.add_argument("--environment-only", action="store_true",
                        help="only build the environment (CI builds it while the pass before runs)")
    options = parser.parse_args()
    if options.environment_only:
        environment(options.venv, options.python, options.torch)
        return 0

    run([str(ROOT / "course"), "wheel"], cwd=ROOT)
    version = re.search(r'^__version__ = "(.+)"$', (ROOT / "dpedu" / "__init__.py").read_text(), re.M).group(1)
    wheel = ROOT / "dist" / f"dpedu-{version}-py3-none-any.whl"  # dist/ may hold older ones
    py = environment(options.venv, options.python, options.torch)
    before = torch_version(py)
    print(f"=== hosted learner: torch {before}, dpedu from {wheel.name}, each notebook alone", flush=True)

    work = Path(tempfile.mkdtemp(prefix="hosted-learner-"))
    try:
        folders = {}
        for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
            folder = work / notebook.stem
            folder.mkdir()
            folders[notebook.stem] = shutil.copy2(notebook, folder)
        shutil.copy2(wheel, work / "00_welcome")  # uploaded next to the notebook, as a Colab learner would
        # The cell's pip must behave as a learner's: no local cap on torch that would make it "fix" torch.
        nbval(py, [Path(folders.pop("00_welcome"))], {"COLAB_RELEASE_TAG": "ci-hosted-learner",
                                                      "PIP_CONSTRAINT": "/dev/null"})
        where = subprocess.run([str(py), "-c", "import dpedu; print(dpedu.__file__)"], check=True,
                               capture_output=True, text=True, cwd=work).stdout.strip()
        assert Path(where).is_relative_to(options.venv.resolve()), f"dpedu imported from {where}, not the wheel"
        assert torch_version(py) == before, f"installing dpedu changed torch {before} to {torch_version(py)}"
        print(f"lesson 00's first cell installed dpedu ({where}); torch still {before}", flush=True)
        nbval(py, [Path(path) for path in folders.values()], {})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if options.unit_tests:
        # One after another, not over the cores as pass 1 runs them: spread over 2 workers here (torch 2.15, ranks
        # from a forkserver), a 4-rank launch whose outsiders return at once failed, rank 0 still joining the group.
        # Ranks as dpedu chooses, not the forkserver the lessons used above: forked, on a CUDA build, is what a Linux
        # learner's `./course test` does (a torch.compile before a process's first backward spoils forking there:
        # tests/runtime/test_autograd_and_fork.py, and tests/conftest.py's first backward). The forkserver's own
        # tests (tests/runtime/test_launcher.py, pass 1) and the lessons above keep it covered.
        chosen = {name: value for name, value in os.environ.items() if name != "DPEDU_START_METHOD"}
        run([str(py), "-m", "pytest", *ON_EVERY_TORCH], cwd=ROOT, env=chosen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
