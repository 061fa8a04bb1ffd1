"""What every pytest run from the repository needs, however it is started.

``./course test``, a plain ``pytest --nbval notebooks/`` (the way nbval documents it) and the GPU
self-check all load this file, so the notebooks' kernels, which inherit this process's environment,
run the same way under each:
- ``DPEDU_STATIC``: explorers draw a static figure instead of waiting for a slider;
- ``DPEDU_QUIET``: launch's one-time note on how it starts ranks (spawn on macOS) stays out of the
  stored outputs; ``environment_report()`` says it instead.
The test configuration itself (``--nbval``, the sanitizer, timeouts) is in pyproject.toml. ``--part``, defined
here, splits the notebooks' run in two for ``./course test``: what may run two at a time, then the rest alone.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("DPEDU_STATIC", "1")
os.environ.setdefault("DPEDU_QUIET", "1")


def pytest_addoption(parser):
    parser.addoption("--part", choices=("beside", "alone"), default=None,
                     help="beside: only the browser test's lessons that judge no timing claim, and its other tests, "
                          "which may run beside each other (pytest-xdist); alone: everything else selected (the "
                          "lessons that judge a timing claim, and the notebooks nbval checks, whose cells must stay "
                          "in one process). ./course test runs the first over two workers, then the second")


def _notebook(item) -> Path | None:
    """The lesson a browser test runs, if it runs one."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("notebook") if callspec else None


def _beside(item) -> bool:
    """Whether ``item`` may run beside another: a browser test that runs no lesson judging a timing claim."""
    if item.path.name != "test_browser.py":
        return False
    from dpedu.notebook.course import timing_claim_cells  # imports torch: only where a part is asked for

    notebook = _notebook(item)
    return notebook is None or not timing_claim_cells(notebook)


def _stored_seconds(item) -> float:
    """How long the lesson's cells took when it was last executed (0 for a test that runs none)."""
    from dpedu.notebook.course import stored_cell_seconds

    notebook = _notebook(item)
    return sum(stored_cell_seconds(notebook).values()) if notebook else 0.0


@pytest.hookimpl(trylast=True)  # after tests/conftest.py has left out of nbval the notebooks the browser test runs
def pytest_collection_modifyitems(config, items):
    part = config.getoption("part")
    if part is None:
        return
    kept, left_out = [], []
    for item in items:
        (kept if _beside(item) == (part == "beside") else left_out).append(item)
    if part == "beside":  # the longest lessons first, so that no lane is left with one at the end while the other waits
        kept.sort(key=_stored_seconds, reverse=True)
    if left_out:
        config.hook.pytest_deselected(items=left_out)
    items[:] = kept
