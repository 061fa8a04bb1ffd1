import pytest

from dpedu.notebook import explore, progress, show_source, widgets_enabled


def test_explore_draws_the_first_choice_when_widgets_are_off(monkeypatch):
    monkeypatch.setenv("DPEDU_STATIC", "1")
    assert not widgets_enabled()
    calls = []
    explore(lambda batch, lr: calls.append((batch, lr)), batch=(8, 16), lr=[0.1, 0.2])
    assert calls == [(8, 0.1)]


@pytest.mark.parametrize("values", [(), "abc", 5])
def test_explore_rejects_options_that_are_not_choices(values):
    with pytest.raises(ValueError, match="option 'lr'"):
        explore(lambda lr: None, lr=values)


def test_show_source_shows_the_code_itself():
    assert "def explore" in show_source(explore).data


def test_progress_is_quiet_under_the_tests_and_yields_everything(monkeypatch, capsys):
    monkeypatch.setenv("DPEDU_QUIET", "1")
    assert list(progress(range(5), "counting")) == [0, 1, 2, 3, 4]
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="description"):
        progress(range(3), 7)


def test_explore_and_show_source_name_bad_arguments():
    with pytest.raises(TypeError, match="draw"):
        explore(None, lr=(0.1,))
    with pytest.raises(ValueError, match="at least one option"):
        explore(lambda: None)
    with pytest.raises(TypeError, match="obj"):
        show_source(3)


def test_progress_refuses_what_cannot_be_looped_over():
    with pytest.raises(TypeError, match="iterable"):
        progress(5)
