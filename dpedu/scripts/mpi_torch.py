"""torch.distributed (gloo) started by mpiexec: ``mpiexec -n 2 python -m dpedu.scripts.mpi_torch``.

mpiexec gives each process its rank in its own variables (MPICH: PMI_RANK/PMI_SIZE, Open MPI:
OMPI_COMM_WORLD_RANK/SIZE, Slurm's srun: SLURM_PROCID/SLURM_NTASKS); torch reads RANK and WORLD_SIZE.
This script maps one to the other and then is an ordinary torch.distributed program. MASTER_ADDR is
rank 0's machine (here 127.0.0.1) and MASTER_PORT a port free there: both come from the job's environment.
"""

import os

import torch
import torch.distributed as dist

from dpedu.cluster.rank_variables import torch_variables

launcher, variables = torch_variables(os.environ)
os.environ.update(variables)
dist.init_process_group("gloo")  # reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
try:
    rank = dist.get_rank()
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    line = (f"started by {launcher}: RANK={variables['RANK']} WORLD_SIZE={variables['WORLD_SIZE']} "
            f"LOCAL_RANK={variables['LOCAL_RANK']}; all_reduce over gloo -> {value.item():g}")
    lines = [None] * dist.get_world_size()
    dist.all_gather_object(lines, line)  # rank 0 prints everyone's line, in rank order
    if rank == 0:
        print("\n".join(lines))
finally:
    dist.destroy_process_group()
