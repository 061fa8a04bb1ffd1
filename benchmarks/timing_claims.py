"""CI's account of the lessons' timing claims: every judgement of every pass in one table, and a failure
when a claim went unchecked everywhere.

    .venv/bin/python benchmarks/timing_claims.py report .ci-timing-claims.jsonl
    .venv/bin/python benchmarks/timing_claims.py require .ci-timing-claims.jsonl [--reruns 2 --seconds-left 900]

``dpedu.runtime.machine_load.timing_claim`` appends one JSON line per judgement to the file that
DPEDU_TIMING_CLAIMS names: the pass (DPEDU_CI_PASS), the cell (a fingerprint of its source), the claim, the
verdict (checked, checked under load, not checked, failed), the cause of a claim not checked, and the speed-up
measured. ``report`` prints them as one table, a row per claim and the passes' words on it (CI prints it on
exit, red runs too); a lesson cell that judges timing claims but has no judgement in the record gets a row
too. ``require`` first reruns, alone and with nothing else of CI running, each lesson with a claim that no pass
checked on a machine that could show it (once, and again up to ``--reruns`` times in all while ``--seconds-left``
holds another rerun as long as the last: a cloud machine's host can keep it from showing a claim for minutes),
then prints the table and exits 1 if such a claim remains (a cell no pass reached counts), or if no claim was
judged at all (a record nobody wrote proves nothing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import busy_machine

from dpedu.notebook.course import lesson_id, timing_claim_cells
from dpedu.runtime.machine_load import cell_fingerprint

SHORT = {"checked": "checked", "checked under load": "held, busy", "failed": "FAILED"}
ORDER = ["failed", "checked", "checked under load", "not checked"]  # what a pass's word on a claim shows first
NONE_JUDGED = "(no claim judged in this cell)"


def notebooks() -> list[Path]:
    return sorted((busy_machine.ROOT / "notebooks").glob("*.ipynb"))


def cells() -> dict[str, tuple[str, str]]:
    """Each code cell of the lessons by its fingerprint: (lesson number or name, cell index)."""
    return {cell_fingerprint("".join(cell["source"])): (lesson_id(path), str(index)) for path in notebooks()
            for index, cell in enumerate(json.loads(path.read_text())["cells"]) if cell["cell_type"] == "code"}


def expected_cells() -> set[tuple[str, str]]:
    """(lesson, cell index) of every lesson cell that judges a timing claim."""
    return {(lesson_id(path), str(index)) for path in notebooks() for index in timing_claim_cells(path)}


def read(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()] if record.exists() else []


def claims(entries: list[dict]) -> dict[tuple[str, str, str], dict[str, list[dict]]]:
    """(lesson, cell, claim) -> pass -> its judgements, in the lessons' order; a cell that judges timing claims
    but has no judgement in the record gets a row with none."""
    where = cells()
    table: dict[tuple[str, str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for entry in entries:
        lesson, index = where.get(entry["cell"] or "", ("?", "?"))
        table[(lesson, index, entry["claim"])][entry["pass"] or "-"].append(entry)
    judged = {(lesson, index) for lesson, index, _ in table}
    for lesson, index in expected_cells() - judged:
        table[(lesson, index, NONE_JUDGED)] = defaultdict(list)
    return dict(sorted(table.items(), key=lambda item: (item[0][0], item[0][1].zfill(4), item[0][2])))


def verdict(judgements: list[dict]) -> str:
    """One pass's word on a claim: a failure if any, else its best judgement (a claim judged twice was rerun)."""
    first = min(judgements, key=lambda e: ORDER.index(e["verdict"]))
    speedup = f" {first['speedup']:.2f}x" if first["speedup"] is not None else ""
    return SHORT.get(first["verdict"], f"not checked ({first['cause']})") + speedup


def report(entries: list[dict]) -> None:
    table = claims(entries)
    if not table:
        print("Timing claims: none judged, and no lesson cell judges one.")
        return
    passes = sorted({p for row in table.values() for p in row})
    print(f"Timing claims ({len(table)}), by pass ({', '.join(passes)}); checked: on a machine that could show "
          f"it; held, busy: it held where the machine could not have shown it failing; x: the speed-up two busy "
          f"processes got:")
    for (lesson, index, claim), row in table.items():
        said = "; ".join(f"{p}: {verdict(row[p])}" for p in passes if p in row) or "judged in no pass"
        print(f"  {lesson} cell {index:>3}  {claim}\n      {said}")
    unchecked = never_checked(table)
    print(f"{len(table) - len(unchecked)} of {len(table)} checked in at least one pass"
          + (f"; not: {'; '.join(f'{lesson} cell {index}: {claim}' for lesson, index, claim in unchecked)}"
             if unchecked else ""))


def never_checked(table: dict) -> list[tuple[str, str, str]]:
    """The claims no pass checked on a machine that could show them (held on a busy one does not count: a
    claim such as "not twice as fast" is easier to hold there)."""
    return [key for key, row in table.items()
            if not any(e["verdict"] == "checked" for judgements in row.values() for e in judgements)]


def require(record: Path, reruns: int = 1, seconds_left: float = float("inf")) -> int:
    """Rerun alone each lesson with a claim no pass checked: once, then again, up to ``reruns`` times in all, while
    ``seconds_left`` holds another rerun as long as the last; 1 if a claim is still unchecked or nothing was judged.
    The table is printed however this ends."""
    started = time.monotonic()
    try:
        for attempt in range(1, reruns + 1):
            unchecked = never_checked(claims(read(record)))
            if not (lessons := sorted({lesson for lesson, _, _ in unchecked if lesson != "?"})):
                break
            print(f"=== rerunning lesson(s) {' '.join(lessons)} alone ({attempt} of at most {reruns}): a claim there "
                  f"was checked in no pass", flush=True)
            begun = time.monotonic()
            busy_machine.run([busy_machine.notebook(lesson) for lesson in lessons], together=False,
                             busy_core=False, record=record, ci_pass="rerun alone")
            if time.monotonic() - started + (time.monotonic() - begun) > seconds_left:
                break
    finally:
        entries = read(record)
        report(entries)
    if not entries:
        print("No timing claim was judged in any pass: the record is empty, so nothing shows they were checked.")
        return 1
    if still := never_checked(claims(entries)):
        print(f"FAILED: {len(still)} timing claim(s) checked in no pass, even with each lesson rerun alone (a claim "
              f"in a cell no lesson has, '?', cannot be rerun): each lesson's cell says why")
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["report", "require"])
    parser.add_argument("record", type=Path, help="the file DPEDU_TIMING_CLAIMS named")
    parser.add_argument("--reruns", type=int, default=1, help="require: rerun a lesson alone at most this often")
    parser.add_argument("--seconds-left", type=float, default=float("inf"),
                        help="require: no rerun after the first unless one as long as the last fits in this time")
    options = parser.parse_args()
    if options.action == "report":
        report(read(options.record))
        return 0
    if options.reruns < 1:
        parser.error(f"--reruns must be 1 or more, not {options.reruns}")
    return require(options.record, options.reruns, options.seconds_left)


if __name__ == "__main__":
    sys.exit(main())
