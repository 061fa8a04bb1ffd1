"""One plotting style for the whole course, so that every figure reads the same way.

Used in lessons 00–02, 04–09, 11 to 13; lesson 03 draws with matplotlib's defaults.
"""

from __future__ import annotations

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def use_course_style() -> None:
    """Set matplotlib defaults: readable sizes, light grid, the course palette, no top/right spines."""
    import matplotlib as mpl
    from matplotlib import cycler

    mpl.rcParams.update({
        "figure.figsize": (6.4, 3.8),
        "figure.dpi": 90,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "legend.frameon": False,
        "axes.prop_cycle": cycler(color=PALETTE),
    })


def draw_who_holds_what(panels: dict[str, tuple[list[list[float]], list[list[float] | None]]]):
    """For each collective, every rank's tensor before and after it: one row of cells per rank. A cell
    takes the colour of the rank that held its value before (a copy); values no rank held (sums) are
    grey; a rank whose tensor the collective leaves undefined (``None``) says so."""
    import matplotlib.pyplot as plt

    ranks = max(len(before) for before, _ in panels.values())
    width = max(len(h) for before, after in panels.values() for h in [*before, *after] if h is not None)
    fig, axes = plt.subplots(len(panels), 2, figsize=(9, 0.45 * ranks * len(panels) + 0.6), squeeze=False)
    for (name, (before, after)), row in zip(panels.items(), axes, strict=True):
        owner = {value: rank for rank, values in enumerate(before) for value in values}
        for ax, holdings, when in ((row[0], before, "before"), (row[1], after, "after")):
            ax.set_axis_off()
            ax.set_title(f"{name}: {when}", fontsize=9, loc="left")
            ax.set_xlim(-1.6, width + 0.1)
            ax.set_ylim(ranks + 0.1, -0.1)
            for rank, values in enumerate(holdings):
                ax.text(-0.2, rank + 0.5, f"rank {rank}", ha="right", va="center", fontsize=8)
                if values is None:
                    ax.text(0.05, rank + 0.5, "undefined", va="center", fontsize=8, color="grey", style="italic")
                    continue
                for column, value in enumerate(values):
                    colour = PALETTE[owner[value] % len(PALETTE)] if value in owner else "#999999"
                    ax.add_patch(plt.Rectangle((column, rank + 0.08), 0.94, 0.84, color=colour, alpha=0.35))
                    ax.text(column + 0.47, rank + 0.5, f"{value:g}", ha="center", va="center", fontsize=8)
    fig.tight_layout()
    return fig
