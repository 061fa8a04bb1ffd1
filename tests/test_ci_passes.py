"""CI's passes (.ci/run): pass 2 runs the unit tests whose subject is torch's own behaviour, pass 1 all of them."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOSTED_LEARNER = ROOT / ".ci" / "hosted_learner.py"


def _lists() -> dict[str, list[str]]:
    tree = ast.parse(HOSTED_LEARNER.read_text())
    return {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in ("ON_EVERY_TORCH", "ONCE")}


def _files(entries: list[str]) -> list[str]:
    named = []
    for entry in entries:
        path = ROOT / entry
        assert path.exists(), f"{entry} (named in {HOSTED_LEARNER.name}) does not exist"
        named += [str(p.relative_to(ROOT)) for p in sorted(path.rglob("test_*.py"))] if path.is_dir() else [entry]
    return named


def test_every_unit_test_file_is_named_once_for_pass_2_or_for_pass_1_alone():
    lists = _lists()
    every_torch, once = _files(lists["ON_EVERY_TORCH"]), _files(lists["ONCE"])
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))
    twice = sorted(set(every_torch) & set(once))
    missing = sorted(set(on_disk) - set(every_torch) - set(once))
    assert not twice, f"named both ON_EVERY_TORCH and ONCE in {HOSTED_LEARNER.name}: {twice}"
    assert not missing, (f"not named in {HOSTED_LEARNER.name}: {missing}; add each to ON_EVERY_TORCH if what it "
                         f"checks goes through an API that changes between torch releases, else to ONCE")
    assert sorted(every_torch + once) == on_disk


def test_the_check_finds_a_file_left_out_and_one_named_twice(monkeypatch):
    lists = _lists()
    left_out = {**lists, "ONCE": [e for e in lists["ONCE"] if e != "tests/sgd"]}
    named_twice = {**lists, "ONCE": [*lists["ONCE"], "tests/beyond/test_pipeline.py"]}
    for broken, words in ((left_out, "not named"), (named_twice, "named both")):
        monkeypatch.setitem(globals(), "_lists", lambda broken=broken: broken)
        try:
            test_every_unit_test_file_is_named_once_for_pass_2_or_for_pass_1_alone()
        except AssertionError as error:
            assert words in str(error)
        else:
            raise AssertionError(f"the check passed with {words!r} broken")
