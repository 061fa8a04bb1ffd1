"""The course map: one list of lessons that the README figure and lesson 00 both draw from, and how long
each lesson takes to study.

Used in lesson 00 and for the README's figure and lesson table.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from dpedu.notebook.opened_alone import FIRST_CELL, source

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"  # in a clone: the README's study times


class Lesson(NamedTuple):
    id: str  # what its notebook's name begins with: "03", or "08a" and "08b" for a lesson studied in two
    title: str
    part: str


LESSONS: tuple[Lesson, ...] = (
    Lesson("00", "Welcome and your machine", "Foundations"),
    Lesson("01", "GD, SGD and mini-batch SGD", "Foundations"),
    Lesson("02", "Data parallelism by hand, nn.DataParallel", "Data parallelism"),
    Lesson("03", "Multi-process DDP from a notebook", "Data parallelism"),
    Lesson("04", "Collectives and all-reduce from scratch", "Data parallelism"),
    Lesson("05a", "Inside DDP: buckets and overlap", "Data parallelism"),
    Lesson("05b", "Inside DDP: settings, compile, hooks", "Data parallelism"),
    Lesson("06", "Asynchronous updates, stale gradients", "Training at scale"),
    Lesson("07", "Batch size and learning rate", "Training at scale"),
    Lesson("08a", "BatchNorm across ranks", "Training at scale"),
    Lesson("08b", "Randomness across ranks, the checklist", "Training at scale"),
    Lesson("09", "Scaling out: torchrun, MPI, Slurm", "In production"),
    Lesson("10", "When things go wrong: failures, restarts", "In production"),
    Lesson("11a", "Sharding: ZeRO, FSDP, mixed precision", "Beyond data parallelism"),
    Lesson("11b", "Sharding for real: HSDP, checkpoints", "Beyond data parallelism"),
    Lesson("12a", "Splitting the model: layers, pipelines, tensors", "Beyond data parallelism"),
    Lesson("12b", "Which parallelism when, combined", "Beyond data parallelism"),
    Lesson("13a", "A real training run: one script, its cost", "In production"),
    Lesson("13b", "The run's data loading and its speed", "In production"),
    Lesson("14", "Your loop in accelerate, and back", "In production"),
)


def course_notebooks(folder: str | Path = NOTEBOOKS) -> tuple[list[Path], list[Path]]:
    """The lessons' notebooks in ``folder`` in order (00, 01, ..., 08a, 08b, ...), and the appendix's."""
    folder = Path(folder)
    return sorted(folder.glob("[0-9][0-9]*_*.ipynb")), sorted(folder.glob("appendix_*.ipynb"))


def lesson_id(notebook: str | Path) -> str:
    """What a notebook's name begins with, before its first "_": "03", "08a", "appendix". A lesson longer than
    one sitting is two notebooks, "08a" and "08b", each a lesson with its own exercises."""
    return Path(notebook).name.split("_")[0]


PER_ROW = -(-len(LESSONS) // 2)  # lessons per row of the course map: two rows
PROSE_WORDS_PER_MINUTE = 100  # careful reading of technical prose with formulas, not skimming
CODE_LINES_PER_MINUTE = 12  # reading a cell, running it and reading what it prints; also dpedu's source it shows
FIGURE_MINUTES = 1  # reading a figure: its axes, its curves, and what the text says they show
SHOWN_SOURCE = re.compile(r"# dpedu/\S+, lines \d+–\d+\n")  # how show_source's output begins


def _cells(notebook: str | Path) -> list[dict]:
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be the path of a .ipynb file, got {str(notebook)!r}")
    return json.loads(path.read_text())["cells"]


def timing_claim_cells(notebook: str | Path) -> list[int]:
    """The index (every cell counted from 0) of each code cell of ``notebook`` that judges a timing claim
    (``dpedu.runtime.machine_load.timing_claim``). A lesson with any is run by the tests on cores that nothing
    else of the run uses, as a learner's machine would be."""
    return [index for index, cell in enumerate(_cells(notebook))
            if cell["cell_type"] == "code" and "timing_claim(" in source(cell)]


def stored_cell_seconds(notebook: str | Path) -> dict[int, float]:
    """How long each code cell of ``notebook`` took the last time it ran, by index (every cell counted from 0), from
    the start and end nbclient and JupyterLab store in its metadata; cells with none stored are left out."""
    seconds = {}
    for index, cell in enumerate(_cells(notebook)):
        stamps = cell.get("metadata", {}).get("execution", {})
        if cell["cell_type"] == "code" and "iopub.execute_input" in stamps and "shell.execute_reply" in stamps:
            start, end = (datetime.fromisoformat(stamps[key].replace("Z", "+00:00"))
                          for key in ("iopub.execute_input", "shell.execute_reply"))
            seconds[index] = (end - start).total_seconds()
    return seconds


def study_minutes(notebook: str | Path) -> int:
    """An estimate of the minutes a learner needs for ``notebook``, exercises left out: its prose at
    ``PROSE_WORDS_PER_MINUTE``, its code and the dpedu source it shows (``show_source``'s stored outputs) at
    ``CODE_LINES_PER_MINUTE``, and ``FIGURE_MINUTES`` for each stored figure, rounded to 5 minutes. The first
    cell, which installs dpedu where the notebook was opened alone, is left out."""
    cells = [cell for cell in _cells(notebook) if "".join(cell["source"]) != FIRST_CELL]  # the first is not read
    text = {kind: "".join("".join(c["source"]) + "\n" for c in cells if c["cell_type"] == kind)
            for kind in ("markdown", "code")}
    outputs = [output.get("data", {}) for cell in cells for output in cell.get("outputs", [])]
    shown = "".join(plain for data in outputs
                    if SHOWN_SOURCE.match(plain := "".join(data.get("text/plain", ""))))
    figures = sum("image/png" in data or "image/svg+xml" in data for data in outputs)
    code_lines = [line for line in (text["code"] + shown).splitlines() if line.strip()]
    minutes = (len(re.findall(r"\w+", text["markdown"])) / PROSE_WORDS_PER_MINUTE
               + len(code_lines) / CODE_LINES_PER_MINUTE + figures * FIGURE_MINUTES)
    return max(5, 5 * round(minutes / 5))


def exercise_minutes(notebook: str | Path) -> list[int]:
    """Each exercise's own estimate of the minutes it takes, in order: the ``*(about M min)*`` that opens each
    numbered item of the lesson's "## Exercises" cell (a planning figure, not a measurement)."""
    markdown = ["".join(cell["source"]) for cell in _cells(notebook) if cell["cell_type"] == "markdown"]
    exercises = next((text for text in markdown if text.startswith("## Exercises")), "")
    items = re.findall(r"^\d+\. (.*)$", exercises, re.M)
    minutes = [re.match(r"\*\(about (\d+) min\)\*", item) for item in items]
    if not all(minutes):
        missing = [i + 1 for i, found in enumerate(minutes) if not found]
        raise ValueError(f"{Path(notebook).name}: exercises {missing} do not open with their estimate, "
                         f"*(about M min)*")
    return [int(found.group(1)) for found in minutes]


def draw_course_map(path: str | Path | None = None):
    """Draw the lessons of ``LESSONS`` as a path through the parts of the course; save to ``path`` if given.

    The map comes from ``LESSONS`` alone, so lesson 00 draws it wherever its notebook was opened."""
    import matplotlib.pyplot as plt

    from dpedu.notebook.plotting import PALETTE

    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")

    parts = list(dict.fromkeys(lesson.part for lesson in LESSONS))
    rows = -(-len(LESSONS) // PER_ROW)
    fig, ax = plt.subplots(figsize=(2 * PER_ROW, 1.55 + 1.35 * rows))
    for place, lesson in enumerate(LESSONS):
        x, y = place % PER_ROW, -(place // PER_ROW)
        color = PALETTE[parts.index(lesson.part)]
        ax.add_patch(plt.Rectangle((x * 2.1, y * 1.6), 1.9, 1.1, color=color, alpha=0.18, lw=0))
        ax.add_patch(plt.Rectangle((x * 2.1, y * 1.6), 1.9, 1.1, fill=False, edgecolor=color, lw=1.5))
        ax.text(x * 2.1 + 0.95, y * 1.6 + 0.78, lesson.id, ha="center", fontsize=13,
                weight="bold", color=color)
        ax.text(x * 2.1 + 0.95, y * 1.6 + 0.36, _wrap(lesson.title), ha="center", va="center", fontsize=8)
        if place % PER_ROW != PER_ROW - 1 and place != len(LESSONS) - 1:
            ax.annotate("", (x * 2.1 + 2.08, y * 1.6 + 0.55), (x * 2.1 + 1.92, y * 1.6 + 0.55),
                        arrowprops={"arrowstyle": "->", "color": "0.4"})
    handles = [plt.Rectangle((0, 0), 1, 1, color=PALETTE[i], alpha=0.5) for i in range(len(parts))]
    ax.legend(handles, parts, loc="lower center", ncol=len(parts), frameon=False, bbox_to_anchor=(0.5, -0.12))
    ax.set_xlim(-0.1, PER_ROW * 2.1 - 0.1)
    ax.set_ylim(-1.6 * (rows - 1) - 0.15, 1.2)
    ax.set_axis_off()
    lessons = len({lesson.id[:2] for lesson in LESSONS})  # 08a and 08b are one lesson's two sittings
    ax.set_title(f"dpedu: {lessons} lessons from one process to many", fontsize=13)
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def _wrap(title: str, width: int = 22) -> str:
    lines, line = [], ""
    for word in title.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return "\n".join(lines + [line])



if __name__ == "__main__":  # the study times of README and TEACHING: python -m dpedu.notebook.course
    for notebook in course_notebooks()[0]:
        print(f"{notebook.stem}: {study_minutes(notebook)} min, exercises {sum(exercise_minutes(notebook))} min")
