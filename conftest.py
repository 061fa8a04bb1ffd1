"""What every pytest run from the repository needs, however it is started.

``./course test``, a plain ``pytest --nbval notebooks/`` (the way nbval documents it) and the GPU
self-check all load this file, so the notebooks' kernels, which inherit this process's environment,
run the same way under each:
- ``DPEDU_STATIC``: explorers draw a static figure instead of waiting for a slider;
- ``DPEDU_QUIET``: launch's one-time note on how it starts ranks (spawn on macOS) stays out of the
  stored outputs; ``environment_report()`` says it instead.
The test configuration itself (``--nbval``, the sanitizer, timeouts) is in pyproject.toml.
"""

import os

os.environ.setdefault("DPEDU_STATIC", "1")
os.environ.setdefault("DPEDU_QUIET", "1")
