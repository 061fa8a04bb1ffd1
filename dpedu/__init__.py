"""dpedu: the helper package behind the data-parallel training course.

Public API (stable names that notebooks and outside checks rely on):
- ``launch``: run a function on several ranks from a notebook cell (lesson 00 on).
- ``RankFailedError``, ``LaunchTimeoutError``: what ``launch`` raises when a rank fails or hangs.
- ``environment_report``: versions, cores, GPUs and distributed backends of this machine.
- ``delayed_gd``: gradient descent with gradients a fixed number of steps stale (lesson 05).
- ``simple_noise_scale``, ``two_batch_noise_scale``: the gradient noise scale B_simple (lesson 06).
- ``use_course_style``: the course's matplotlib style.
"""

from dpedu.environment import environment_report
from dpedu.launcher import LaunchTimeoutError, RankFailedError, launch
from dpedu.noise_scale import simple_noise_scale, two_batch_noise_scale
from dpedu.plotting import use_course_style
from dpedu.staleness import delayed_gd

__all__ = ["launch", "RankFailedError", "LaunchTimeoutError", "environment_report", "use_course_style",
           "delayed_gd", "simple_noise_scale", "two_batch_noise_scale"]
