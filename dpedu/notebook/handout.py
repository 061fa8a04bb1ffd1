"""The course's handout: one printable page per lesson, built from the notebooks themselves, so it never
drifts from them.

Each lesson's page is its title, its study time and its "What to remember" cell; the last page is the
appendix's bilingual table of myths and where the course measures each. One self-contained HTML file
(no scripts, nothing fetched), laid out for printing: a browser's Print gives one page per lesson.

    ./course handout                 # writes handout.html beside the notebooks' folder
    python -m dpedu.notebook.handout OUT.html [NOTEBOOKS_FOLDER]
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from dpedu.notebook.course import NOTEBOOKS, course_notebooks, study_minutes
from dpedu.notebook.opened_alone import source

REMEMBER = "## What to remember"
MYTHS = "## Myth and measurement"

_STYLE = """
body { font: 11pt/1.45 system-ui, sans-serif; max-width: 48em; margin: 2em auto; padding: 0 1em; color: #222; }
section { break-after: page; page-break-after: always; }
section:last-child { break-after: auto; page-break-after: auto; }
h1 { font-size: 16pt; margin-bottom: 0.2em; } h2 { font-size: 13pt; }
.minutes { color: #555; margin-top: 0; }
code { font-size: 0.92em; background: #f3f3f3; padding: 0 0.15em; }
table { border-collapse: collapse; font-size: 9.5pt; } th, td { border: 1px solid #bbb; padding: 0.2em 0.4em; }
li { margin-bottom: 0.25em; }
@page { margin: 1.5cm; }
"""


def _markdown_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [source(cell) for cell in cells if cell["cell_type"] == "markdown"]


def _title(notebook: Path) -> str:
    for text in _markdown_cells(notebook):
        if text.startswith("# "):
            return text.splitlines()[0][2:].strip()
    raise ValueError(f"{notebook.name} has no title: its first heading should start with '# '")


def _section_from(notebook: Path, heading: str) -> str:
    """The markdown from ``heading`` to the end of the cell that holds it."""
    for text in _markdown_cells(notebook):
        if heading in text:
            return text[text.index(heading):]
    raise ValueError(f"{notebook.name} has no cell with the heading {heading!r}")


def handout_html(notebooks: str | Path = NOTEBOOKS) -> str:
    """The handout as one HTML page: a section per lesson (00, 01, ...), then the appendix's myth table."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune  # JupyterLab's nbconvert

    folder = Path(notebooks)
    lessons, appendix = course_notebooks(folder)
    if not lessons or len(appendix) != 1:
        raise ValueError(f"notebooks must be the course's notebooks folder (lessons 00, 01, ... and one appendix), "
                         f"got {folder} with {len(lessons)} lessons and {len(appendix)} appendices")
    sections = []
    for notebook in lessons:
        remember = _section_from(notebook, REMEMBER)[len(REMEMBER):]
        sections.append(f"<section>\n<h1>{html.escape(_title(notebook))}</h1>\n"
                        f"<p class=\"minutes\">About {study_minutes(notebook)} minutes to study; "
                        f"notebook <code>{html.escape(notebook.name)}</code></p>\n"
                        f"<h2>What to remember</h2>\n{markdown2html_mistune(remember)}\n</section>")
    myths = _section_from(appendix[0], MYTHS)
    sections.append(f"<section>\n<h1>{html.escape(_title(appendix[0]))}</h1>\n"
                    f"{markdown2html_mistune(myths)}\n</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>dpedu: what to remember, lesson by lesson</title>\n"
            f"<style>{_STYLE}</style>\n</head>\n<body>\n" + "\n".join(sections) + "\n</body>\n</html>\n")


def main(argv: list[str]) -> None:
    if not 1 <= len(argv) <= 2:
        raise SystemExit("usage: python -m dpedu.notebook.handout OUT.html [NOTEBOOKS_FOLDER]")
    out = Path(argv[0])
    out.write_text(handout_html(argv[1] if len(argv) == 2 else NOTEBOOKS), encoding="utf-8")
    print(f"Wrote {out}: open it in a browser and print it, one page per lesson.")


if __name__ == "__main__":
    main(sys.argv[1:])
