"""dpedu: the helper package behind the data-parallel training course.

Public API (stable names that notebooks and outside checks rely on):
- ``launch``: run a function on several ranks from a notebook cell (lesson 00 on).
- ``RankFailedError``, ``LaunchTimeoutError``: what ``launch`` raises when a rank fails or hangs.
- ``free_port``: a free local port for a rendezvous (lesson 03's torchrun cells).
- ``ring_all_reduce``: all-reduce written from point-to-point messages, the ring (lesson 04).
- ``MiniDDP``: DistributedDataParallel from scratch, gradient buckets overlapped with backward (lesson 04).
- ``environment_report``: versions, cores, GPUs, distributed backends, and how ranks start here.
- ``delayed_gd``: gradient descent with gradients a fixed number of steps stale (lesson 05).
- ``simple_noise_scale``, ``two_batch_noise_scale``: the gradient noise scale B_simple (lesson 06).
- ``SyncBatchNorm``: BatchNorm over the global batch of all ranks, written with all-reduce (lesson 07).
- ``use_course_style``: the course's matplotlib style.

The lessons import the rest from the module of its concept, each readable in one sitting:
``launcher`` (``start_methods``, ``rendezvous``, ``failures``), ``commands`` (torchrun/mpirun from a cell),
``collectives``, ``cost_model``, ``mini_ddp``, ``ddp_timing``, ``compression``, ``data_parallel``, ``ddp``,
``hogwild``, ``training``, ``least_squares``, ``staleness``, ``noise_scale``, ``noisy_quadratic``, ``datasets``,
``models``, ``notebook``, ``plotting``, ``course``, ``diagrams``, ``sync_batchnorm``, ``batchnorm_across_ranks``,
``rank_variables``, ``slurm``, ``troubleshooting``, ``checkpoints`` (lesson 08), ``model_parallel``, ``pipeline``,
``zero_memory``, ``mixed_precision``, ``parallelism_plan`` (lesson 09)
and ``exercises.lessonNN``. Their training loops share one convention: what is trained, then the loss and
the data, then every setting by keyword.
"""

from dpedu.collectives import ring_all_reduce
from dpedu.environment import environment_report
from dpedu.failures import LaunchTimeoutError, RankFailedError
from dpedu.launcher import launch
from dpedu.mini_ddp import MiniDDP
from dpedu.noise_scale import simple_noise_scale, two_batch_noise_scale
from dpedu.plotting import use_course_style
from dpedu.rendezvous import free_port
from dpedu.staleness import delayed_gd
from dpedu.sync_batchnorm import SyncBatchNorm

__all__ = ["launch", "RankFailedError", "LaunchTimeoutError", "free_port", "ring_all_reduce", "MiniDDP",
           "environment_report", "use_course_style", "delayed_gd", "simple_noise_scale", "two_batch_noise_scale",
           "SyncBatchNorm"]
