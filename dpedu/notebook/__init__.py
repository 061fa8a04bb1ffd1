"""What the notebooks stand on, outside any one lesson's content (every lesson).

- ``show``: ``show_source``, the code a lesson relies on, with its file and lines, its argument checks folded.
- ``explorers``: sliders over precomputed answers (``explore``), progress bars (``progress``).
- ``plotting``: the course's matplotlib style and its shared figures.
- ``course``: the course map, drawn in the README and in lesson 00.
- ``diagrams``: figures used outside the notebooks (``python -m dpedu.notebook.diagrams images``).
"""

from dpedu.notebook.explorers import explore, progress, widgets_enabled
from dpedu.notebook.show import show_source

__all__ = ["explore", "progress", "show_source", "widgets_enabled"]
