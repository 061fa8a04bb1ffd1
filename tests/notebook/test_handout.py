"""handout: every lesson's "What to remember" and the appendix's myth table, whole, one section each."""

import json
import re
from pathlib import Path

import pytest

from dpedu.notebook import handout
from dpedu.notebook.course import course_notebooks, lesson_id

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def markdown_of(notebook: Path, heading: str) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    [source] = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown" and heading in "".join(c["source"])]
    return source[source.index(heading):]


@pytest.fixture(scope="module")
def sections():
    page = handout.handout_html(NOTEBOOKS)
    assert page.count("<section>") == page.count("</section>")
    return re.findall(r"<section>(.*?)</section>", page, re.S)


def test_a_section_per_lesson_in_order_then_the_myths(sections):
    lessons = course_notebooks(NOTEBOOKS)[0]
    assert len(sections) == len(lessons) + 1
    for notebook, section in zip(lessons, sections, strict=False):
        assert re.search(rf"<h1>{lesson_id(notebook)} · ", section), notebook.name
        assert f"About {handout.study_minutes(notebook)} minutes to study" in section


def test_every_bullet_of_every_what_to_remember_is_there(sections):
    for notebook, section in zip(course_notebooks(NOTEBOOKS)[0], sections, strict=False):
        bullets = re.findall(r"^- ", markdown_of(notebook, handout.REMEMBER), re.M)
        assert section.count("<li>") == len(bullets) > 0, notebook.name


def test_every_row_of_the_myth_tables_is_there(sections):
    [appendix] = NOTEBOOKS.glob("appendix_*.ipynb")
    rows = [line for line in markdown_of(appendix, handout.MYTHS).splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]
    assert sections[-1].count("<tr>") == len(rows) > 20  # the English and the Chinese table, headers included


def test_another_folder_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="notebooks must be the course's notebooks folder"):
        handout.handout_html(tmp_path)


def test_main_writes_the_file(tmp_path, capsys):
    out = tmp_path / "handout.html"
    handout.main([str(out)])
    assert out.read_text().startswith("<!DOCTYPE html>") and "Wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="usage"):
        handout.main([])
