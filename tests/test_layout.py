"""dpedu's layout: one package per topic, which never import one another, and no import circle."""

import ast
from pathlib import Path

import dpedu

PACKAGE = Path(dpedu.__file__).resolve().parent
CONTENT = {"sgd", "data_parallel", "cluster", "beyond", "training_run", "frameworks"}  # the parts of the course
MACHINERY = {"runtime", "notebook"}


def _imports() -> dict[str, set[str]]:
    """Each module of dpedu (dotted) -> the modules of dpedu it imports, at the top or inside a function."""
    modules = {".".join(("dpedu", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): path
               for path in PACKAGE.rglob("*.py")}
    found = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dpedu"):
                targets |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("dpedu")}
        found[name] = {t for t in targets if t in modules and t != name}
    return found


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 else "top"


def test_content_packages_never_import_one_another_and_runtime_imports_none_of_them():
    crossings = [f"{module} -> {target}" for module, targets in _imports().items() for target in targets
                 if (_part(module) in CONTENT and _part(target) in CONTENT and _part(module) != _part(target))
                 or (_part(module) in MACHINERY and _part(target) in CONTENT)]
    assert not crossings


def test_no_module_imports_itself_through_a_circle():
    graph = _imports()
    graph = {m: {t for t in targets if t != "dpedu"} for m, targets in graph.items()}  # the package's face
    circles = []

    def visit(module, path):
        for target in graph[module]:
            if target in path:
                circles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(module)

    done: set[str] = set()
    for module in graph:
        if module not in done:
            visit(module, [module])
    assert not circles



def _private_crossings(source: str, importer: str) -> list[str]:
    """Imports in ``source`` (code of package ``importer``) of a ``_name`` from outside that package.

    A ``_name`` belongs to the package it sits in (``dpedu._validate`` to all of dpedu); that package and
    the packages inside it may import it."""
    crossings = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("dpedu"):
            for alias in node.names:
                parts = f"{node.module}.{alias.name}".split(".")
                first_private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
                if first_private is None:
                    continue
                owner = parts[:first_private]
                if not PACKAGE.joinpath(*owner[1:]).is_dir():  # a module's _name: its package owns it
                    owner = owner[:-1]
                if importer.split(".")[:len(owner)] != owner:
                    crossings.append(f"from {node.module} import {alias.name}")
    return crossings


def test_private_names_stay_inside_their_package():
    crossings = [f"{path.relative_to(PACKAGE)}: {crossing}" for path in PACKAGE.rglob("*.py")
                 for crossing in _private_crossings(path.read_text(),
                                                    ".".join(("dpedu", *path.relative_to(PACKAGE).parent.parts)))]
    assert not crossings
    # what the rule catches, and what it lets through
    assert _private_crossings("from dpedu.runtime.processes import _reap", "dpedu.cluster") == [
        "from dpedu.runtime.processes import _reap"]
    assert _private_crossings("from dpedu.runtime._rank import run_rank", "dpedu.sgd") != []
    assert _private_crossings("from dpedu.runtime._rank import run_rank", "dpedu.runtime") == []
    assert _private_crossings("from dpedu._validate import real", "dpedu.beyond") == []


def test_the_scripts_are_run_not_imported_by_the_rest_of_dpedu():
    # dpedu.scripts may import every part (as a notebook does); nothing imports a script, so that starting
    # one with `torchrun -m` is the only way it runs (lesson 13 imports train_addition only to show it)
    importing = [f"{module} -> {target}" for module, targets in _imports().items() for target in targets
                 if _part(target) == "scripts" and _part(module) != "scripts"]
    assert not importing
