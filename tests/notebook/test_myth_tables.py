"""The appendix's myth tables come in pairs, English then Chinese, row for row: each row's "where" must point
at the same lessons and parts in both languages (renumbered lessons are easy to miss in one of them)."""

import json
import re
from pathlib import Path

APPENDIX = Path(__file__).resolve().parents[2] / "notebooks" / "appendix_circulating_code.ipynb"


def _tables() -> list[list[str]]:
    """Every markdown table of the appendix, as the list of its rows' last cells (the "where" column)."""
    tables = []
    for cell in json.loads(APPENDIX.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        rows = []
        for line in "".join(cell["source"]).splitlines() + [""]:
            if line.startswith("|"):
                rows.append(line.strip().strip("|").split("|")[-1].strip())
            elif rows:
                tables.append(rows[2:])  # the header and the |---| line left out
                rows = []
    return tables


def _english(where: str) -> list[tuple[str, str]]:
    """("03", "6") for "lesson 03 part 6", ("", "2") for "part 2"; "parts 4 and 5" gives both."""
    found = []
    for lesson, parts in re.findall(r"(?:lesson (\d\d[ab]?) )?parts? (\d+(?: and \d+)?)", where):
        found += [(lesson, part) for part in re.findall(r"\d+", parts)]
    return found


def _chinese(where: str) -> list[tuple[str, str]]:
    found = []
    for lesson, parts in re.findall(r"(?:第 (\d\d[ab]?) 课)?第 (\d+(?:、\d+)?) 节", where):
        found += [(lesson, part) for part in re.findall(r"\d+", parts)]
    return found


def test_every_chinese_row_points_where_its_english_row_does():
    tables = _tables()
    pairs = [(tables[i], tables[i + 1]) for i in range(0, len(tables) - 1, 2)]
    assert len(pairs) == 2 and all(len(english) == len(chinese) > 5 for english, chinese in pairs)
    for english, chinese in pairs:
        for english_where, chinese_where in zip(english, chinese, strict=True):
            assert _english(english_where) and _english(english_where) == _chinese(chinese_where), (
                english_where, chinese_where)
