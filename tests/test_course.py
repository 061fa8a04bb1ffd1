from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from dpedu.course import LESSONS, draw_course_map  # noqa: E402

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
