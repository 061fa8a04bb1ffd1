"""dpedu: the helper package behind the data-parallel training course.

Public API (stable names that notebooks and outside checks rely on):
- ``launch``: run a function on several ranks from a notebook cell (lesson 00 on).
- ``RankFailedError``, ``LaunchTimeoutError``: what ``launch`` raises when a rank fails or hangs.
- ``free_port``: a free local port for a rendezvous (lesson 03's torchrun cells).
- ``run_together``: run several commands at once (torchrun agents, mpirun), none left behind (lessons 03, 09, 10).
- ``leftover_processes``: the live processes a cell left behind, to assert there are none.
- ``gpu_count``: how many GPUs torch can use, counted without initialising CUDA.
- ``ring_all_reduce``: all-reduce written from point-to-point messages, the ring (lesson 04).
- ``MiniDDP``: DistributedDataParallel from scratch, gradient buckets overlapped with backward (lesson 05).
- ``environment_report``: versions, cores, GPUs, distributed backends, and how ranks start here.
- ``delayed_gd``: gradient descent with gradients a fixed number of steps stale (lesson 06).
- ``simple_noise_scale``, ``two_batch_noise_scale``: the gradient noise scale B_simple (lesson 07).
- ``SyncBatchNorm``: BatchNorm over the global batch of all ranks, written with all-reduce (lesson 08).
- ``use_course_style``: the course's matplotlib style.

The rest lives in one folder per topic, each module named for its concept and readable in
one sitting (each package's docstring lists its modules):
- ``sgd``: lessons 01, 06, 07; ``data_parallel``: lessons 02 to 05, 08, 09; ``cluster``: lessons 09, 10;
  ``beyond``: lessons 11 and 12; ``training_run``: lesson 13. These content packages never import one another.
- ``scripts``: the programs lessons start with torchrun, mpiexec or sbatch, run as modules
  (``torchrun -m dpedu.scripts.train_ddp``) so that a lesson opened alone finds them.
- ``runtime``: how ranks and commands are started, supervised and reaped (what every lesson uses, none teaches);
  ``notebook``: ``show_source``, explorers, plotting, the course map, every notebook's first cell.
- At the top: ``datasets`` and ``models`` (what every part trains on), ``exercises.lessonNN`` (the exercises'
  checks), ``gpu_check`` (``./course check-gpu``).

Training functions come in two shapes. A *trainer* takes what is trained, then the loss and the data, then
every setting by keyword (``sgd.training.train``, ``sgd.hogwild.train``). An *experiment* builds its own
model and data, so it takes only settings by keyword, or first the one thing it compares
(``data_parallel.digits_ddp.train``, ``data_parallel.equivalence.train``, ``beyond.zero_memory.train(kind)``,
``beyond.zero_one.train_zero_one``, ``beyond.mixed_precision.train_digits(precision)``,
``beyond.model_parallel.train``).
"""

# Raised whenever a file of dpedu changes (tests/test_packaging.py fails on a forgotten raise): pip installs a
# wheel over an installed dpedu only if its version differs, and every notebook's first cell asks for this one or
# later, so a learner with an older dpedu is told to reinstall, not left to fail mid-lesson.
__version__ = "0.2.8"

from dpedu.data_parallel.collectives import ring_all_reduce
from dpedu.data_parallel.mini_ddp import MiniDDP
from dpedu.data_parallel.sync_batchnorm import SyncBatchNorm
from dpedu.notebook.plotting import use_course_style
from dpedu.runtime.commands import run_together
from dpedu.runtime.environment import environment_report
from dpedu.runtime.failures import LaunchTimeoutError, RankFailedError, leftover_processes
from dpedu.runtime.launcher import launch
from dpedu.runtime.rendezvous import free_port
from dpedu.runtime.start_methods import gpu_count
from dpedu.sgd.noise_scale import simple_noise_scale, two_batch_noise_scale
from dpedu.sgd.staleness import delayed_gd

__all__ = ["launch", "RankFailedError", "LaunchTimeoutError", "free_port", "run_together", "leftover_processes",
           "gpu_count", "ring_all_reduce", "MiniDDP", "environment_report", "use_course_style", "delayed_gd",
           "simple_noise_scale", "two_batch_noise_scale", "SyncBatchNorm"]
