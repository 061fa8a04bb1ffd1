"""`pip install dpedu` alone must give a dpedu whose every module imports: its dependencies cover its imports."""

import ast
import re
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
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
