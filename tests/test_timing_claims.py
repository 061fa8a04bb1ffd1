"""CI's account of timing claims (benchmarks/timing_claims.py): one table of every pass's judgements, and a
failure when a claim went unchecked in every pass, even rerun alone, when a lesson cell that judges claims was
judged in no pass, or when nothing was judged at all."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import busy_machine  # noqa: E402
import timing_claims  # noqa: E402

from dpedu.notebook.course import lesson_id  # noqa: E402
from dpedu.runtime.machine_load import cell_fingerprint  # noqa: E402


def a_timing_cell() -> tuple[str, str, str]:
    """(lesson, index, fingerprint) of a real lesson cell that judges a timing claim."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and "timing_claim(" in source and "import" not in source:
                return lesson_id(path), str(index), cell_fingerprint(source)
    raise AssertionError("no lesson judges a timing claim")


def judgement(cell: str | None, claim: str, verdict: str, ci_pass: str, cause: str | None = None) -> str:
    return json.dumps({"pass": ci_pass, "cell": cell, "claim": claim, "verdict": verdict, "cause": cause,
                       "speedup": 1.2 if cause == "busy now" else 1.9}) + "\n"


def test_the_table_names_each_claims_lesson_and_cell_and_each_passs_verdict(tmp_path, monkeypatch, capsys):
    lesson, index, cell = a_timing_cell()
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: {(lesson, index)})
    record = tmp_path / "claims.jsonl"
    record.write_text(judgement(cell, "fast", "not checked", "1", "busy now")
                      + judgement(cell, "fast", "checked under load", "2") + judgement(cell, "fast", "checked", "3"))
    timing_claims.report(timing_claims.read(record))
    said = capsys.readouterr().out
    assert f"{lesson} cell {index:>3}  fast" in said
    assert "1: not checked (busy now) 1.20x; 2: held, busy 1.90x; 3: checked 1.90x" in said
    assert "1 of 1 checked in at least one pass" in said


def test_a_claim_checked_in_some_pass_passes_without_a_rerun(tmp_path, monkeypatch):
    _, _, cell = a_timing_cell()
    record = tmp_path / "claims.jsonl"
    record.write_text(judgement(cell, "fast", "not checked", "1", "busy now") + judgement(cell, "fast", "checked", "3"))
    monkeypatch.setattr(busy_machine, "run", lambda *args, **kwargs: pytest.fail("nothing to rerun"))
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: {a_timing_cell()[:2]})
    assert timing_claims.require(record) == 0


@pytest.mark.parametrize("rerun_verdict, code", [("not checked", 1), ("checked under load", 1), ("checked", 0)])
def test_a_claim_checked_in_no_pass_reruns_its_lesson_alone_and_fails_if_still_unchecked(
        tmp_path, monkeypatch, capsys, rerun_verdict, code):
    lesson, _, cell = a_timing_cell()
    record = tmp_path / "claims.jsonl"
    record.write_text(judgement(cell, "fast", "not checked", "1", "busy now")
                      + judgement(cell, "fast", "not checked", "2", "limit"))
    rerun = []
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: {a_timing_cell()[:2]})

    def run(notebooks, together, busy_core, record, ci_pass):
        assert ci_pass == "rerun alone" and not together and not busy_core
        rerun.extend(lesson_id(path) for path in notebooks)
        with open(record, "a") as file:
            file.write(judgement(cell, "fast", rerun_verdict, "rerun alone", "busy now"))

    monkeypatch.setattr(busy_machine, "run", run)
    assert timing_claims.require(record) == code
    assert rerun == [lesson]
    assert ("FAILED: 1 timing claim(s) checked in no pass" in capsys.readouterr().out) == (code == 1)


@pytest.mark.parametrize("seconds_left, code", [
    (1000, 0),  # a second rerun fits after the first's 300 s: checked then, and no third
    (500, 1),  # 300 s gone and another 300 s would pass the 500 left: no second rerun
])
def test_a_lesson_is_rerun_again_while_time_allows_until_its_claim_is_checked(tmp_path, monkeypatch, capsys,
                                                                              seconds_left, code):
    _, _, cell = a_timing_cell()
    record = tmp_path / "claims.jsonl"
    record.write_text(judgement(cell, "fast", "checked under load", "3", "busy now"))
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: {a_timing_cell()[:2]})
    verdicts = iter(["checked under load", "checked", "checked"])
    clock, rerun = {"now": 0.0}, []
    monkeypatch.setattr(timing_claims.time, "monotonic", lambda: clock["now"])

    def run(notebooks, together, busy_core, record, ci_pass):
        clock["now"] += 300
        rerun.append(ci_pass)
        with open(record, "a") as file:
            file.write(judgement(cell, "fast", next(verdicts), ci_pass, "busy now"))

    monkeypatch.setattr(busy_machine, "run", run)
    assert timing_claims.require(record, reruns=3, seconds_left=seconds_left) == code
    assert len(rerun) == (2 if code == 0 else 1)
    assert "(1 of at most 3)" in capsys.readouterr().out


def test_an_empty_record_fails_the_requirement(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: set())
    assert timing_claims.require(tmp_path / "never-written.jsonl") == 1
    assert "the record is empty" in capsys.readouterr().out


def test_a_failure_shows_before_a_success_of_the_same_pass_and_a_cell_judged_nowhere_fails(tmp_path, monkeypatch,
                                                                                            capsys):
    lesson, index, cell = a_timing_cell()
    record = tmp_path / "claims.jsonl"
    record.write_text(judgement(cell, "fast", "checked", "1") + judgement(cell, "fast", "failed", "1"))
    monkeypatch.setattr(timing_claims, "expected_cells", lambda: {(lesson, index), ("13b", "15")})
    monkeypatch.setattr(busy_machine, "run", lambda *args, **kwargs: None)
    assert timing_claims.require(record) == 1
    said = capsys.readouterr().out
    assert "1: FAILED" in said
    assert f"13b cell  15  {timing_claims.NONE_JUDGED}\n      judged in no pass" in said
