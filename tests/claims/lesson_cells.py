"""The lessons' own cells, for claims tests that run a cell's source as it stands in its lesson."""

import json
from pathlib import Path

from dpedu.notebook.opened_alone import source

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def code_cell(notebook: str, *texts: str) -> str:
    """The source of the one code cell of ``notebooks/<notebook>`` that contains every one of ``texts``."""
    cells = json.loads((NOTEBOOKS / notebook).read_text())["cells"]
    [found] = [text for text in (source(cell) for cell in cells if cell["cell_type"] == "code")
               if all(wanted in text for wanted in texts)]
    return found
