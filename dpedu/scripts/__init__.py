"""The course's command-line programs, shipped inside dpedu so that a lesson runs wherever its notebook is
opened: in a clone, or alone in Colab, Kaggle or a JupyterHub with dpedu installed from a wheel.

Each is started as a module, by the same launchers a script file would be given to:
    torchrun --standalone --nproc-per-node=2 -m dpedu.scripts.train_ddp --steps 10   (lessons 03, 09)
    torchrun --standalone --nproc-per-node=2 -m dpedu.scripts.train_addition        (lesson 13)
    torchrun ... -m dpedu.scripts.train_resumable                                    (lesson 10)
    torchrun --nnodes=1:2 ... -m dpedu.scripts.train_elastic                         (lesson 10)
    mpiexec -n 2 python -m dpedu.scripts.mpi_allreduce                               (lesson 09)
    mpiexec -n 2 python -m dpedu.scripts.mpi_torch                                   (lesson 09)
    sbatch slurm_train.sbatch (the file ``path("slurm_train.sbatch")``)               (lesson 09)
``python -m dpedu.scripts.NAME --help`` prints a script's usage. To change one, copy it out
(``path("train_ddp.py")``) and run the copy by its file name instead of ``-m``.

Scripts may import any part of dpedu; no module of dpedu imports them (lessons 10 and 13 import train_elastic
and train_addition only to show their source).
"""

from pathlib import Path

__all__ = ["path"]


def path(name: str) -> Path:
    """The installed file ``name`` of this folder (a script, the Slurm batch file, a recorded output)."""
    if not isinstance(name, str) or "/" in name or "\\" in name:
        raise ValueError(f"name must be a file name of dpedu/scripts, such as 'train_ddp.py', got {name!r}")
    found = Path(__file__).with_name(name)
    if not found.is_file():
        choices = sorted(p.name for p in found.parent.iterdir() if p.suffix in (".py", ".sbatch", ".txt")
                         and p.name != "__init__.py")
        raise ValueError(f"name must be one of {choices}, got {name!r}")
    return found
