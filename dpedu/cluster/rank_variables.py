"""Who am I? Each launcher tells a process its rank in its own environment variables (lesson 09).

``init_process_group`` reads torch's names (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``);
torchrun sets them. ``mpiexec`` and ``srun`` set their own, so a script started by them maps theirs
to torch's first. With this mapping one script runs unchanged under torchrun, MPICH, Open MPI and Slurm.
"""

from __future__ import annotations

from collections.abc import Mapping

# (launcher, its rank, its world size, its rank on this node, how many ranks run on this node), in the
# order they are tried: torchrun first, because torchrun inside an srun or mpiexec job sees the outer
# launcher's variables too.
LAUNCHERS = (
    ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("MPICH", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"),
)


def torch_variables(environ: Mapping[str, str], master_addr: str = "127.0.0.1",
                    master_port: int | None = None) -> tuple[str, dict[str, str]]:
    """The launcher that started this process, and torch's variables from its own.

    Returns ``(launcher name, {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})``.
    ``MASTER_ADDR``/``MASTER_PORT`` already in ``environ`` win over the arguments: on a cluster the job
    script says where rank 0 listens. ``master_addr`` is used only when every rank runs on this node
    (the launcher's local size equals the world size): on several nodes, a default address would send
    the other nodes' ranks to themselves, a hang. Raises ``ValueError``, naming the variable, when no
    launcher's variables are there (plain ``python``), or when they are missing or not a valid rank.
    """
    for name, rank_key, size_key, local_key, local_size_key in LAUNCHERS:
        if rank_key in environ and size_key in environ:
            rank, size = _count(environ, rank_key), _count(environ, size_key)
            if not 0 <= rank < size:
                raise ValueError(f"{rank_key}={rank} is not a rank of {size_key}={size}")
            if local_key not in environ:
                raise ValueError(f"started by {name}, but {local_key} (the rank on this node) is not set")
            port = environ.get("MASTER_PORT", None if master_port is None else str(master_port))
            if port is None:
                raise ValueError(f"started by {name}, but MASTER_PORT is not set and no master_port was given")
            one_node = local_size_key in environ and _count(environ, local_size_key) == size
            if "MASTER_ADDR" not in environ and not one_node:
                raise ValueError(f"started by {name} on more than one node ({local_size_key} is not {size}), but "
                                 "MASTER_ADDR is not set: export rank 0's host name in the job script")
            return name, {"RANK": str(rank), "WORLD_SIZE": str(size), "LOCAL_RANK": str(_count(environ, local_key)),
                          "MASTER_ADDR": environ.get("MASTER_ADDR", master_addr), "MASTER_PORT": port}
    known = ", ".join(f"{rank_key}/{size_key} ({name})" for name, rank_key, size_key, *_ in LAUNCHERS)
    raise ValueError(f"no launcher's rank variables found: expected one of {known}; start the script with "
                     "torchrun, mpiexec or srun")


def _count(environ: Mapping[str, str], key: str) -> int:
    try:
        return int(environ[key])
    except ValueError:
        raise ValueError(f"{key} must be a whole number, got {environ[key]!r}") from None
