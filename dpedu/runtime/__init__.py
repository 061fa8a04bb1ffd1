"""The machinery the lessons use but do not teach: how ranks and tools are started, supervised and reaped.

- ``launcher``: ``dpedu.launch``, run a function on N ranks from a notebook cell (``_rank``: inside one rank).
- ``start_methods``: fork, forkserver or spawn, and ``gpu_count`` (every part of dpedu counts GPUs with it,
  so a test fakes a GPU machine by patching it alone).
- ``gpus``: which GPUs torch can use, found without starting CUDA here (NVML, CUDA in a child process, the
  system's own list), and what multi-GPU runs need of the machine (``/dev/shm``, the driver, TF32 settings).
- ``rendezvous``: free ports and the loopback interface for a process group.
- ``failures``: the first failing rank, where stuck ranks were waiting, leftover processes.
- ``processes``: start, supervise and stop process groups safely: the one ``has_exited``, the one
  ``Supervisor`` every started process is waited for with (deadline, Ctrl-C, failure), ``stop_and_reap``.
- ``commands``: torchrun, mpirun and other programs run together from a cell.
- ``float32_precision``: full float32 on GPUs, no TF32, for results compared with the CPU's (lessons 02-13).
- ``traffic``: the bytes this rank hands to ``torch.distributed``'s calls (lessons 04, 05 and 11).
- ``environment``: the machine report of lesson 00.
- ``stderr``: what torch's C++ side writes to standard error, caught (lesson 05).
- ``machine_load``: how much of the cores other programs leave, and timing claims judged by it (lessons 04-13).

Nothing here imports the course's content packages.
"""
