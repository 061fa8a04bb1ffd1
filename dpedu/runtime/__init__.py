"""The machinery the lessons use but do not teach: how ranks and tools are started, supervised and reaped.

- ``launcher``: ``dpedu.launch``, run a function on N ranks from a notebook cell (``_rank``: inside one rank).
- ``start_methods``: fork, forkserver or spawn, and ``gpu_count`` (every part of dpedu counts GPUs with it,
  so a test fakes a GPU machine by patching it alone).
- ``rendezvous``: free ports and the loopback interface for a process group.
- ``failures``: the first failing rank, where stuck ranks were waiting, leftover processes.
- ``processes``: start and stop process groups safely; the one supervision loop every started process
  is waited for with (deadline, Ctrl-C, failure).
- ``commands``: torchrun, mpirun and other programs run together from a cell.
- ``environment``: the machine report of lesson 00.

Nothing here imports the course's content packages.
"""
