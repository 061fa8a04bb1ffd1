"""One plotting style for the whole course, so that every figure reads the same way."""

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
