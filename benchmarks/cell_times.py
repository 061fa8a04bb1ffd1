"""How long each lesson and each of its cells takes to run, top to bottom, as under the tests.

    .venv/bin/python benchmarks/cell_times.py [notebooks/03_ddp_from_a_notebook.ipynb ...] [--slowest 3] [--stored]

Executes each notebook (all lessons by default) in a fresh kernel, on a copy (the stored outputs are
left alone), with the explorers static as under the tests, and prints per notebook its total time,
the time of each part (the cells under each "## " heading: what a teacher's demo of that part costs),
its slowest cells (index counting every cell from 0, markdown included, and first line) and every
code cell over the course's budget (15 s; 30 s for lessons 09, 10 and 13a). The times are wall-clock on
this machine, once: run it on a quiet machine, and more than once before quoting a figure.
With --stored nothing runs: the times are those the notebook recorded when it was last executed
(nbclient stores each cell's start and end in its metadata), each notebook's the sum of its cells' (kernel
start-up and the time between cells left out).
"""

import argparse
import copy
import os
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from dpedu.notebook.course import course_notebooks, lesson_id, stored_cell_seconds

ROOT = Path(__file__).resolve().parents[1]
CELL_BUDGET_S = {"09": 30.0, "10": 30.0, "13a": 30.0}  # lessons that start torchrun, mpiexec and Slurm jobs


class TimedClient(NotebookClient):
    """A notebook client that records each cell's wall time."""

    def __init__(self, notebook, **kwargs):
        super().__init__(notebook, **kwargs)
        self.seconds: dict[int, float] = {}

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        start = time.perf_counter()
        result = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if cell.cell_type == "code":
            self.seconds[cell_index] = time.perf_counter() - start
        return result


def cell_times(path: Path) -> tuple[float, dict[int, float], nbformat.NotebookNode]:
    """(total seconds, seconds per code cell by index, the notebook) for one run of ``path``."""
    notebook = copy.deepcopy(nbformat.read(path, as_version=4))
    os.environ.setdefault("DPEDU_STATIC", "1")  # as under the tests (conftest.py)
    os.environ.setdefault("DPEDU_QUIET", "1")
    client = TimedClient(notebook, timeout=600, kernel_name="python3",
                         resources={"metadata": {"path": str(path.parent)}})  # run where the notebook is
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start, client.seconds, notebook


def stored_cell_times(path: Path) -> tuple[float, dict[int, float], nbformat.NotebookNode]:
    """Like ``cell_times``, from the times stored in ``path`` by its last execution (no kernel runs)."""
    notebook = nbformat.read(path, as_version=4)
    seconds = stored_cell_seconds(path)
    if not seconds:
        raise SystemExit(f"{path.name} stores no cell times: execute it with nbconvert or nbclient first")
    # The cells' own times summed, not first start to last end: a cell run again later (an edited first cell)
    # would otherwise count the days between
    return sum(seconds.values()), seconds, notebook


def part_times(notebook: nbformat.NotebookNode, seconds: dict[int, float]) -> list[tuple[str, float]]:
    """(heading, seconds of its code cells) for each "## " part, in order; "(start)" before the first."""
    parts = [["(start)", 0.0]]
    for index, cell in enumerate(notebook.cells):
        headings = [line[3:] for line in cell.source.splitlines() if line.startswith("## ")]
        if cell.cell_type == "markdown" and headings:
            parts.append([headings[0][:70], 0.0])
        parts[-1][1] += seconds.get(index, 0.0)
    return [(heading, total) for heading, total in parts if heading != "(start)" or total > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--slowest", type=int, default=3, help="how many of the slowest cells to list")
    parser.add_argument("--stored", action="store_true", help="read the times stored by the last execution")
    options = parser.parse_args()
    paths = options.notebooks or course_notebooks(ROOT / "notebooks")[0]
    grand_total = 0.0
    for path in paths:
        total, seconds, notebook = (stored_cell_times if options.stored else cell_times)(path)
        grand_total += total
        budget = CELL_BUDGET_S.get(lesson_id(path), 15.0)
        print(f"{path.name}: {total:.1f} s in all, {len(seconds)} code cells")
        for heading, part_seconds in part_times(notebook, seconds):
            print(f"    {part_seconds:5.1f} s  {heading}")
        slowest = sorted(seconds, key=seconds.get, reverse=True)[:options.slowest]
        for index in sorted(set(slowest) | {i for i, s in seconds.items() if s > budget}):
            first_line = notebook.cells[index].source.strip().splitlines()[0][:70]
            over = f"  OVER the {budget:g} s budget" if seconds[index] > budget else ""
            print(f"    cell {index:>3}: {seconds[index]:5.1f} s  {first_line}{over}")
    print(f"all {len(paths)} notebooks: {grand_total:.0f} s")


if __name__ == "__main__":
    main()
