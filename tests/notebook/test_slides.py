"""slides: each lesson as a deck, a slide per heading, every code cell (the installing one left out) with its
stored outputs, figures embedded, nothing fetched; and the deck works in a real Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from dpedu.notebook import slides
from dpedu.notebook.course import course_notebooks, lesson_id
from dpedu.notebook.opened_alone import FIRST_CELL

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
DECKS = [path for group in course_notebooks(NOTEBOOKS) for path in group]  # the lessons, then the appendix
CHROMIUM = os.environ.get("DPEDU_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # nothing fetched from outside


@pytest.fixture(scope="module")
def decks(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    """Each notebook's name -> a copy of it (what the tests compare with) and its deck, built from that copy."""
    folder = tmp_path_factory.mktemp("notebooks")
    copies = [Path(shutil.copy(notebook, folder)) for notebook in DECKS]
    return {copy.name: (copy, slides.slides_html(copy)) for copy in copies}


def cells_of(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def sections(deck: str, continued: bool = False) -> list[str]:
    """The deck's slides; without ``continued``, those a heading starts (not the screens that go on after it)."""
    return [body for kind, body in re.findall(r"<section class=\"slide([^\"]*)\"[^>]*>(.*?)</section>", deck, re.S)
            if continued or "continued" not in kind]


def headings(notebook: Path) -> list[str]:
    """The notebook's '#', '##' and '###' headings outside code fences, as plain text, in order."""
    found, fenced = [], False
    for cell in cells_of(notebook):
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).splitlines():
            if line.lstrip().startswith(("```", "~~~")):
                fenced = not fenced
            elif not fenced and re.match(r"#{1,3} ", line):
                found.append(line.lstrip("#").strip().replace("`", "").replace("*", ""))
    return found


@pytest.mark.parametrize("notebook", DECKS, ids=lesson_id)
def test_every_heading_is_a_slide_in_order_and_the_first_is_the_title(decks, notebook):
    notebook, deck = decks[notebook.name]
    shown = [text_of(re.search(r"<(h[1-3])>(.*?)</\1>", section, re.S).group(2)).strip()
             for section in sections(deck)]
    assert shown == headings(notebook)
    assert re.match(r"(\d\d[ab]?|Appendix) · ", shown[0]) and "<section class=\"slide title\"" in deck
    assert f"<title>{html.escape(shown[0], quote=False)}</title>" in deck
    assert f"1 / {len(sections(deck, continued=True))}</span>" in deck  # the counter


@pytest.mark.parametrize("notebook", DECKS, ids=lesson_id)
def test_every_code_cell_but_the_installing_one_is_shown_without_nbval_markers(decks, notebook):
    notebook, deck = decks[notebook.name]
    deck = text_of(deck)
    code = ["".join(cell["source"]) for cell in cells_of(notebook) if cell["cell_type"] == "code"]
    assert code[0] == FIRST_CELL and FIRST_CELL.splitlines()[0] not in deck
    for source in code[1:]:
        shown = "\n".join(line for line in source.splitlines() if not line.strip().startswith("# NBVAL_"))
        assert shown.strip() in deck, source[:200]
    assert "NBVAL_" not in deck


@pytest.mark.parametrize("notebook", DECKS, ids=lesson_id)
def test_stored_figures_are_embedded_and_nothing_is_fetched(decks, notebook):
    notebook, deck = decks[notebook.name]
    figures = [re.sub(r"\s", "", "".join(output["data"]["image/png"])) for cell in cells_of(notebook)
               for output in cell.get("outputs", []) if "image/png" in output.get("data", {})]
    assert deck.count("data:image/png;base64,") == len(figures)
    assert all(f"data:image/png;base64,{figure}\"" in deck for figure in figures)
    assert re.findall(r"<script\b[^>]*>", deck) == ["<script>"]  # the deck's own few lines, inline
    assert not re.search(r"<link\b|<iframe\b|@import|url\(\s*['\"]?(https?:)?//", deck, re.I)
    assert not re.search(r"\bsrc\s*=\s*[\"']?\s*(https?:)?//", deck, re.I)


@pytest.mark.parametrize("notebook", DECKS, ids=lesson_id)
def test_every_formula_is_drawn_and_none_is_left_as_tex(decks, notebook):
    notebook, deck = decks[notebook.name]
    prose = "".join("".join(cell["source"]) for cell in cells_of(notebook) if cell["cell_type"] == "markdown")
    prose = re.sub(r"```.*?```|`[^`\n]*`", "", prose, flags=re.S)
    drawn = re.findall(r"<img class=\"math\" src=\"data:image/svg\+xml;base64,[^\"]+\" alt=\"([^\"]*)\"", deck)
    assert len(drawn) == prose.count("$$") // 2 + (prose.count("$") - prose.count("$$") * 2) // 2
    assert 'class="tex"' not in deck  # mathtext drew every one
    shown = re.sub(r"<(code|pre)\b.*?</\1>|alt=\"[^\"]*\"|<script>.*?</script>", "", deck, flags=re.S)
    assert "$" not in text_of(shown)


def test_formulas_grow_with_the_text_keep_their_tex_and_stay_tex_where_mathtext_cannot_draw_them():
    rendered = slides._markdown("Noise $\\sigma^2/B$, `$HOME`, $$\\frac1N\\sum_r g_r$$ and $\\nocommand x$; $5 and $6.")
    pictures = re.findall(r"<img class=\"math\" src=\"data:image/svg\+xml;base64,([^\"]+)\" alt=\"([^\"]*)\" "
                          r"style=\"width: [\d.]+em; height: [\d.]+em; vertical-align: -[\d.]+em\">", rendered)
    assert [alt for _, alt in pictures] == ["\\sigma^2/B", "\\frac1N\\sum_r g_r"]
    assert "<code>$HOME</code>" in rendered and "$5 and $6." in rendered
    assert '<code class="tex">\\nocommand x</code>' in rendered
    assert '<div class="math display"><img' in rendered
    assert slides._markdown("$x^2$") == slides._markdown("$x^2$")  # the same bytes at every build
    assert b"<metadata>" not in __import__("base64").b64decode(pictures[0][0])


def test_a_made_up_notebook_shows_what_a_lesson_may_hold(tmp_path):
    def cell(kind, text, outputs=()):
        return {"cell_type": kind, "metadata": {}, "source": text,
                **({"outputs": list(outputs), "execution_count": 1} if kind == "code" else {})}

    notebook = tmp_path / "42_made_up.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        cell("markdown", "# 42 · Made up\n\nIntro with $x^2$."),
        cell("code", FIRST_CELL),
        cell("code", "# NBVAL_IGNORE_OUTPUT\nprint('<hi>')", [
            {"output_type": "stream", "name": "stdout", "text": ["<hi>\n"]},
            {"output_type": "stream", "name": "stderr", "text": "a warning\n"}]),
        cell("markdown", "Text before a heading.\n\n## Two\n\n```bash\n# not a heading\n```\n#### not a slide"),
        cell("code", "explore(draw)", [{"output_type": "display_data", "metadata": {}, "data": {
            slides.WIDGET: {"model_id": "abc"}, "text/plain": "interactive(children=...)"}}]),
        cell("code", "raise KeyError('weight')", [{"output_type": "error", "ename": "KeyError",
                                                   "evalue": "'weight'", "traceback": ["KeyError: 'weight'"]}]),
        cell("code", "page()", [{"output_type": "display_data", "metadata": {}, "data": {
            "text/html": "<script src=\"https://example.org/x.js\"></script>", "text/plain": "a page"}}]),
        cell("markdown", "### Three"),
    ]}))
    deck = slides.slides_html(notebook)
    assert [text_of(section.split("</h", 1)[0]).strip() for section in sections(deck)] == [
        "42 · Made up", "Two", "Three"]
    assert FIRST_CELL.splitlines()[0] not in deck and "NBVAL" not in deck and 'alt="x^2"' in deck  # drawn
    assert "&lt;hi&gt;</pre>" in deck and "<pre class=\"stream stderr\">a warning</pre>" in deck
    assert "Text before a heading." in sections(deck)[0] and "# not a heading" in deck and "<h4>" in deck
    assert "interactive widget" in deck and "interactive(children" not in deck
    assert "<pre class=\"error\">KeyError: &#39;weight&#39;</pre>" in deck
    assert "example.org" not in deck and "<pre class=\"text\">a page</pre>" in deck  # a script: its text instead


def cell(kind: str, text: str) -> dict:
    return {"cell_type": kind, "metadata": {}, "source": text,
            **({"outputs": [], "execution_count": 1} if kind == "code" else {})}


def made_up(tmp_path: Path, *cells: dict) -> str:
    notebook = tmp_path / "42_made_up.ipynb"
    notebook.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": list(cells)}))
    return slides.slides_html(notebook)


def notes_and_shown(section: str) -> tuple[str, str]:
    [notes] = re.findall(r"<aside class=\"notes\">(.*?)</aside>", section, re.S)
    return notes, section.replace(notes, "")


def test_a_slide_shows_the_claim_a_bold_title_and_a_lead_in_and_the_rest_of_the_prose_is_speaker_notes(tmp_path):
    deck = made_up(
        tmp_path,
        cell("markdown", "# 42 · Made up\n\n## Code\n\nThe claim.\n\n- a point\n\n$$x^2$$\n\nWhy, at length.\n\nMore."),
        cell("code", "print(1)"),
        cell("markdown", "## Prose only\n\nFirst.\n\nSecond, in the notes.\n\n**A title.** Its experiment.\n\n"
                         "Its reasons.\n\n- with a list\n\nWhat it runs:\n\n1. the run\n\nAnd why.\n\nHere it is:"),
        cell("markdown", "## Short\n\nOne paragraph, all there is."),
    )
    code, prose, short = sections(deck)[1:]
    notes, shown = notes_and_shown(code)
    assert "The claim." in shown and "<li>a point</li>" in shown and 'alt="x^2"' in shown and "print" in shown
    assert "Why, at length." in notes and "More." in notes and "Why" not in shown
    assert slides._lines(code) == slides._lines(shown)  # the notes take no room on the screen
    notes, shown = notes_and_shown(prose)  # prose no cell joins is cut alike
    assert all(kept in shown for kept in ("First.", "<strong>A title.</strong> Its experiment.", "What it runs:",
                                          "<li>the run</li>", "Here it is:"))
    assert all(noted in notes for noted in ("Second, in the notes.", "Its reasons.", "with a list", "And why."))
    assert not any(noted in shown for noted in ("Second", "reasons", "with a list", "why"))
    assert "One paragraph, all there is." in short and "notes" not in short  # nothing to cut


def test_a_bold_title_after_the_claim_stays_with_the_code_it_names(tmp_path):
    deck = made_up(
        tmp_path,
        cell("markdown", "# 42 · Made up\n\n## Errors\n\nThe fix of the last one.\n\n**A wrong address.** Nothing "
                         "listens there.\n\nSo the client retries."),
        cell("code", "print(1)"),
    )
    notes, shown = notes_and_shown(sections(deck)[1])
    assert "<strong>A wrong address.</strong> Nothing listens there." in shown and "print" in shown
    assert "So the client retries." in notes and "A wrong address" not in notes


def test_prose_shares_a_screen_with_the_cell_after_it_only_where_both_fit(tmp_path):
    tall = "\n".join(f"step_{n} = {n}" for n in range(int(slides.SCREEN_LINES / slides.CODE_LINE) + 5))
    deck = made_up(
        tmp_path,
        cell("markdown", "# 42 · Made up\n\n## Short\n\nThe claim.\n\nWhy, at length."),
        cell("code", "print(1)"),
        cell("markdown", "After the cell.\n\nIts second paragraph."),
        cell("markdown", "## Tall\n\nThe other claim.\n\nIts reasons."),
        cell("code", tall),
    )
    short, tall_prose, tall_cell = sections(deck, continued=True)[1:]
    assert "<aside class=\"notes\"><p>Why, at length.</p>" in short and "print" in short
    after_the_cell = short.split("print")[-1]  # prose no cell follows: a screen part of its own, cut alike
    assert "After the cell." in after_the_cell.split("<aside")[-2]
    assert "<aside class=\"notes\"><p>Its second paragraph.</p>" in after_the_cell
    # the cell alone is taller than a screen: the prose before it keeps a screen of its own
    assert "The other claim." in tall_prose and "Its reasons." in tall_prose and "step_0" not in tall_prose
    assert "step_0" in tall_cell and "The other claim." not in tall_cell
    assert '<h2>Tall <span class="continued">(continued)</span></h2>' in tall_cell  # styled small: its class


def test_a_lesson_is_found_by_number_or_path_and_anything_else_is_refused_by_name(tmp_path):
    first = DECKS[0]
    number = first.name[:2]
    assert slides.lesson_notebook(number) == slides.lesson_notebook(int(number)) == first
    assert slides.lesson_notebook(str(first)) == first
    assert slides.lesson_notebook("appendix").name.startswith("appendix_")
    assert slides.lesson_notebook("08a").name.startswith("08a_")
    assert slides.lesson_notebook("8b").name.startswith("08b_")
    with pytest.raises(ValueError, match=r"\(00, .*08a, 08b, .*\) or 'appendix', got '08'"):
        slides.lesson_notebook("08")  # a lesson in two sittings is asked for by either
    for wrong in ("99", "-1", "", "lesson 3", str(tmp_path / "missing.ipynb"), True):
        with pytest.raises(ValueError, match="^lesson must be"):
            slides.lesson_notebook(wrong)
    with pytest.raises(ValueError, match="^lesson must be"):
        slides.lesson_notebook(number, notebooks=tmp_path)
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match="^notebook must be"):
        slides.slides_html(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match="^notebooks must be"):
        slides.write_all(tmp_path / "out", notebooks=tmp_path)
    with pytest.raises(ValueError, match="^folder must be"):
        slides.write_all(tmp_path / "notes.txt")


def test_main_writes_one_lesson_or_every_lesson_and_an_index(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    number = DECKS[0].name[:2]
    slides.main([number])
    assert (tmp_path / f"slides-{number}.html").read_text().startswith("<!DOCTYPE html>")
    slides.main([number, "class.html"])
    assert (tmp_path / "class.html").read_text() == (tmp_path / f"slides-{number}.html").read_text()
    assert "Wrote class.html" in capsys.readouterr().out
    slides.main(["all", "decks"])
    written = sorted(path.name for path in (tmp_path / "decks").iterdir())
    assert len(written) == len(DECKS) + 1 and "index.html" in written
    index = (tmp_path / "decks" / "index.html").read_text()
    assert all(f"href=\"{name}\"" in index for name in written if name != "index.html")
    for wrong in (["99"], ["1", "2", "3"]):
        with pytest.raises(SystemExit, match="usage"):
            slides.main(wrong)


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_course_script_passes_its_arguments_on(tmp_path):
    """`./course slides ...` runs the module in the venv (a stand-in python that records its arguments)."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text('#!/bin/sh\n[ "$1 $2 $3" = "-m pip --version" ] && exit 0\n'
                      'echo "$*" >> "$(dirname "$0")/../calls"\n')
    python.chmod(0o755)
    for args, expected in (((), "-m dpedu.notebook.slides"), (("03", "a.html"), "-m dpedu.notebook.slides 03 a.html")):
        run = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"DPEDU_VENV={tmp_path}", shutil.which("bash"),
                              str(ROOT / "course"), "slides", *args], capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "calls").read_text().splitlines()[-1] == expected


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: install it (Debian: apt-get install chromium) or set "
                                              "DPEDU_CHROMIUM to a Chromium binary")
def test_the_deck_moves_with_the_keys_in_chromium_fetches_nothing_and_prints_a_page_per_slide(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements-test.txt)")
    deck = slides.write_slides(DECKS[0].name[:2], tmp_path / "deck.html")
    count = len(sections(deck.read_text(), continued=True))
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            problems: list[str] = []
            requested: list[str] = []
            page.on("console", lambda message: problems.append(f"console {message.type}: {message.text}")
                    if message.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on("requestfailed", lambda request: problems.append(f"failed: {request.url}"))
            page.on("request", lambda request: requested.append(request.url))
            page.goto(deck.as_uri())
            current = page.locator(".slide.current")
            assert page.inner_text("#counter") == f"1 / {count}" and current.count() == 1
            first = current.inner_text()
            assert first.startswith(DECKS[0].name[:2] + " · ") and page.locator(".slide").nth(1).is_hidden()
            page.keyboard.press("ArrowRight")
            assert page.inner_text("#counter") == f"2 / {count}" and page.url.endswith("#2")
            assert page.locator(".slide").nth(1).is_visible() and page.locator(".slide").nth(0).is_hidden()
            page.keyboard.press("ArrowLeft")
            assert page.inner_text("#counter") == f"1 / {count}" and current.inner_text() == first
            page.keyboard.press("End")
            assert page.inner_text("#counter") == f"{count} / {count}"
            page.goto(deck.as_uri() + "#3")
            assert page.inner_text("#counter") == f"3 / {count}"
            # N: the speaker notes in a window of their own, which follows the slides
            with page.expect_popup() as opened:
                page.keyboard.press("n")
            notes = opened.value
            assert notes.inner_text("#where").startswith(f"Slide 3 / {count}")
            with_notes = page.evaluate("() => Array.from(document.querySelectorAll('.slide')).findIndex("
                                       "s => s.querySelector('aside.notes'))")
            assert with_notes >= 0, "no slide of lesson 00 has speaker notes"
            page.goto(deck.as_uri() + f"#{with_notes + 1}")
            aside = page.locator(".slide").nth(with_notes).locator("aside.notes")
            assert aside.is_hidden()  # on the projector, the slide alone
            words = [" ".join(text.split()) for text in (notes.inner_text("#notes"), aside.inner_text())]
            assert words[0] == words[1] != ""  # laid out alike or not, the same text
            notes.keyboard.press("ArrowRight")  # the slides move from the notes' window too
            assert page.inner_text("#counter") == f"{with_notes + 2} / {count}"
            assert {url.split("#")[0] for url in requested} == {deck.as_uri()}  # the file itself, nothing else
            assert problems == []
            pdf = page.pdf()
            assert len(re.findall(rb"/Type\s*/Page[^s]", pdf)) >= count  # Print: each slide on new pages
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium: install it (Debian: apt-get install chromium) or set "
                                              "DPEDU_CHROMIUM to a Chromium binary")
def test_on_a_4_3_projector_only_a_single_part_taller_than_the_screen_scrolls(decks, tmp_path):
    """A slide whose units (prose, a cell with its outputs, or prose with the cell it leads to, joined only
    where they fit a screen by the estimate) are together taller than a screen is cut into screens; one unit
    alone may be taller, and scrolls (the counts are printed with -s)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (requirements-test.txt)")
    measure = """() => Array.from(document.querySelectorAll('.slide')).map((s, i) => {
        const shown = s.classList.contains('current'); s.classList.add('current');
        const size = [i + 1, s.scrollHeight, s.clientHeight, Number(s.dataset.parts)];
        if (!shown) { s.classList.remove('current'); } return size; })"""
    too_tall, screens = {}, 0
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1024, "height": 768})
            for name, (_, deck) in decks.items():
                (path := tmp_path / f"{name}.html").write_text(deck, encoding="utf-8")
                page.goto(path.as_uri())
                sizes = page.evaluate(measure)
                screens += len(sizes)
                too_tall[lesson_id(name)] = [(n, round(high / seen, 1), parts) for n, high, seen, parts in sizes
                                      if high > 1.15 * seen]  # "about a screen": the cut is estimated, not measured
        finally:
            browser.close()
    cuttable = {name: [slide for slide in tall if slide[2] > 1] for name, tall in too_tall.items()}
    assert not any(cuttable.values()), f"slides taller than the screen that could have been cut: {cuttable}"
    single = sum(len(tall) for tall in too_tall.values())
    print(f"{screens} screens; {single} hold one part taller than the screen and scroll: {too_tall}")
