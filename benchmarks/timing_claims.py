"""CI's account of the lessons' timing claims: every judgement of every pass in one table, and a failure
when a claim went unchecked everywhere.

    .venv/bin/python benchmarks/timing_claims.py report .ci-timing-claims.jsonl
    .venv/bin/python benchmarks/timing_claims.py require .ci-timing-claims.jsonl

``dpedu.runtime.machine_load.timing_claim`` appends one JSON line per judgement to the file that
DPEDU_TIMING_CLAIMS names: the pass (DPEDU_CI_PASS), the cell (a fingerprint of its source), the claim, the
verdict (checked, checked under load, not checked, failed), the cause of a claim not checked, and the speed-up
measured. ``report`` prints them as one table, a row per claim and a column per pass (CI prints it on exit,
red runs too). ``require`` first reruns, alone and with nothing else of CI running, each lesson with a claim that
no pass checked, then prints the table and exits 1 if a claim is still unchecked, or if no claim was judged at
all (a record nobody wrote proves nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import busy_machine

from dpedu.runtime.machine_load import cell_fingerprint

CHECKED = {"checked", "checked under load"}
SHORT = {"checked": "checked", "checked under load": "held, busy", "failed": "FAILED"}


def cells() -> dict[str, tuple[str, int]]:
    """Each code cell of the lessons by its fingerprint: (notebook's lesson number or name, cell index)."""
    found = {}
    for path in sorted((busy_machine.ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":
                found[cell_fingerprint("".join(cell["source"]))] = (path.name.split("_")[0], index)
    return found


def read(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()] if record.exists() else []


def claims(entries: list[dict]) -> dict[tuple[str, str, str], dict[str, list[dict]]]:
    """(lesson, cell, claim) -> pass -> its judgements, in the lessons' order."""
    where = cells()
    table: dict[tuple[str, str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for entry in entries:
        lesson, index = where.get(entry["cell"] or "", ("?", "?"))
        table[(lesson, str(index), entry["claim"])][entry["pass"] or "-"].append(entry)
    return dict(sorted(table.items(), key=lambda item: (item[0][0], item[0][1].zfill(4), item[0][2])))


def verdict(judgements: list[dict]) -> str:
    """One pass's word on a claim: its best judgement (a claim judged twice in a pass was rerun)."""
    best = min(judgements, key=lambda e: ["checked", "checked under load", "failed", "not checked"].index(
        e["verdict"]))
    speedup = f" {best['speedup']:.2f}x" if best["speedup"] is not None else ""
    return SHORT.get(best["verdict"], f"not checked ({best['cause']})") + speedup


def report(entries: list[dict]) -> None:
    table = claims(entries)
    if not table:
        print("Timing claims: none judged.")
        return
    passes = sorted({p for row in table.values() for p in row})
    print(f"Timing claims ({len(table)}), by pass ({', '.join(passes)}); x: the speed-up two busy processes got:")
    for (lesson, index, claim), row in table.items():
        said = "; ".join(f"{p}: {verdict(row[p])}" for p in passes if p in row)
        print(f"  {lesson} cell {index:>3}  {claim}\n      {said}")
    unchecked = never_checked(table)
    print(f"{len(table) - len(unchecked)} of {len(table)} checked in at least one pass"
          + (f"; never checked: {', '.join(claim for _, _, claim in unchecked)}" if unchecked else ""))


def never_checked(table: dict) -> list[tuple[str, str, str]]:
    return [key for key, row in table.items()
            if not any(e["verdict"] in CHECKED for judgements in row.values() for e in judgements)]


def require(record: Path) -> int:
    unchecked = never_checked(claims(read(record)))
    lessons = sorted({lesson for lesson, _, _ in unchecked if lesson != "?"})
    if lessons:
        print(f"=== rerunning lesson(s) {' '.join(lessons)} alone: a claim there was checked in no pass", flush=True)
        os.environ["DPEDU_CI_PASS"] = "rerun alone"
        busy_machine.run([busy_machine.notebook(lesson) for lesson in lessons], together=False, busy_core=False)
    entries = read(record)
    report(entries)
    if not entries:
        print("No timing claim was judged in any pass: the record is empty, so nothing shows they were checked.")
        return 1
    still = never_checked(claims(entries))
    if still:
        print(f"FAILED: {len(still)} timing claim(s) checked in no pass, even rerun alone: each cell above says why")
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["report", "require"])
    parser.add_argument("record", type=Path, help="the file DPEDU_TIMING_CLAIMS named")
    options = parser.parse_args()
    if options.action == "report":
        report(read(options.record))
        return 0
    return require(options.record)


if __name__ == "__main__":
    sys.exit(main())
