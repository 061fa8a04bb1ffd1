"""Checks for lesson 09's exercises: torchrun's numbering, a multi-node torchrun command, launcher variables,
and what a link costs."""

from __future__ import annotations

import io
import shlex
from collections.abc import Callable
from contextlib import redirect_stderr

from dpedu._validate import real, whole
from dpedu.cluster.rank_variables import torch_variables
from dpedu.data_parallel.cost_model import LINK_BANDWIDTH, ring_time
from dpedu.exercises import close, number, verdict


def global_rank(nproc_per_node: int, group_rank: int, local_rank: int, answer: int) -> bool:
    """Which ``RANK`` does torchrun give worker ``local_rank`` of node ``group_rank``, with
    ``nproc_per_node`` workers per node? (Part 1 asserts the rule on torchrun's own output.)"""
    whole("nproc_per_node", nproc_per_node)
    whole("group_rank", group_rank, minimum=0)
    whole("local_rank", local_rank, minimum=0, maximum=nproc_per_node - 1)
    answer = number(answer)
    truth = group_rank * nproc_per_node + local_rank
    return verdict(answer == truth, "nodes are numbered first, and each node holds LOCAL_WORLD_SIZE ranks")


# What each launcher sets in a process it starts, and a few it does not; the last one has no launcher
_ENVIRONMENTS = (
    {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
     "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "node1"},
    {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2", "HOME": "/home/me"},
    {"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NNODES": "2", "MASTER_ADDR": "node1"},
    {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "SLURM_PROCID": "1",
     "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"},
)


def rank_and_size(my_function: Callable[[dict[str, str]], tuple[int, int]]) -> bool:
    """Does ``my_function(environ) -> (rank, world_size)`` read the rank and the world size that
    torchrun, Open MPI, MPICH or Slurm set, as ``dpedu.cluster.rank_variables`` does (torchrun first)?"""
    if not callable(my_function):
        raise TypeError(f"my_function must be a function of the environment, got {my_function!r}")
    for environ in _ENVIRONMENTS:
        _, variables = torch_variables(environ, master_port=29500)
        truth = (int(variables["RANK"]), int(variables["WORLD_SIZE"]))
        try:
            answer = my_function(dict(environ))
        except Exception as error:  # noqa: BLE001 - a learner's bug is an answer to show, not a crash
            return verdict(False, f"for {environ} your function raised {type(error).__name__}: {error}")
        if answer != truth:
            return verdict(False, f"for {environ} it returned {answer!r}, expected {truth} (as ints)")
    return verdict(True, "")


def bucket_milliseconds(link: str, world_size: int, answer: float) -> bool:
    """How many milliseconds does the α-β model's bandwidth term give for all-reducing one 25 MiB bucket
    (25 · 2**20 bytes, DDP's ``bucket_cap_mb=25``) in a ring of ``world_size`` ranks over ``link`` (a key
    of ``LINK_BANDWIDTH``)? Within 2 %."""
    if link not in LINK_BANDWIDTH:
        raise ValueError(f"link must be one of {sorted(LINK_BANDWIDTH)}, got {link!r}")
    whole("world_size", world_size, minimum=2)
    truth = ring_time(25 * 2**20, 0.0, 1 / LINK_BANDWIDTH[link], world_size) * 1e3
    return verdict(close(answer, truth, 0.02), "each rank sends 2(p - 1)/p of the bucket (25 MiB = 25 · 2**20 "
                                              "bytes), at the link's bandwidth in bytes per second; in ms")


def gradient_parameters(link: str, world_size: int, seconds: float, answer: float) -> bool:
    """How many float32 parameters can a ring of ``world_size`` ranks all-reduce in ``seconds`` over ``link``
    (a key of ``LINK_BANDWIDTH``), by the α-β model's bandwidth term? Within 2 %."""
    if link not in LINK_BANDWIDTH:
        raise ValueError(f"link must be one of {sorted(LINK_BANDWIDTH)}, got {link!r}")
    whole("world_size", world_size, minimum=2)
    real("seconds", seconds, above=0)
    truth = seconds / ring_time(4, 0.0, 1 / LINK_BANDWIDTH[link], world_size)  # the bandwidth term grows with bytes
    return verdict(close(answer, truth, 0.02), "each rank sends 2(p - 1)/p of the gradients, 4 bytes a parameter, "
                                              "at the link's bandwidth in bytes per second")


def torchrun_command(answer: str) -> bool:
    """The command node 2 runs in a job of 4 nodes with 8 GPUs each, its c10d rendezvous served on ``node1``,
    port 29400, running ``-m dpedu.scripts.train_ddp``. Read by torchrun's own argument parser."""
    from torch.distributed.run import get_args_parser  # torchrun's parser, imported only when checking

    if not isinstance(answer, str):
        raise TypeError(f"answer must be the command as one string, got {answer!r}")
    words = shlex.split(answer)
    while words and "=" in words[0] and not words[0].startswith("-"):  # NAME=value before the command
        words = words[1:]
    if words[:1] and words[0].rsplit("/", 1)[-1] == "torchrun":
        words = words[1:]
    elif words[1:3] == ["-m", "torch.distributed.run"]:  # what the torchrun command runs, from any python
        words = words[3:]
    else:
        return verdict(False, "start with torchrun (or python -m torch.distributed.run)")
    said = io.StringIO()
    try:
        with redirect_stderr(said):
            args = get_args_parser().parse_args(words)
    except SystemExit:
        refusal = said.getvalue().strip().splitlines()[-1] if said.getvalue().strip() else "no script"
        return verdict(False, f"torchrun would refuse it: {refusal.split('error: ', 1)[-1]}")
    faults = [fault for fault, wrong in (
        ("--nnodes: the job's 4 nodes", args.nnodes not in ("4", "4:4")),
        ("--nproc-per-node: a worker per GPU, 8", args.nproc_per_node not in ("8", "gpu", "auto")),
        ("--rdzv-backend=c10d, without --standalone (that is one node on its own)",
         args.rdzv_backend != "c10d" or args.standalone),
        ("--rdzv-endpoint: node1, port 29400", args.rdzv_endpoint not in ("node1:29400", "node1")),  # c10d's default
        ("-m dpedu.scripts.train_ddp: the script as a module",
         not args.module or args.training_script != "dpedu.scripts.train_ddp"),
    ) if wrong]
    return verdict(not faults, "every node runs the same line, and this one's rendezvous numbers the nodes (no "
                               f"--node-rank needed); look again at {'; '.join(faults)}")
