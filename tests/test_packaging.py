"""`pip install dpedu` alone must give a dpedu whose every module imports: its dependencies cover its imports.
And dpedu's version moves whenever its files do: pip keeps an installed dpedu of the same version, so a wheel
built after a change would otherwise never replace the old one on a hub or in Colab."""

import ast
import hashlib
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
# dpedu.__version__ and a digest of the files the wheel carries at that version. After changing dpedu, raise the
# version, record the digest the failing test prints, and rewrite the notebooks' first cells (they ask for it).
RECORDED = ("0.2.8", "0ecbc27d2d77ce73")
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


def test_a_wheel_of_a_raised_version_replaces_the_installed_dpedu_and_one_of_the_same_version_does_not(tmp_path):
    """What a hub or Colab learner's pip does with the wheel built after a change (why the version must move)."""
    # built here without build isolation (nothing downloaded): with this interpreter's setuptools, which torch brings
    pytest.importorskip("setuptools", minversion="77", reason="pyproject.toml's SPDX license needs setuptools 77")
    project = tmp_path / "project"
    shutil.copytree(ROOT / "dpedu", project / "dpedu", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE", "LICENSE-CONTENT.md"):
        shutil.copy2(ROOT / name, project)
    init = project / "dpedu" / "__init__.py"
    original = init.read_text()
    venv.create(tmp_path / "env", with_pip=True)
    python = str(tmp_path / "env" / "bin" / "python")
    # pip as it comes: no PIP_FORCE_REINSTALL or configuration file of this machine's
    plain_pip = {**{k: v for k, v in os.environ.items() if not k.startswith("PIP_")}, "PIP_CONFIG_FILE": os.devnull}

    def wheel(version: str, build: str) -> Path:
        """A wheel of dpedu at ``version`` whose __init__.py ends with a line naming ``build``."""
        init.write_text(re.sub(r'^__version__ = ".+"$', f'__version__ = "{version}"', original, flags=re.M)
                        + f"# build {build}\n")
        out = tmp_path / build
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-w", str(out), str(project)], check=True, capture_output=True,
                       env=plain_pip)
        built = next(out.glob("dpedu-*.whl"))
        assert zipfile.ZipFile(built).read("dpedu/__init__.py").decode().endswith(f"# build {build}\n")  # not stale
        return built

    def install(path: Path) -> str:
        """pip install the wheel as a learner would (dependencies aside); the build the installed dpedu is."""
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                        str(path)], check=True, capture_output=True, env=plain_pip)
        where = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('dpedu').origin)"],
                               check=True, capture_output=True, text=True, cwd=tmp_path).stdout.strip()
        return Path(where).read_text().rsplit("# build ", 1)[1].strip()

    assert install(wheel("1.0.0", "first")) == "first"
    assert install(wheel("1.0.0", "changed")) == "first"  # same version: pip keeps what is installed
    assert install(wheel("1.0.1", "raised")) == "raised"
