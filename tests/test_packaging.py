"""`pip install dpedu` alone must give a dpedu whose every module imports: its dependencies cover its imports.
And dpedu's version moves whenever its files do: pip keeps an installed dpedu of the same version, so a wheel
built after a change would otherwise never replace the old one on a hub or in Colab."""

import ast
import hashlib
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
# dpedu.__version__ and a digest of the files the wheel carries at that version. After changing dpedu, raise the
# version, record the digest the failing test prints, and rewrite the notebooks' first cells (they ask for it).
RECORDED = ("0.2.1", "26b26f662922c0dd")
IMPORT_NAMES = {"sklearn": "scikit-learn", "IPython": "ipython"}  # where the import and the package differ


def third_party_imports() -> set[str]:
    found = set()
    for path in (ROOT / "dpedu").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {name for name in found if name not in sys.stdlib_module_names and name != "dpedu"}


def test_every_imported_package_is_a_declared_dependency():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!~ \[]", requirement)[0].lower() for requirement in declared}
    missing = {IMPORT_NAMES.get(name, name) for name in third_party_imports()} - names
    assert "torch" in names and not missing, f"dpedu imports packages pyproject.toml does not declare: {missing}"


def files_digest(package: Path = ROOT / "dpedu") -> str:
    """sha256 of every file of ``package`` that the wheel carries (its modules and package data), with its path."""
    digest = hashlib.sha256()
    for path in sorted(p for pattern in ("*.py", "*.sbatch", "*.txt") for p in package.rglob(pattern)):
        digest.update(f"{path.relative_to(package).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def test_the_version_moves_when_dpedu_does():
    import dpedu

    now = (dpedu.__version__, files_digest())
    assert now == RECORDED, (
        f"dpedu's files are not those recorded for {RECORDED[0]}: raise __version__ in dpedu/__init__.py (now "
        f"{dpedu.__version__}), set RECORDED in tests/test_packaging.py to (\"NEW\", digest of the files then), and "
        f"run python -m dpedu.notebook.opened_alone notebooks/*.ipynb. Digest now: {now[1]}")


def test_the_digest_sees_a_one_character_change(tmp_path):
    package = tmp_path / "dpedu"
    (package / "scripts").mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "1.0.0"\n')
    (package / "scripts" / "job.sbatch").write_text("#SBATCH --nodes=1\n")
    before = files_digest(package)
    (package / "scripts" / "job.sbatch").write_text("#SBATCH --nodes=2\n")
    assert files_digest(package) != before
    (package / "scripts" / "job.sbatch").write_text("#SBATCH --nodes=1\n")
    (package / "notes.md").write_text("not in the wheel")
    assert files_digest(package) == before


def test_the_changelog_says_what_this_version_changed():
    import dpedu

    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(dpedu.__version__)} \(\d{{4}}-\d\d-\d\d\)$", changelog, re.M), (
        f"CHANGELOG.md has no section for dpedu {dpedu.__version__}: add one, with its date, saying what changed")
