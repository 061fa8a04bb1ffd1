import pytest

from dpedu.notebook import explore, show_source, widgets_enabled


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
