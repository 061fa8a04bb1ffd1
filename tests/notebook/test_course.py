import json
import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")

from dpedu.notebook.course import (  # noqa: E402
    LESSONS,
    course_notebooks,
    draw_course_map,
    exercise_minutes,
    lesson_id,
    stored_cell_seconds,
    study_minutes,
    timing_claim_cells,
)
from dpedu.notebook.diagrams import draw_aggregation_schemes, write_all  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_lessons_are_numbered_in_order_and_a_lesson_in_two_sittings_is_08a_then_08b():
    numbers = [int(lesson.id[:2]) for lesson in LESSONS]
    assert numbers == sorted(numbers) and set(numbers) == set(range(numbers[-1] + 1))
    assert all(re.fullmatch(r"\d\d[ab]?", lesson.id) for lesson in LESSONS)
    halves = [lesson.id for lesson in LESSONS if not lesson.id.isdigit()]
    assert all(f"{h[:2]}a" in halves and f"{h[:2]}b" in halves for h in halves)
    assert lesson_id("notebooks/08a_batchnorm_across_ranks.ipynb") == "08a" and lesson_id("03_x.ipynb") == "03"


def test_course_map_is_drawn_with_every_lesson_and_saved(tmp_path):
    fig = draw_course_map(tmp_path / "map.png")
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {lesson.id for lesson in LESSONS} <= texts
    assert (tmp_path / "map.png").read_bytes().startswith(b"\x89PNG")


def test_every_notebook_is_a_lesson_on_the_map_and_every_lesson_a_notebook():
    assert [lesson_id(path) for path in course_notebooks()[0]] == [lesson.id for lesson in LESSONS]


def test_every_figure_of_images_is_made_by_the_diagrams_command(tmp_path):
    written = write_all(tmp_path)
    assert [p.name for p in written] == sorted(p.name for p in (ROOT / "images").glob("*.png"))
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def test_the_map_draws_every_lesson_from_the_list_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty folder, as for a notebook opened alone: the map needs no files
    numbers = [t.get_text() for t in draw_course_map().axes[0].texts if re.fullmatch(r"\d\d[ab]?", t.get_text())]
    assert numbers == [lesson.id for lesson in LESSONS]


def test_course_map_and_diagrams_name_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="path"):
        draw_course_map(path=3)
    with pytest.raises(ValueError, match="workers"):
        draw_aggregation_schemes(workers=1)
    with pytest.raises(TypeError, match="folder"):
        write_all(None)


def test_study_time_grows_with_prose_and_code(tmp_path):
    def notebook(words: int, code_lines: int) -> Path:
        cells = [{"cell_type": "markdown", "source": "word " * words},
                 {"cell_type": "code", "source": "x = 1\n" * code_lines}]
        (path := tmp_path / f"{words}_{code_lines}.ipynb").write_text(json.dumps({"cells": cells}))
        return path
    assert study_minutes(notebook(1000, 0)) == 10 and study_minutes(notebook(0, 120)) == 10
    assert study_minutes(notebook(3000, 240)) == 50 and study_minutes(notebook(10, 1)) == 5
    with pytest.raises(ValueError, match="notebook"):
        study_minutes(tmp_path / "missing.ipynb")


def test_study_time_counts_the_source_a_lesson_shows_and_its_figures_but_no_other_output(tmp_path):
    def notebook(*outputs: dict) -> Path:
        cells = [{"cell_type": "markdown", "source": "word " * 1000},
                 {"cell_type": "code", "source": "show(x)\n", "outputs": list(outputs)}]
        (path := tmp_path / f"{len(list(tmp_path.iterdir()))}.ipynb").write_text(json.dumps({"cells": cells}))
        return path
    shown = {"output_type": "execute_result",
             "data": {"text/plain": "# dpedu/x.py, lines 1–120\n" + "x = 1\n" * 119, "text/html": "<pre>"}}
    printed = {"output_type": "stream", "name": "stdout", "text": "x = 1\n" * 119}
    figure = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": "<Figure>"}}
    assert study_minutes(notebook()) == 10  # 1,000 words and one line of code
    assert study_minutes(notebook(shown)) == 20  # and 120 lines of shown source: 10 minutes more
    assert study_minutes(notebook(printed)) == 10  # what a cell prints is not read as code
    assert study_minutes(notebook(*[figure] * 5)) == 15  # a minute a figure


def test_the_cells_that_judge_a_timing_claim_are_the_code_cells_that_call_it(tmp_path):
    cells = [{"cell_type": "markdown", "source": "`timing_claim(...)` judges a claim"},  # prose that names it
             {"cell_type": "code", "source": ["with watched() as machine:\n", "    work()\n"]},
             {"cell_type": "code", "source": "timing_claim(fast, 'faster', expected='', seen='', machine=machine)"}]
    (path := tmp_path / "lesson.ipynb").write_text(json.dumps({"cells": cells}))
    assert timing_claim_cells(path) == [2]
    assert timing_claim_cells(ROOT / "notebooks" / "01_gd_sgd_minibatch.ipynb") == []
    with pytest.raises(ValueError, match="notebook"):
        timing_claim_cells(tmp_path / "missing.ipynb")


def test_the_stored_seconds_are_each_code_cells_last_run_where_one_is_stored(tmp_path):
    ran = {"execution": {"iopub.execute_input": "2026-12-01T10:00:00.500000Z",
                         "shell.execute_reply": "2026-12-01T10:00:02Z"}}
    cells = [{"cell_type": "code", "source": "work()", "metadata": ran},
             {"cell_type": "markdown", "source": "prose", "metadata": ran},  # not a code cell
             {"cell_type": "code", "source": "never_run()", "metadata": {}}]
    (path := tmp_path / "lesson.ipynb").write_text(json.dumps({"cells": cells}))
    assert stored_cell_seconds(path) == {0: 1.5}


def collected(*options: str, chromium: bool = True) -> list[str]:
    """The ids of what ``pytest tests/test_browser.py notebooks`` would run, with ``options``; with ``chromium`` False,
    as where none is installed (nbval then checks every notebook)."""
    env = {**os.environ} if chromium else {**{k: v for k, v in os.environ.items() if k != "DPEDU_CHROMIUM"},
                                           "PATH": str(Path(sys.executable).parent)}
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "tests/test_browser.py", "notebooks", *options],
                            cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    return [line for line in listed.stdout.splitlines() if "::" in line]


def test_the_two_parts_split_the_notebooks_run_and_only_lessons_without_timing_claims_run_beside_each_other():
    """./course test runs ``--part=beside`` two at a time, then ``--part=alone``: between them all that one run would,
    once; the first holds the browser test's lessons that judge no timing claim and its other tests, never an nbval
    cell (a notebook's cells must stay in one kernel, so in one worker)."""
    every, beside, alone = collected(), collected("--part=beside"), collected("--part=alone")
    assert sorted(beside + alone) == sorted(every) and not set(beside) & set(alone)
    assert all(line.startswith("tests/test_browser.py::") for line in beside)
    lessons = {path.stem for group in course_notebooks() for path in group}
    timed = {stem for stem in lessons if timing_claim_cells(ROOT / "notebooks" / f"{stem}.ipynb")}
    assert len(timed) >= 5
    ran_beside = [match[1] for line in beside if (match := re.search(r"\[([^\]]+)\]$", line))]
    assert set(ran_beside) == lessons - timed
    stored = [sum(stored_cell_seconds(ROOT / "notebooks" / f"{stem}.ipynb").values()) for stem in ran_beside]
    assert stored == sorted(stored, reverse=True) and stored[0] > 2 * stored[-1]  # the longest first
    assert len([line for line in beside if not line.endswith("]")]) == 2  # the check of itself, the handout
    # without Chromium the browser test is skipped and nbval checks every notebook, each in the part run alone
    assert all(line.startswith("tests/test_browser.py::") for line in collected("--part=beside", chromium=False))


def test_readme_lists_every_lesson_with_its_study_time():
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(\d\d[ab]?_\w+|appendix_\w+)` \| .+ \| (\d+) min \|$", readme, re.M)
    notebooks = [path for group in course_notebooks() for path in group]
    assert [name for name, _ in rows] == sorted(p.stem for p in notebooks)
    stale = {name: (int(minutes), study_minutes(ROOT / "notebooks" / f"{name}.ipynb")) for name, minutes in rows}
    stale = {name: pair for name, pair in stale.items() if pair[0] != pair[1]}
    assert not stale, f"README's study times (stated, now) are out of date: {stale}; `python -m dpedu.notebook.course`"
    hours = round(sum(int(minutes) for _, minutes in rows) / 60)
    assert f"about {hours} hours for the whole course" in readme and f"about {hours} hours in all" in readme


def test_every_exercise_opens_with_its_own_estimate_and_one_without_is_named(tmp_path):
    for notebook in course_notebooks()[0]:
        minutes = exercise_minutes(notebook)
        assert minutes and all(5 <= m <= 60 for m in minutes), (notebook.name, minutes)
    cells = [{"cell_type": "markdown", "source": "## Exercises\n\n1. *(about 5 min)* Sum it.\n2. Explain it.\n"}]
    (unestimated := tmp_path / "lesson.ipynb").write_text(json.dumps({"cells": cells}))
    with pytest.raises(ValueError, match=r"exercises \[2\] do not open with their estimate"):
        exercise_minutes(unestimated)


def test_teaching_plans_with_the_readmes_study_times_and_each_exercises_estimate():
    teaching = (ROOT / "TEACHING.md").read_text()
    rows = re.findall(r"^\| (\d\d[ab]?|appendix) \| .+ \| (\d+) min \| (\d+|–) \| (\d+) min \|$", teaching, re.M)
    notebooks = {lesson_id(p): p for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert [lesson for lesson, *_ in rows] == sorted(notebooks, key=lambda name: (name == "appendix", name))
    wrong = {lesson: (int(study), int(total)) for lesson, study, exercises, total in rows
             if (int(study), int(total)) != (minutes := study_minutes(notebooks[lesson]),
                                             minutes + sum(exercise_minutes(notebooks[lesson]) if
                                                           lesson != "appendix" else []))}
    assert not wrong, f"TEACHING's planning table (study, with exercises) is out of date: {wrong}"
    study, total = (round(sum(int(row[i]) for row in rows) / 60) for i in (1, 3))
    assert f"About {study} hours of study; about {total} with every exercise." in teaching
