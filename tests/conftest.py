"""How the suite is run: each notebook executed once, on two workers.

1. Where the browser test runs a lesson, nbval does not run it again. tests/test_browser.py executes
   every lesson in JupyterLab and compares the saved outputs with the stored ones
   (tests/stored_outputs.py), which is what nbval would do in a kernel of its own. When that browser
   test is selected and can run (Chromium found), the same notebook's nbval cells are deselected. Run a
   notebook on its own (``./course test notebooks/01_gd_sgd_minibatch.ipynb``), or without Chromium,
   and nbval checks it as before; CI's runs on other CPU kernel paths (``./course test notebooks/``)
   are nbval's.
2. pytest-xdist runs the suite on two workers (``-n 2 --dist loadgroup``, pyproject.toml): most of it
   waits (on kernels, browsers, ranks' timeouts), so two workers on two cores nearly halve its time.
   Each test file, and each notebook's nbval cells (one kernel), stays on one worker; the browser
   tests form two groups of about equal work, one per worker, each with its own JupyterLab.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

BROWSER_TEST = "test_run_all_in_jupyterlab_shows_no_error_and_explorers_redraw"


def _will_run(item) -> bool:
    return not any(mark.args and mark.args[0] for mark in item.iter_markers("skipif"))


def recorded_seconds(notebook: Path) -> float:
    """How long the notebook's cells took when it was last executed (from their execution metadata)."""
    total = 0.0
    for cell in json.loads(notebook.read_text())["cells"]:
        times = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            total += (datetime.fromisoformat(times["shell.execute_reply"].replace("Z", "+00:00"))
                      - datetime.fromisoformat(times["iopub.execute_input"].replace("Z", "+00:00"))).total_seconds()
    return total


def balanced_halves(notebooks: list[Path]) -> dict[str, str]:
    """Notebook name -> "browser-0" or "browser-1": the longest first, each to the lighter half."""
    load, group = [0.0, 0.0], {}
    for notebook in sorted(notebooks, key=recorded_seconds, reverse=True):
        half = load.index(min(load))
        group[notebook.name] = f"browser-{half}"
        load[half] += recorded_seconds(notebook) + 10  # a page, a kernel and a save per notebook
    return group


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    browser = [item for item in items if getattr(item, "originalname", None) == BROWSER_TEST and _will_run(item)]
    in_browser = {item.callspec.params["notebook"].name for item in browser}
    if in_browser:
        twice = [item for item in items if item.path.suffix == ".ipynb" and item.path.name in in_browser]
        config.hook.pytest_deselected(items=twice)
        items[:] = [item for item in items if item.path.suffix != ".ipynb" or item.path.name not in in_browser]
    halves = balanced_halves([item.callspec.params["notebook"] for item in browser])
    for item in items:
        if item in browser:
            group = halves[item.callspec.params["notebook"].name]
        elif item.path.name == "test_browser.py":
            group = "browser-1"  # the check of the check: with a half's JupyterLab
        else:
            group = str(item.path)
        item.add_marker(pytest.mark.xdist_group(group))

