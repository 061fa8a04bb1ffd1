"""Slides for teachers: a lesson's notebook as a slide deck, built with its stored outputs, so it never
drifts from the notebook and nothing is computed to build it.

A new slide starts at each heading (``#``, ``##``, ``###``); the lesson's ``# NN · Title`` is the title
slide. Code cells are shown highlighted, with their stored outputs (text, tables, figures); the installing
first cell (``opened_alone.FIRST_CELL``) and nbval's marker comments are left out, and a widget, which
cannot move outside a kernel, is named instead. One self-contained HTML file per lesson: figures are
embedded, the few lines of script and style are in the page, nothing is fetched when it is shown, so it
works offline. Formulas (``$...$``, ``$$...$$``) are drawn by matplotlib's mathtext when the deck is built,
as pictures that grow with the text; one mathtext cannot draw stays as its TeX, in code type. What follows a
heading is cut into screens for a 4:3 projector (the heading repeated, marked "continued") between its parts,
a stretch of prose or a cell with its outputs; a part taller than the screen scrolls. A screen shows of a stretch
of prose its first paragraph (the claim), a paragraph that opens with a bold title and a last one that leads into
what follows ("Here they are:"), each with the lists, formulas and tables right after it; its other paragraphs
are the screen's speaker notes (41 of the course's 595 screens have notes: most stretches of prose between two
cells are one or two such paragraphs). A stretch of prose shares a screen with the code cell right after it
where the two fit. The text grows with the browser's zoom (Ctrl-+) as well as with the screen.

In the browser: Right, Space, PageDown or a click move on (Space and PageDown first scroll a long slide
to its end); Left, PageUp or a click near the left edge move back; Home and End; ``#5`` in the address
opens slide 5; N opens the speaker notes in a window of their own (drag it to the laptop's screen), which
follows the slides; where a browser blocks that window, N shows them under the slide instead. Print gives
each slide a new page, without the notes.

    ./course slides 03               # writes slides-03.html (lesson 03)
    ./course slides                  # every lesson and the appendix into slides/, with an index.html
    python -m dpedu.notebook.slides [LESSON [OUT.html]]
    python -m dpedu.notebook.slides all [FOLDER]
"""

from __future__ import annotations

import base64
import html
import json
import re
import sys
from pathlib import Path
from typing import NamedTuple

from dpedu.notebook.course import NOTEBOOKS, course_notebooks, lesson_id, study_minutes
from dpedu.notebook.opened_alone import FIRST_CELL, source

HEADING = re.compile(r"^(#{1,3})\s+(\S.*?)\s*#*\s*$")  # a new slide: '#', '##' or '###' (not '####')
FENCE = re.compile(r"^ {0,3}(```|~~~)")
NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_[A-Z_]+\s*$")  # '# NBVAL_IGNORE_OUTPUT' and its kin
WIDGET = "application/vnd.jupyter.widget-view+json"
# $$display$$ and $inline$ (within a paragraph: across a line break, not a blank line; "$5 and $6" is no formula)
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?=\S)((?:[^$\n]|\n(?!\s*\n))+?)(?<=\S)\$(?!\d)", re.S)
CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.S)
MATH_POINTS = 10  # the size formulas are drawn at, which one em of the slide's text stands for
SCREEN_LINES = 25  # about the lines of the slide's text under a heading at 1024 x 768 (calibrated in Chromium)
PROSE_CHARACTERS = 89  # characters of prose in one of those lines
CODE_LINE = 0.78  # a line of code, in those lines
CELL = '<div class="cell">'  # how a code cell with its outputs starts on a slide
FIGURE_LINES = 14  # a stored figure, scaled to the slide's width
# What a browser could fetch or run from a stored HTML output: such an output is shown as its text instead.
UNSAFE_HTML = re.compile(r"<\s*(script|link|iframe|object|embed)\b|\bsrc\s*=\s*[\"']?\s*(https?:)?//"
                         r"|url\(\s*[\"']?\s*(https?:)?//|@import", re.IGNORECASE)

_STYLE = """
html, body { margin: 0; height: 100%; background: #fff; color: #1d1d1d; }
/* rem grows with the browser's zoom, vh and vw with the screen: both, so that Ctrl-+ makes the text larger */
body { font: calc(0.5rem + min(1.6vh, 0.95vw))/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
.slide { display: none; position: fixed; inset: 0 0 2.2em 0; overflow: auto; padding: 1.2em 4vw 1.5em;
         box-sizing: border-box; outline: none; }
.slide.current { display: block; }
.slide > * { max-width: 78em; margin-left: auto; margin-right: auto; }
.slide.title h1 { font-size: 2.2em; margin-top: 1.5em; }
.slide .lesson { color: #666; }
h1 { font-size: 1.7em; } h2 { font-size: 1.5em; } h3 { font-size: 1.3em; }
h1, h2, h3 { margin: 0.2em auto 0.5em; line-height: 1.2; color: #0b3d66; }
code, pre { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono", monospace; }
:not(pre) > code { font-size: 0.9em; background: #f1f3f5; padding: 0 0.2em; border-radius: 3px; }
pre { font-size: 0.8em; line-height: 1.35; overflow-x: auto; padding: 0.6em 0.8em; margin: 0.4em 0;
      white-space: pre; }
.cell { margin: 0.8em auto; }
.input pre, .highlight pre { background: #f6f8fa; border-left: 4px solid #0b3d66; }
.output pre { background: #fff; border-left: 4px solid #c9d1d9; }
.output pre.stderr { background: #fff5f5; border-left-color: #d33; }
.output pre.error { background: #fff0f0; border-left-color: #b00; }
.output img { display: block; max-width: 100%; max-height: 78vh; width: auto; height: auto; margin: 0.4em 0; }
.output .note { color: #555; font-style: italic; }
img.math { display: inline; margin: 0; } .math.display { text-align: center; margin: 0.6em auto; }
.math.display img.math { font-size: 1.15em; }
.output_html pre { border-left: 4px solid #c9d1d9; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
.slide > table, .output table { display: block; overflow-x: auto; max-width: 100%; }
img { max-width: 100%; }
blockquote { border-left: 4px solid #ddd; margin-left: 0; padding-left: 1em; color: #444; }
footer { position: fixed; left: 0; right: 0; bottom: 0; height: 2.2em; display: flex; align-items: center;
         justify-content: space-between; padding: 0 1.5em; font-size: 0.7em; color: #666;
         border-top: 1px solid #e5e5e5; background: #fafafa; box-sizing: border-box; }
#more { color: #0b3d66; font-weight: 600; }
h1 .continued, h2 .continued, h3 .continued { font-size: 0.6em; font-weight: 400; color: #666; }
aside.notes { display: none; }
body.notes-here aside.notes { display: block; border-top: 2px dashed #bbb; margin-top: 1em; padding-top: 0.5em;
                              color: #444; font-size: 0.85em; }
@media print {
  aside.notes { display: none !important; }
  body { font-size: 11pt; }
  .slide { display: block; position: static; overflow: visible; padding: 0; break-after: page;
           page-break-after: always; }
  .slide:last-of-type { break-after: auto; page-break-after: auto; }
  .slide.title h1 { margin-top: 0; }
  pre { white-space: pre-wrap; overflow: visible; }
  .output img { max-height: none; break-inside: avoid; }
  footer { display: none; }
  @page { size: landscape; margin: 1.2cm; }
}
"""

_SCRIPT = """
(function () {
  var slides = document.querySelectorAll(".slide"), counter = document.getElementById("counter"),
      more = document.getElementById("more"), at = 0;
  function show(n) {
    n = Math.max(0, Math.min(slides.length - 1, n));
    slides[at].classList.remove("current");
    at = n;
    slides[at].classList.add("current");
    slides[at].scrollTop = 0;
    slides[at].focus({preventScroll: true});  // Up and Down then scroll a long slide
    counter.textContent = (at + 1) + " / " + slides.length;
    hint();
    notesFollow();
    if (location.hash !== "#" + (at + 1)) {
      try { history.replaceState(null, "", "#" + (at + 1)); } catch (e) { location.hash = "#" + (at + 1); }
    }
  }
  var notes = null;  // the speaker notes' window, once N opened it
  function notesOf(n) {
    var aside = n < slides.length ? slides[n].querySelector("aside.notes") : null;
    return aside ? aside.innerHTML : "<p><em>No notes: the slide shows it all.</em></p>";
  }
  function notesFollow() {
    if (!notes || notes.closed) { return; }
    var next = at + 1 < slides.length ? slides[at + 1].querySelector("h1, h2, h3") : null;
    notes.document.getElementById("where").textContent = "Slide " + (at + 1) + " / " + slides.length +
      (next ? "; next: " + next.textContent : "");
    notes.document.getElementById("notes").innerHTML = notesOf(at);
  }
  function openNotes() {  // a window of their own; where the browser blocks it, under the slide
    if (notes && !notes.closed) { notes.focus(); return; }
    notes = window.open("", "dpedu-notes", "width=760,height=560");
    if (!notes) { document.body.classList.toggle("notes-here"); hint(); return; }
    notes.document.title = "Notes: " + document.title;
    notes.document.body.innerHTML = '<p id="where"></p><div id="notes"></div>';
    notes.document.body.style.cssText = "font: 20px/1.5 system-ui, sans-serif; margin: 1em 1.5em;";
    notes.document.addEventListener("keydown", function (e) {  // the slides move from the notes' window too
      var key = e.key;
      if (key === "ArrowRight" || key === "PageDown" || key === " ") { show(at + 1); }
      else if (key === "ArrowLeft" || key === "PageUp") { show(at - 1); }
      else { return; }
      e.preventDefault();
    });
    notesFollow();
  }
  function hint() {  // a long slide says that it goes on below
    var s = slides[at];
    more.hidden = s.scrollHeight - s.clientHeight - s.scrollTop <= 2;
  }
  function fromAddress() {
    var n = parseInt(location.hash.slice(1), 10);
    show(isNaN(n) ? 0 : n - 1);
  }
  function scrollOr(step) {  // Space and PageDown show the rest of a long slide before moving on
    var s = slides[at], room = step > 0 ? s.scrollHeight - s.clientHeight - s.scrollTop : s.scrollTop;
    if (room > 2) { s.scrollBy(0, step * s.clientHeight * 0.85); } else { show(at + step); }
  }
  document.addEventListener("keydown", function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) { return; }
    var key = e.key;
    if (key === "ArrowRight") { show(at + 1); }
    else if (key === "ArrowLeft") { show(at - 1); }
    else if (key === "PageDown" || (key === " " && !e.shiftKey)) { scrollOr(1); }
    else if (key === "PageUp" || (key === " " && e.shiftKey)) { scrollOr(-1); }
    else if (key === "Home") { show(0); }
    else if (key === "End") { show(slides.length - 1); }
    else if (key === "n" || key === "N") { openNotes(); }
    else { return; }
    e.preventDefault();
  });
  document.addEventListener("click", function (e) {
    if (e.button !== 0 || e.target.closest("a, pre, code, table, details, footer")) { return; }
    if (String(window.getSelection())) { return; }  // selecting text to copy it
    show(e.clientX < window.innerWidth / 5 ? at - 1 : at + 1);
  });
  window.addEventListener("hashchange", fromAddress);
  window.addEventListener("resize", hint);
  for (var i = 0; i < slides.length; i++) { slides[i].addEventListener("scroll", hint); }
  fromAddress();
})();
"""


def lesson_notebook(lesson: str | int | Path, notebooks: str | Path = NOTEBOOKS) -> Path:
    """The notebook of ``lesson``: a lesson's number (3, "3" or "03"; "08a" for a lesson in two sittings),
    "appendix", or a notebook's path."""
    folder = Path(notebooks)
    text = str(lesson).strip()
    if isinstance(lesson, bool) or not text:
        raise ValueError(f"lesson must be a lesson's number, 'appendix' or a notebook's path, got {lesson!r}")
    if isinstance(lesson, int) or text.isdigit():
        pattern = f"{int(text):02d}_*.ipynb"
    elif re.fullmatch(r"\d+[a-z]", text):
        pattern = f"{int(text[:-1]):02d}{text[-1]}_*.ipynb"
    elif text == "appendix":
        pattern = "appendix_*.ipynb"
    else:
        path = Path(text)
        if path.suffix != ".ipynb" or not path.is_file():
            raise ValueError(f"lesson must be a lesson's number, 'appendix' or the path of a .ipynb file, "
                             f"got {lesson!r}")
        return path
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        have = ", ".join(lesson_id(p) for p in course_notebooks(folder)[0]) or "none"
        raise ValueError(f"lesson must be one of the lessons in {folder} ({have}) or 'appendix', got {lesson!r}")
    return found[0]


def _pieces(markdown: str) -> list[tuple[int, str]]:
    """``markdown`` cut before each heading outside code fences: (level of the heading, or 0, text)."""
    pieces: list[tuple[int, list[str]]] = [(0, [])]
    fenced = None
    for line in markdown.splitlines():
        fence = FENCE.match(line)
        if fence and fenced in (None, fence.group(1)):
            fenced = None if fenced else fence.group(1)
        heading = None if fenced else HEADING.match(line)
        if heading:
            pieces.append((len(heading.group(1)), [line]))
        else:
            pieces[-1][1].append(line)
    return [(level, "\n".join(lines)) for level, lines in pieces if level or "\n".join(lines).strip()]


def _markdown(text: str) -> str:
    from nbconvert.filters.markdown_mistune import markdown2html_mistune  # JupyterLab's nbconvert

    formulas: list[str] = []

    def hold(match: re.Match) -> str:  # markdown would read a formula's _ and * as emphasis
        formulas.append(_formula(match.group(1) or match.group(2), display=match.group(1) is not None))
        return f"DPEDUFORMULA{len(formulas) - 1}END"

    pieces = CODE.split(text)  # code spans and fences (odd pieces) keep their dollars
    text = "".join(piece if i % 2 else MATH.sub(hold, piece) for i, piece in enumerate(pieces))
    rendered = markdown2html_mistune(text)
    rendered = re.sub(r"DPEDUFORMULA(\d+)END", lambda m: formulas[int(m.group(1))], rendered)
    rendered = re.sub(r"<a class=\"anchor-link\"[^>]*>.*?</a>", "", rendered)  # the ¶ after each heading
    return re.sub(r"<(h[1-6]) id=\"[^\"]*\">", r"<\1>", rendered)  # '#n' is for slide numbers only


def _mathtext(tex: str) -> str:
    """``tex`` in the dialect of mathtext, which lacks a few of TeX's spellings: ``\\mathbb E`` for
    ``\\mathbb{E}``, ``\\frac12`` for ``\\frac{1}{2}``, ``\\tfrac``, and sized delimiters (``\\big(``)."""
    tex = " ".join(tex.split())
    tex = re.sub(r"\\mathbb\s*([A-Za-z])", r"\\mathbb{\1}", tex)
    tex = re.sub(r"\\[bB]igg?[lr]?(?=[()\[\]|.]|\\[{}|])", "", tex)
    tex = re.sub(r"\\[td]frac", r"\\frac", tex)
    return re.sub(r"\\frac\s*([0-9A-Za-z])\s*([0-9A-Za-z])", r"\\frac{\1}{\2}", tex)


def _formula(tex: str, display: bool) -> str:
    """A formula as an SVG picture sized in em (it grows with the text), its TeX as the alternative text; the
    TeX in code type where mathtext cannot draw it."""
    import io

    import matplotlib
    from matplotlib import mathtext
    from matplotlib.font_manager import FontProperties

    drawn = io.BytesIO()
    try:  # hashsalt: the same ids in every build; the metadata's date is left out below
        with matplotlib.rc_context({"svg.hashsalt": "dpedu", "svg.fonttype": "path"}):
            depth = mathtext.math_to_image(f"${_mathtext(tex)}$", drawn, format="svg",
                                           prop=FontProperties(size=MATH_POINTS))
    except ValueError:  # mathtext's parse errors
        shown = f"<code class=\"tex\">{html.escape(tex.strip())}</code>"
    else:
        svg = re.sub(r"<metadata>.*?</metadata>\s*", "", drawn.getvalue().decode(), flags=re.S)
        width, height = (float(re.search(rf'{side}="([\d.]+)pt"', svg).group(1)) for side in ("width", "height"))
        shown = (f"<img class=\"math\" src=\"data:image/svg+xml;base64,{base64.b64encode(svg.encode()).decode()}\" "
                 f"alt=\"{html.escape(tex.strip())}\" style=\"width: {width / MATH_POINTS:.2f}em; "
                 f"height: {height / MATH_POINTS:.2f}em; vertical-align: -{depth / MATH_POINTS:.2f}em\">")
    return f"<div class=\"math display\">{shown}</div>" if display else shown


def _highlighted(code: str) -> str:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name("ipython3")  # %magics and !commands too, where IPython's lexer is installed
    except ClassNotFound:
        lexer = get_lexer_by_name("python")
    return highlight(code, lexer, HtmlFormatter(cssclass="highlight"))


def _text(value: str | list[str]) -> str:
    return "".join(value) if isinstance(value, list) else value


def _pre(text: str, kind: str) -> str:
    from nbconvert.filters.ansi import ansi2html

    text = "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))  # what a carriage return left
    return f"<pre class=\"{kind}\">{ansi2html(text.rstrip())}</pre>"


def _output(output: dict) -> str:
    kind = output["output_type"]
    if kind == "stream":
        return _pre(_text(output["text"]), "stream stderr" if output.get("name") == "stderr" else "stream")
    if kind == "error":
        return _pre("\n".join(output.get("traceback") or [f"{output['ename']}: {output['evalue']}"]), "error")
    data = output.get("data", {})
    if WIDGET in data:
        return "<p class=\"note\">[An interactive widget: it moves only in the running notebook.]</p>"
    for mime in ("image/png", "image/jpeg", "image/svg+xml"):
        if mime in data:
            payload = _text(data[mime])
            payload = (base64.b64encode(payload.encode()).decode() if mime == "image/svg+xml"
                       else re.sub(r"\s", "", payload))
            return f"<img src=\"data:{mime};base64,{payload}\" alt=\"a figure of the notebook\">"
    if "text/html" in data and not UNSAFE_HTML.search(_text(data["text/html"])):
        return f"<div class=\"output_html\">{_text(data['text/html'])}</div>"
    if "text/markdown" in data:
        return _markdown(_text(data["text/markdown"]))
    for mime in ("text/plain", "text/latex"):
        if mime in data:
            return _pre(_text(data[mime]), "text")
    return ""


def _code_cell(cell: dict) -> str:
    code = "\n".join(line for line in source(cell).splitlines() if not NBVAL_MARKER.match(line)).strip("\n")
    shown = f"<div class=\"input\">{_highlighted(code)}</div>" if code.strip() else ""
    outputs = "".join(f"<div class=\"output\">{_output(output)}</div>" for output in cell.get("outputs", []))
    return f"{CELL}{shown}{outputs}</div>" if shown or outputs else ""


def _title(cells: list[dict], notebook: Path) -> str:
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for level, text in _pieces(source(cell)):
                if level == 1:  # as plain text, for the page's <title>
                    return html.unescape(re.sub(r"<[^>]+>", "", _markdown(text.splitlines()[0]))).strip()
    raise ValueError(f"notebook {notebook.name} has no title: its first heading should start with '# '")


def _blocks(markdown: str) -> list[str]:
    """``markdown`` cut at its blank lines outside code fences and display formulas: its paragraphs, lists,
    fences, formulas and tables, in order."""
    blocks: list[str] = []
    lines: list[str] = []
    fenced, display = None, False
    for line in markdown.splitlines():
        fence = FENCE.match(line)
        if fence and fenced in (None, fence.group(1)):
            fenced = None if fenced else fence.group(1)
        elif not fenced and line.count("$$") % 2:
            display = not display
        if line.strip() or fenced or display:
            lines.append(line)
        elif lines:
            blocks.append("\n".join(lines))
            lines = []
    return blocks + (["\n".join(lines)] if lines else [])


def _with_notes(markdown: str) -> str:
    """A stretch of prose as a slide shows it: its first paragraph (the claim), a paragraph that opens with a bold
    title (an experiment's name), and one that leads into what follows it ("Here they are:", the last paragraph or
    one a list, formula, table or code follows), each with the lists, formulas, tables and code right after it;
    its other paragraphs become the speaker notes."""
    blocks = _blocks(markdown)
    paragraphs = [i for i, block in enumerate(blocks) if not re.match(r"\s*([-*+]\s|\d+[.)]\s|\$\$|\||```|~~~|>)",
                                                                       block)]
    shown = set(range(paragraphs[0] if paragraphs else len(blocks)))  # what comes before the first paragraph
    for n, start in enumerate(paragraphs):
        end = paragraphs[n + 1] if n + 1 < len(paragraphs) else len(blocks)
        leads_in = blocks[start].rstrip().endswith(":") and (end == len(blocks) or end > start + 1)
        if n == 0 or blocks[start].lstrip().startswith("**") or leads_in:
            shown.update(range(start, end))
    on_slide, notes = ("\n\n".join(b for i, b in enumerate(blocks) if (i in shown) == keep) for keep in (True, False))
    return _markdown(on_slide) + (f"\n<aside class=\"notes\">{_markdown(notes)}</aside>" if notes else "")


def _lines(part: str) -> float:
    """About how many lines of the slide's text ``part`` fills on a 4:3 projector: a code line is smaller
    (``CODE_LINE``), a figure about ``FIGURE_LINES``, prose about ``PROSE_CHARACTERS`` characters a line; its
    speaker notes none."""
    part = re.sub(r"<aside class=\"notes\">.*?</aside>", "", part, flags=re.S)
    code = sum(pre.count("\n") + 1 for pre in re.findall(r"<pre\b.*?</pre>", part, re.S))
    rows = len(re.findall(r"<tr\b", part))
    prose = re.sub(r"<pre\b.*?</pre>|<table\b.*?</table>|<[^>]+>", "", part, flags=re.S)
    blocks = len(re.findall(r"<(p|li|h[1-6]|pre|table|img)\b", part))
    return (CODE_LINE * code + 1.2 * rows + len(html.unescape(prose).strip()) / PROSE_CHARACTERS + 0.5 * blocks
            + FIGURE_LINES * len(re.findall(r"<img (?!class=\"math\")", part)))


class Prose(NamedTuple):
    """A stretch of prose among a slide's parts, as markdown: ``_units`` renders it with its notes."""
    markdown: str


Part = str | Prose  # a slide's part: HTML, or a stretch of prose


def _is_code(part: Part) -> bool:
    return isinstance(part, str) and part.startswith(CELL)


def _units(parts: list[Part]) -> list[list[str]]:
    """A slide's parts as HTML, in the groups a screen never splits: a stretch of prose, cut into what the screen
    shows and its speaker notes (``_with_notes``), with the code cell right after it where the two fit a screen,
    so that the claim, the code and its outputs are on one screen and the explanation is in the notes; any other
    part alone. Joined also where the cell alone is taller than a screen, 88 screens scrolled instead of 60
    (measured before every lesson gained its hand-in cell): a screen that fits matters more. Prose was once left
    whole where no cell joined it, because a cut after the first paragraph sent the sentence that leads into the
    code to the notes in 32 of 54 such stretches, and an experiment's bold title in 9: ``_with_notes`` keeps both
    on the screen."""
    units: list[list[str]] = []
    for i, part in enumerate(parts):
        prose_before = i > 0 and isinstance(parts[i - 1], Prose)
        together = [units[-1][0], part] if _is_code(part) and prose_before else []
        if together and sum(map(_lines, together)) <= SCREEN_LINES:
            units[-1] = together
        else:
            units.append([_with_notes(part.markdown) if isinstance(part, Prose) else part])
    return units


def _screens(parts: list[Part], heading: bool) -> list[list[list[str]]]:
    """A slide's units (``_units``) cut into screens of at most ``SCREEN_LINES`` (a unit is never cut: a longer
    one scrolls); each screen after the first repeats the heading, marked "continued"."""
    units = _units(parts)
    again = ([[re.sub(r"</(h[1-6])>$", r' <span class="continued">(continued)</span></\1>', units[0][0].strip())]]
             if heading else [])  # what each screen after the first starts with
    screens: list[list[list[str]]] = [[]]
    used = 0.0
    for unit in units:
        need = sum(map(_lines, unit))
        if used + need > SCREEN_LINES and len(screens[-1]) > len(again):
            screens.append(list(again))
            used = sum(_lines(part) for repeated in again for part in repeated)
        screens[-1].append(unit)
        used += need
    return screens


def slides_html(notebook: str | Path) -> str:
    """The deck of ``notebook`` (a lesson's .ipynb, with its stored outputs) as one self-contained HTML page."""
    path = Path(notebook)
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"notebook must be the path of a .ipynb file, got {str(notebook)!r}")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    title = _title(cells, path)
    slides: list[tuple[int, list[Part]]] = []
    first_code = True
    for cell in cells:
        if cell["cell_type"] == "markdown":
            for level, text in _pieces(source(cell)):
                if level or not slides:
                    slides.append((level, []))
                heading, _, body = text.partition("\n") if level else ("", "", text)
                slides[-1][1].extend([_markdown(heading)] if heading.strip() else [])
                slides[-1][1].extend([Prose(body)] if body.strip() else [])
        elif cell["cell_type"] == "code":
            installing = first_code and source(cell) == FIRST_CELL
            first_code = False
            if not installing and (shown := _code_cell(cell)):
                if not slides:
                    slides.append((0, []))
                slides[-1][1].append(shown)
    about = (f"<p class=\"lesson\">About {study_minutes(path)} minutes to study · notebook "
             f"<code>{html.escape(path.name)}</code></p>")
    sections = []
    for level, parts in slides:
        if level == 1 and about:
            parts.insert(1, about)
            about = ""
        for n, screen in enumerate(_screens(parts, heading=bool(level))):
            kind = " title" if level == 1 and n == 0 else " continued" if n else ""
            cut = len(screen) - bool(level)  # what a screen could be cut into: its units under the heading
            sections.append(f"<section class=\"slide{kind}\" tabindex=\"-1\" data-parts=\"{cut}\">\n"
                            + "\n".join(part for unit in screen for part in unit) + "\n</section>")
    from pygments.formatters import HtmlFormatter

    style = _STYLE + HtmlFormatter().get_style_defs(".highlight")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
            + "\n".join(sections)
            + f"\n<footer><span>{html.escape(title)}</span><span id=\"more\" hidden>more below: scroll, or Space</span>"
            f"<span id=\"counter\">1 / {len(sections)}</span></footer>\n"
            f"<script>{_SCRIPT}</script>\n</body>\n</html>\n")


def write_slides(lesson: str | int | Path, out: str | Path | None = None, notebooks: str | Path = NOTEBOOKS) -> Path:
    """Write the deck of ``lesson`` (see ``lesson_notebook``) to ``out`` (default: slides-NN.html); its path."""
    notebook = lesson_notebook(lesson, notebooks)
    path = Path(out if out is not None else f"slides-{lesson_id(notebook)}.html")
    path.write_text(slides_html(notebook), encoding="utf-8")
    return path


def write_all(folder: str | Path = "slides", notebooks: str | Path = NOTEBOOKS) -> list[Path]:
    """A deck per lesson and one for the appendix in ``folder`` (slides-00.html, ...), and an index.html
    that links them; the paths of the decks."""
    source_folder = Path(notebooks)
    lessons = [notebook for kind in course_notebooks(source_folder) for notebook in kind]
    if not lessons:
        raise ValueError(f"notebooks must be the course's notebooks folder (lessons 00, 01, ...), got {source_folder}")
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise ValueError(f"folder must be a folder to write the decks into, got the file {str(folder)!r}")
    target.mkdir(parents=True, exist_ok=True)
    decks, links = [], []
    for notebook in lessons:
        deck = target / f"slides-{lesson_id(notebook)}.html"
        page = slides_html(notebook)
        deck.write_text(page, encoding="utf-8")
        decks.append(deck)
        title = html.unescape(re.search(r"<title>(.*?)</title>", page).group(1))
        links.append(f"<li><a href=\"{deck.name}\">{html.escape(title)}</a></li>")
    (target / "index.html").write_text(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>dpedu: slides</title>\n"
        "<style>body { font: 18px/1.5 system-ui, sans-serif; max-width: 48em; margin: 2em auto; padding: 0 1em; }"
        "</style>\n</head>\n<body>\n<h1>dpedu: slides, one deck per lesson</h1>\n<ul>\n" + "\n".join(links)
        + "\n</ul>\n</body>\n</html>\n", encoding="utf-8")
    return decks


USAGE = ("usage: python -m dpedu.notebook.slides [LESSON [OUT.html]]   (LESSON: 03, appendix or a notebook's path)\n"
         "       python -m dpedu.notebook.slides [all [FOLDER]]          (every lesson into FOLDER, default slides/)")


def main(argv: list[str]) -> None:
    if len(argv) > 2 or any(arg in ("-h", "--help") for arg in argv):
        raise SystemExit(USAGE)
    if not argv or argv[0] == "all":
        folder = Path(argv[1] if len(argv) == 2 else "slides")
        try:
            decks = write_all(folder)
        except ValueError as error:
            raise SystemExit(f"{error}\n{USAGE}") from None
        print(f"Wrote {len(decks)} decks and {folder / 'index.html'}: open one in a browser; "
              "arrow keys, Space or a click move, Print gives a page per slide.")
        return
    try:
        out = write_slides(argv[0], argv[1] if len(argv) == 2 else None)
    except ValueError as error:  # a mistyped lesson: say so, no traceback
        raise SystemExit(f"{error}\n{USAGE}") from None
    print(f"Wrote {out}: open it in a browser; arrow keys, Space or a click move, Print gives a page per slide.")


if __name__ == "__main__":
    main(sys.argv[1:])
