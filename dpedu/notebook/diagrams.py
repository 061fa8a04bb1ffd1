"""Figures used outside the notebooks: ``python -m dpedu.notebook.diagrams images`` writes them all.

Its figures are shown in lesson 02 and the README.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from dpedu._validate import whole
from dpedu.notebook.course import draw_course_map
from dpedu.notebook.plotting import PALETTE


def draw_aggregation_schemes(workers: int = 4, path: str | Path | None = None):
    """Parameter server (a star: every gradient through one node) beside ring all-reduce (no centre).

    The server averages the pushed gradients and the workers pull that average (each then takes the
    same step), as lesson 02's ``parameter_server`` does; ``M`` is the gradient's size in bytes.
    """
    import matplotlib.pyplot as plt

    whole("workers", workers, minimum=2, maximum=12)
    if path is not None and not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")

    fig, (star, ring) = plt.subplots(1, 2, figsize=(10, 4.4))
    angles = [math.pi / 2 + 2 * math.pi * k / workers for k in range(workers)]
    spots = [(math.cos(a), math.sin(a)) for a in angles]
    for (x, y) in spots:
        star.annotate("", (0.18 * x, 0.18 * y), (0.82 * x, 0.82 * y),
                      arrowprops={"arrowstyle": "->", "color": PALETTE[1], "lw": 2, "shrinkA": 0, "shrinkB": 0,
                                  "connectionstyle": "arc3,rad=0.15"})
        star.annotate("", (0.82 * x, 0.82 * y), (0.18 * x, 0.18 * y),
                      arrowprops={"arrowstyle": "->", "color": PALETTE[0], "lw": 2, "shrinkA": 0, "shrinkB": 0,
                                  "connectionstyle": "arc3,rad=0.15"})
    star.add_patch(plt.Circle((0, 0), 0.17, color="0.25"))
    star.text(0, 0, "server", color="white", ha="center", va="center", fontsize=9)
    star.set_title("Parameter server: workers push gradients (red)\nand pull their average (blue); per step, "
                   f"each way,\nthe server's link carries K·M bytes (K={workers}), a worker's M", fontsize=10)
    for k, (x, y) in enumerate(spots):
        j = (k + 1) % workers
        nx, ny = spots[j]
        ring.annotate("", (0.8 * nx + 0.2 * x, 0.8 * ny + 0.2 * y), (0.8 * x + 0.2 * nx, 0.8 * y + 0.2 * ny),
                      arrowprops={"arrowstyle": "->", "color": PALETTE[2], "lw": 2})
    ring.set_title("Ring all-reduce: each worker sends to the next;\nper step, each way, every link carries\n"
                   "2·(K−1)/K·M < 2·M bytes: no centre", fontsize=10)
    for axes in (star, ring):
        for k, (x, y) in enumerate(spots):
            axes.add_patch(plt.Circle((x, y), 0.17, color=PALETTE[3], alpha=0.85))
            axes.text(x, y, f"worker\n{k}", color="white", ha="center", va="center", fontsize=8)
        axes.set_xlim(-1.35, 1.35)
        axes.set_ylim(-1.35, 1.35)
        axes.set_aspect("equal")
        axes.set_axis_off()
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig


def write_all(folder: str | Path) -> list[Path]:
    """Write every figure of ``images/`` into ``folder``; returns the paths written."""
    if not isinstance(folder, (str, Path)):
        raise TypeError(f"folder must be a str or Path, got {type(folder).__name__}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "course_map.png", folder / "parameter_server_vs_allreduce.png"]
    draw_course_map(written[0])
    draw_aggregation_schemes(path=written[1])
    return written


if __name__ == "__main__":
    import matplotlib

    matplotlib.use("Agg")
    for path in write_all(sys.argv[1] if len(sys.argv) > 1 else "images"):
        print("wrote", path)
