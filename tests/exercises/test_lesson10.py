import re

import pytest

from dpedu.exercises import lesson10
from dpedu.exercises.answers import VALUES
from dpedu.notebook.course import NOTEBOOKS, _cells


def test_steps_per_epoch_counts_the_samplers_padding():
    assert lesson10.steps_per_epoch(64, 2, 22) and lesson10.steps_per_epoch(64, 4, 22)
    assert lesson10.steps_per_epoch(80, 2, 17) and lesson10.steps_per_epoch(80, 4, 18)  # 360 // 20, padded
    assert not lesson10.steps_per_epoch(80, 4, 17)
    with pytest.raises(ValueError, match="workers"):
        lesson10.steps_per_epoch(80, 3, 17)


def test_checkpoint_minutes_follows_youngs_rule_at_llama3s_rate():
    # part 2 of the lesson: 16,384 GPUs fail every 3.1 h; a one-minute write gives 19 minutes
    assert lesson10.checkpoint_minutes(16_384, 1, (2 * 1 * 60 * 54 * 24 / 419) ** 0.5)
    assert not lesson10.checkpoint_minutes(4096, 5, 2 * 5 * 742)  # the square root forgotten
    with pytest.raises(ValueError, match="write_minutes"):
        lesson10.checkpoint_minutes(4096, 0, 1.0)


RIGHT = VALUES[10, 5]  # the model answer


def test_every_excerpt_is_a_line_lesson_10_printed_and_every_failure_is_named_once():
    printed = "".join("".join(output.get("text", "")) for cell in _cells(NOTEBOOKS / "10_when_things_go_wrong.ipynb")
                      if cell["cell_type"] == "code" for output in cell["outputs"])
    for line, _ in lesson10._EXCERPTS:  # " ..." marks where the lesson's output starts a new line
        assert all(part in printed for part in re.split(r" (?=\.\.\.)", line)), line
    assert sorted(failure for _, failure in lesson10._EXCERPTS) == sorted(lesson10.FAILURES)


def test_name_the_failures_check(capsys):
    lesson10.failure_excerpts()
    assert capsys.readouterr().out.splitlines()[0].startswith("1. The client socket has timed out")
    assert lesson10.name_the_failures(RIGHT)
    swapped = [RIGHT[2], RIGHT[1], RIGHT[0], *RIGHT[3:]]  # the two timeouts, each taken for the other
    assert not lesson10.name_the_failures(swapped)
    assert "excerpt(s) [1, 3] not yet" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not in lesson10.FAILURES"):
        lesson10.name_the_failures([*RIGHT[:6], "a hang"])
    with pytest.raises(TypeError, match="a list of 7 names"):
        lesson10.name_the_failures(RIGHT[:6])


def test_steps_per_epoch_refuses_text_by_name():
    with pytest.raises(TypeError, match="answer must be a number"):
        lesson10.steps_per_epoch(80, 4, "18")
