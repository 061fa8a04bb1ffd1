"""Allreduce with mpi4py, on NumPy arrays and on torch tensors: lesson 09.

    mpiexec -n 2 python -m dpedu.scripts.mpi_allreduce


mpiexec starts the processes; MPI itself tells each its rank (no MASTER_ADDR, no port to agree on).
A torch tensor on the CPU shares its memory with ``tensor.numpy()``, so MPI reduces it in place.
"""

import numpy as np
import torch
from mpi4py import MPI

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()

# NumPy: the buffer-based, upper-case methods move raw memory, as fast as C (lower-case ones pickle objects)
mine = np.arange(4, dtype=np.float64) + 10 * rank
total = np.empty_like(mine)
world.Allreduce(mine, total, op=MPI.SUM)

# torch: in place, through the NumPy view of the same memory
tensor = torch.full((3,), float(rank + 1))
world.Allreduce(MPI.IN_PLACE, tensor.numpy(), op=MPI.SUM)

# Rank 0 prints every rank's line, in rank order (the lower-case gather pickles Python objects)
lines = world.gather(f"rank {rank} of {size}: numpy {mine.tolist()} -> {total.tolist()}, torch -> {tensor.tolist()}")
if rank == 0:
    print(f"MPI library: {MPI.Get_library_version().split()[0]}")
    print("\n".join(lines))
