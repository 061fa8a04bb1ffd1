"""The course map: one list of lessons that the README figure and lesson 00 both draw from, and how long
each lesson takes to study.

Used in lesson 00 and for the README's figure and lesson table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


class Lesson(NamedTuple):
    number: int
    title: str
    part: str


LESSONS: tuple[Lesson, ...] = (
    Lesson(0, "Welcome and your machine", "Foundations"),
    Lesson(1, "GD, SGD and mini-batch SGD", "Foundations"),
    Lesson(2, "Data parallelism by hand, nn.DataParallel", "Data parallelism"),
    Lesson(3, "Multi-process DDP from a notebook", "Data parallelism"),
    Lesson(4, "Collectives and all-reduce from scratch", "Data parallelism"),
    Lesson(5, "Asynchronous updates, stale gradients", "Training at scale"),
    Lesson(6, "Batch size and learning rate", "Training at scale"),
    Lesson(7, "BatchNorm and randomness across ranks", "Training at scale"),
    Lesson(8, "Scaling out, and when things go wrong", "In production"),
    Lesson(9, "Beyond plain data parallelism", "In production"),
    Lesson(10, "A real training run, end to end", "In production"),
)


def written_lessons(folder: str | Path = NOTEBOOKS) -> set[int]:
    """The numbers of the lessons that have a notebook (``NN_*.ipynb``) in ``folder``."""
    if not isinstance(folder, (str, Path)):
        raise TypeError(f"folder must be a str or Path, got {type(folder).__name__}")
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder must be a directory of lesson notebooks, got {str(folder)!r}")
    return {int(p.name[:2]) for p in folder.glob("[0-9][0-9]_*.ipynb")}


PER_ROW = 6  # lessons per row of the course map
PROSE_WORDS_PER_MINUTE = 100  # careful reading of technical prose with formulas, not skimming
CODE_LINES_PER_MINUTE = 12  # reading a cell, running it and reading what it prints


def study_minutes(notebook: str | Path) -> int:
    """An estimate of the minutes a learner needs for ``notebook``, exercises left out: its prose at
    ``PROSE_WORDS_PER_MINUTE`` and its code at ``CODE_LINES_PER_MINUTE``, rounded to 5 minutes."""
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be the path of a .ipynb file, got {str(notebook)!r}")
    cells = json.loads(path.read_text())["cells"]
    text = {kind: "".join("".join(c["source"]) + "\n" for c in cells if c["cell_type"] == kind)
            for kind in ("markdown", "code")}
    minutes = (len(re.findall(r"\w+", text["markdown"])) / PROSE_WORDS_PER_MINUTE
               + len([line for line in text["code"].splitlines() if line.strip()]) / CODE_LINES_PER_MINUTE)
    return max(5, 5 * round(minutes / 5))


def draw_course_map(path: str | Path | None = None, written: Iterable[int] | None = None):
    """Draw the lessons as a path through the course's four parts; save to ``path`` if given.

    Lessons not in ``written`` (by default: those without a notebook in the course's ``notebooks``
    folder) are drawn dashed and marked "not yet written".
    """
    import matplotlib.pyplot as plt

    from dpedu.notebook.plotting import PALETTE

    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
    if written is not None and not isinstance(written, Iterable):
        raise TypeError(f"written must be lesson numbers (a set or list), got {type(written).__name__}")
    written = written_lessons() if written is None else set(written)
    if not written <= {lesson.number for lesson in LESSONS}:
        raise ValueError(f"written must list lesson numbers from 0 to {len(LESSONS) - 1}, got {sorted(written)}")

    parts = list(dict.fromkeys(lesson.part for lesson in LESSONS))
    fig, ax = plt.subplots(figsize=(12, 4.2))
    for lesson in LESSONS:
        x, y = lesson.number % PER_ROW, -(lesson.number // PER_ROW)
        color = PALETTE[parts.index(lesson.part)]
        done = lesson.number in written
        ax.add_patch(plt.Rectangle((x * 2.1, y * 1.6), 1.9, 1.1, color=color, alpha=0.18 if done else 0.05, lw=0))
        ax.add_patch(plt.Rectangle((x * 2.1, y * 1.6), 1.9, 1.1, fill=False, edgecolor=color, lw=1.5,
                                   ls="-" if done else "--"))
        ax.text(x * 2.1 + 0.95, y * 1.6 + 0.78, f"{lesson.number:02d}", ha="center", fontsize=13,
                weight="bold", color=color, alpha=1 if done else 0.6)
        ax.text(x * 2.1 + 0.95, y * 1.6 + 0.36, _wrap(lesson.title), ha="center", va="center", fontsize=8,
                alpha=1 if done else 0.6)
        if not done:
            ax.text(x * 2.1 + 0.95, y * 1.6 + 0.06, "not yet written", ha="center", fontsize=7, style="italic",
                    color="0.35")
        if lesson.number % PER_ROW != PER_ROW - 1 and lesson.number != LESSONS[-1].number:
            ax.annotate("", (x * 2.1 + 2.08, y * 1.6 + 0.55), (x * 2.1 + 1.92, y * 1.6 + 0.55),
                        arrowprops={"arrowstyle": "->", "color": "0.4"})
    handles = [plt.Rectangle((0, 0), 1, 1, color=PALETTE[i], alpha=0.5) for i in range(len(parts))]
    ax.legend(handles, parts, loc="lower center", ncol=len(parts), frameon=False, bbox_to_anchor=(0.5, -0.12))
    ax.set_xlim(-0.1, PER_ROW * 2.1 - 0.1)
    ax.set_ylim(-1.75, 1.2)
    ax.set_axis_off()
    missing = {lesson.number for lesson in LESSONS} - written
    dashed = " (dashed: not yet written)" if missing else ""
    ax.set_title(f"dpedu: {len(LESSONS)} lessons from one process to many{dashed}", fontsize=13)
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



if __name__ == "__main__":  # the README's study times: python -m dpedu.notebook.course
    for notebook in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        print(f"{notebook.stem}: {study_minutes(notebook)} min")
