from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from dpedu.course import LESSONS, draw_course_map  # noqa: E402
from dpedu.diagrams import write_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def test_lessons_are_numbered_in_order():
    assert [lesson.number for lesson in LESSONS] == list(range(len(LESSONS)))


def test_course_map_is_drawn_with_every_lesson_and_saved(tmp_path):
    fig = draw_course_map(tmp_path / "map.png")
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {f"{lesson.number:02d}" for lesson in LESSONS} <= texts
    assert (tmp_path / "map.png").read_bytes().startswith(b"\x89PNG")


def test_every_notebook_is_a_lesson_on_the_map():
    numbers = {int(path.name[:2]) for path in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert numbers and numbers <= {lesson.number for lesson in LESSONS}


def test_every_figure_of_images_is_made_by_the_diagrams_command(tmp_path):
    written = write_all(tmp_path)
    assert [p.name for p in written] == sorted(p.name for p in (ROOT / "images").glob("*.png"))
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
